package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/stdhttp"
)

// logRecorder is a slog.Handler that keeps the records it is given.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}

// messages returns the messages logged so far and the value of attr in
// each ("" when absent).
func (h *logRecorder) messages(attr string) (msgs, values []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		msgs = append(msgs, r.Message)
		v := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == attr {
				v = a.Value.String()
			}
			return true
		})
		values = append(values, v)
	}
	return msgs, values
}

// slowClient is a client whose own read and write timeouts are far longer
// than the store's, so that only the store's timeout can bound a
// decision. ctxTimeouts sets ContextTimeoutEnabled.
func slowClient(t *testing.T, addr string, ctxTimeouts bool, timeout time.Duration) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		ContextTimeoutEnabled: ctxTimeouts,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// warmUp makes one decision through rdb with a generous timeout, so that
// the script is cached and a connection is open before a test measures
// anything with a short timeout on a loaded machine.
func warmUp(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	s := newStore(t, rdb, nil)
	_, err := bind(t, s, core.Limit{Name: "warm-up", Rate: core.PerMinute(1)}).Take(context.Background(), "warm-up", 0)
	require.NoError(t, err)
}

// settledGoroutines waits, polling, for the number of goroutines to fall
// to at most want, and returns the last count.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(15 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// TestHungRedisFailsOpenWithinTimeout: a Redis that accepts connections but
// never answers (a stopped process) delays each decision by the store's
// timeout at most, and only until the circuit opens: after three timeouts
// in a row decisions fail at once with ErrUnavailable. The limiter admits
// (fail open), logs one line for the whole episode, and when Redis answers
// again (the circuit's probe closes it) it limits again by itself and logs
// the count of failed decisions. No goroutine is left behind.
//
// It holds with a client that applies context deadlines to its reads
// (ContextTimeoutEnabled) and with one that does not, whose calls would
// otherwise wait for its 4 s ReadTimeout.
func TestHungRedisFailsOpenWithinTimeout(t *testing.T) {
	t.Run("ContextTimeoutEnabled", func(t *testing.T) { testHungRedis(t, true, 60*time.Second) })
	t.Run("ReadTimeout", func(t *testing.T) { testHungRedis(t, false, 4*time.Second) })
}

// tripAfter is the number of outage errors in a row that open the circuit.
const tripAfter = 3

func testHungRedis(t *testing.T, ctxTimeouts bool, clientTimeout time.Duration) {
	srv := redistest.Start(t)
	rdb := slowClient(t, srv.Addr(), ctxTimeouts, clientTimeout)
	warmUp(t, rdb)
	clock := storetest.NewClock(storetest.Epoch)
	const timeout = 50 * time.Millisecond
	store := newStore(t, rdb, clock, redisstore.WithTimeout(timeout))
	logs := &logRecorder{}
	var failedEvents atomic.Int64
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
		core.WithStore(store), core.WithLogger(slog.New(logs)),
		core.WithObserver(func(e core.Event) {
			if e.Outcome == core.ErrorAllowed {
				failedEvents.Add(1)
			}
		}))
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := lim.Take(ctx, "client", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := lim.Take(ctx, "client", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed, "limited before the outage")
	goroutines := runtime.NumGoroutine()

	srv.Pause(t)
	const during = 20
	for i := 0; i < during; i++ {
		start := time.Now()
		d, err := lim.Take(ctx, "client", 1)
		took := time.Since(start)
		require.Error(t, err)
		assert.True(t, d.Allowed, "fail open admits")
		if i < tripAfter {
			assert.True(t, isTimeout(err), "decision %d: %v", i, err)
			// Bounded by the store's timeout, not the client's; the
			// margin is for a loaded CI machine.
			assert.Less(t, took, 2*time.Second)
			continue
		}
		assert.ErrorIs(t, err, redisstore.ErrUnavailable, "decision %d: the circuit is open", i)
		assert.Less(t, took, timeout, "decision %d: an open circuit does not wait for Redis", i)
	}
	assert.Equal(t, int64(during), failedEvents.Load())
	msgs, _ := logs.messages("")
	assert.Equal(t, []string{"ratekit: store failing"}, msgs, "one line per episode, not per request")

	srv.Resume(t)
	resumed := time.Now()
	var after core.Decision
	for deadline := resumed.Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		// Fails fast (ErrUnavailable) until the probe closes the circuit.
		if after, err = lim.Take(ctx, "client", 1); err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err)
	back := time.Since(resumed)
	t.Logf("decisions back in Redis %v after it resumed", back)
	assert.Less(t, back, 2*time.Second, "the probe closes the circuit within about a second")
	assert.False(t, after.Allowed, "limiting resumes by itself, with the counts kept")
	msgs, values := logs.messages("failed_decisions")
	require.Len(t, msgs, 2)
	assert.Equal(t, "ratekit: store answering again", msgs[1])
	failed, err := strconv.Atoi(values[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, failed, during, "the count covers the episode (and the decisions refused until the circuit closed)")

	assert.LessOrEqual(t, settledGoroutines(goroutines), goroutines, "goroutines left behind by the outage (the probe included)")
}

// TestRestartedRedis: a Redis that crashed refuses connections (fail open
// at once, and fail fast once the circuit opens); once restarted, with its
// data and its functions gone, the circuit's probe loads the function
// library again and decisions are right again, each one FCALL that finds
// its function.
func TestRestartedRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := newStore(t, rdb, storetest.NewClock(storetest.Epoch), redisstore.WithTimeout(time.Second))
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerHour(2)},
		core.WithStore(store), core.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.Take(ctx, "client", 1)
	require.NoError(t, err)

	srv.Stop(t)
	for i := 0; i < 5; i++ {
		d, err := lim.Take(ctx, "client", 1)
		require.Error(t, err)
		assert.True(t, d.Allowed)
		if i >= tripAfter {
			assert.ErrorIs(t, err, redisstore.ErrUnavailable, "decision %d", i)
		} else {
			assert.NotErrorIs(t, err, redisstore.ErrUnavailable, "decision %d", i)
		}
	}

	srv.Restart(t)
	restarted := time.Now()
	var d core.Decision
	for deadline := restarted.Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if d, err = lim.Take(ctx, "client", 1); err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err)
	assert.Less(t, time.Since(restarted), 2*time.Second, "the probe closes the circuit within about a second")
	assert.True(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining, "a fresh server counts from zero")
	d, err = lim.Take(ctx, "client", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = lim.Take(ctx, "client", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 30*time.Minute, d.RetryAfter)

	stats, failed := commandStats(t, rdb), failedCalls(t, rdb)
	assert.Positive(t, stats["function|load"], "the probe loaded the library into the new process")
	assert.Equal(t, 3, stats["fcall"], "one FCALL per decision")
	assert.Zero(t, failed["fcall"], "no FCALL met a server without the library")
	assert.Zero(t, stats["eval"]+stats["evalsha"])
}

// TestScriptFlush: after FUNCTION FLUSH (as after a failover to a replica
// that never loaded the library) decisions go on without an error and
// with the counts kept: "Function not found" is answered by loading the
// library again and sending the FCALL once more. On a server that refuses
// Functions, where the store runs the script by EVALSHA, SCRIPT FLUSH is
// answered with EVAL, once.
func TestScriptFlush(t *testing.T) {
	// decide takes 2 of a sliding window log of 3, lets flush empty the
	// server's code, resets the command statistics and takes 2 more: the
	// first is admitted, the last, rejected.
	decide := func(t *testing.T, rdb *redis.Client, flush func(context.Context) error) {
		ctx := context.Background()
		c := bind(t, newStore(t, rdb, storetest.NewClock(storetest.Epoch)),
			core.Limit{Name: "api", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(3)})
		for i := 0; i < 2; i++ {
			_, err := c.Take(ctx, "client", 1)
			require.NoError(t, err)
		}
		require.NoError(t, flush(ctx))
		require.NoError(t, rdb.ConfigResetStat(ctx).Err())
		d, err := c.Take(ctx, "client", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Zero(t, d.Remaining)
		d, err = c.Take(ctx, "client", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
	}

	t.Run("FunctionFlush", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		decide(t, rdb, func(ctx context.Context) error { return rdb.FunctionFlush(ctx).Err() })
		stats, failed := commandStats(t, rdb), failedCalls(t, rdb)
		assert.Equal(t, 1, stats["function|load"], "the library loaded again, once")
		assert.Equal(t, 3, stats["fcall"], "FCALL for both decisions, one of them again after the load")
		assert.Equal(t, 1, failed["fcall"], "one FCALL found no function")
		assert.Zero(t, stats["eval"]+stats["evalsha"], "the store stays on Functions")
		libs, err := rdb.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: "ratekit_*"}).Result()
		require.NoError(t, err)
		assert.Len(t, libs, 1)
	})

	t.Run("ScriptFlush", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := noFunctionsClient(t, srv)
		decide(t, rdb, func(ctx context.Context) error { return rdb.ScriptFlush(ctx).Err() })
		stats := commandStats(t, srv.Client(t))
		assert.Equal(t, 1, stats["eval"], "one EVAL after NOSCRIPT")
		assert.Equal(t, 2, stats["evalsha"], "EVALSHA for both decisions (one answered NOSCRIPT)")
		assert.Zero(t, stats["fcall"]+stats["function|load"])
	})
}

// commandStats returns the calls per command from INFO commandstats
// (subcommands as "function|load").
func commandStats(t *testing.T, rdb *redis.Client) map[string]int {
	return commandStatsField(t, rdb, "calls")
}

// failedCalls returns the calls per command that answered an error.
func failedCalls(t *testing.T, rdb *redis.Client) map[string]int {
	return commandStatsField(t, rdb, "failed_calls")
}

func commandStatsField(t *testing.T, rdb *redis.Client, field string) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_fcall:calls=2,usec=...,rejected_calls=0,failed_calls=0
		line, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(line, ":")
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				n, err := strconv.Atoi(v)
				require.NoError(t, err, line)
				stats[name] = n
			}
		}
	}
	return stats
}

// roundTrips counts the commands a client sends, one per round trip.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// TestOneRoundTripPerDecision: every decision of every algorithm is one
// command, FCALL of the library that New loaded, and one round trip.
func TestOneRoundTripPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := &roundTrips{}
	rdb.AddHook(hook)
	ctx := context.Background()
	s := newStore(t, rdb, nil)
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	hook.n.Store(0)
	decisions := 0
	for _, alg := range algorithms {
		c := bind(t, s, core.Limit{Algorithm: alg, Rate: core.PerMinute(5)})
		for i := 0; i < 10; i++ {
			_, err := c.Take(ctx, "client", 1)
			require.NoError(t, err)
			_, err = c.Peek(ctx, "client", 1)
			require.NoError(t, err)
			decisions += 2
		}
	}
	assert.Equal(t, int64(decisions), hook.n.Load(), "commands sent")
	stats := commandStats(t, rdb)
	assert.Equal(t, decisions, stats["fcall"])
	assert.Zero(t, failedCalls(t, rdb)["fcall"])
	assert.Zero(t, stats["eval"]+stats["evalsha"]+stats["function|load"], "nothing but FCALL")
}

// TestFailClosedAnswers503: with the store down and the limiter failing
// closed, the middleware answers 503 with Retry-After and the
// temporary-reduced-capacity problem type.
func TestFailClosedAnswers503(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	warmUp(t, rdb)
	store := newStore(t, rdb, nil, redisstore.WithTimeout(100*time.Millisecond))
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(store), core.WithFailClosed(), core.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	h := stdhttp.New(lim, keyfuncs.PeerIP)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	get := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = net.JoinHostPort("192.0.2.7", "5555")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := get()
	require.Equal(t, http.StatusNoContent, w.Code)
	assert.Equal(t, "9", w.Header().Get("X-Ratelimit-Remaining"))

	srv.Stop(t)
	w = get()
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Empty(t, w.Header().Get("X-Ratelimit-Remaining"), "no counts to report while the store is down")
	var body struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", body.Type)
	assert.Equal(t, http.StatusServiceUnavailable, body.Status)
}

// TestFailOpenThroughMiddleware: with the default fail mode, requests pass
// while Redis is down.
func TestFailOpenThroughMiddleware(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	warmUp(t, rdb)
	store := newStore(t, rdb, nil, redisstore.WithTimeout(100*time.Millisecond))
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(1)},
		core.WithStore(store), core.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	h := stdhttp.New(lim, keyfuncs.PeerIP)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Stop(t)
	for i := 0; i < 5; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusNoContent, w.Code, "request %d", i)
	}
}

// TestStopMidTraffic kills Redis while eight goroutines send decisions
// without pause, then restarts it (empty, script cache gone): no call
// panics or hangs, every failed decision is admitted (fail open), and
// decisions succeed again after the restart without any intervention.
func TestStopMidTraffic(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	warmUp(t, rdb)
	store := newStore(t, rdb, nil, redisstore.WithTimeout(200*time.Millisecond))
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(1_000_000)},
		core.WithStore(store), core.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	goroutines := runtime.NumGoroutine()

	var ok, failed, deniedOnError atomic.Int64
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				d, err := lim.Take(context.Background(), "client-"+strconv.Itoa(i%50), 1)
				if took := int64(time.Since(start)); took > slowest.Load() {
					slowest.Store(took)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case d.Allowed:
					failed.Add(1)
				default:
					deniedOnError.Add(1)
				}
			}
		}()
	}
	// waitFor polls until cond holds; the bound only keeps a broken build
	// from hanging the suite.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("timed out waiting for %s (ok %d, failed %d)", what, ok.Load(), failed.Load())
			}
		}
	}
	waitFor("decisions before the crash", func() bool { return ok.Load() >= 200 })
	srv.Stop(t)
	okAtStop := ok.Load()
	waitFor("failed decisions", func() bool { return failed.Load() >= 200 })
	srv.Restart(t)
	waitFor("decisions after the restart", func() bool { return ok.Load() >= okAtStop+200 })
	close(stop)
	wg.Wait()

	assert.Zero(t, deniedOnError.Load(), "fail open admits every request whose decision failed")
	assert.Less(t, time.Duration(slowest.Load()), 2*time.Second, "each call is bounded by the store's timeout")
	assert.LessOrEqual(t, settledGoroutines(goroutines), goroutines)
}

// cutter is a TCP proxy in front of a Redis server. Armed, it forwards the
// next command named name (in the RESP of go-redis: "$5\r\nfcall\r\n") to
// the server, waits until the server has run it (ran reports so), and then
// breaks the client's connection before the answer can reach it.
type cutter struct {
	ln     net.Listener
	target string
	name   []byte // the command, as a RESP bulk string in lower case
	armed  atomic.Bool
	ran    func() bool
	sent   atomic.Int64 // commands named name forwarded
}

func startCutter(t *testing.T, target, name string, ran func() bool) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &cutter{ln: ln, target: target, ran: ran,
		name: []byte("$" + strconv.Itoa(len(name)) + "\r\n" + strings.ToLower(name) + "\r\n")}
	t.Cleanup(func() { _ = ln.Close() })
	go c.serve()
	return c
}

func (c *cutter) serve() {
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		var mute atomic.Bool // drop the answers: the connection is being cut
		go func() {          // answers, server to client
			defer client.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 && !mute.Load() {
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // commands, client to server
			defer server.Close()
			defer client.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					match := bytes.Contains(bytes.ToLower(buf[:n]), c.name)
					if match {
						c.sent.Add(1)
					}
					if match && c.armed.CompareAndSwap(true, false) {
						mute.Store(true)
						_, _ = server.Write(buf[:n])
						for deadline := time.Now().Add(10 * time.Second); !c.ran() && time.Now().Before(deadline); {
							time.Sleep(time.Millisecond) // polling Redis for the script's effect
						}
						return // closes both ends before the answer is relayed
					}
					if _, err := server.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestNoRetryAfterLostAnswer: when the connection breaks after Redis ran
// the function but before its answer arrived, the decision is an error
// (the limiter fails open) and the request is counted once: go-redis,
// whose MaxRetries would otherwise send the FCALL again, does not, and
// neither does the store. One such error does not open the circuit.
func TestNoRetryAfterLostAnswer(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := context.Background()
	l := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}
	var key, before string
	proxy := startCutter(t, srv.Addr(), "fcall", func() bool {
		v, _ := direct.Get(ctx, key).Result()
		return v != before // the state of one request more
	})
	rdb := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStore(t, rdb, storetest.NewClock(storetest.Epoch))
	key, _ = s.Key(l, "client")
	c := bind(t, s, l)

	d, err := c.Take(ctx, "client", 1)
	require.NoError(t, err)
	require.Equal(t, 9, d.Remaining)
	before, err = direct.Get(ctx, key).Result()
	require.NoError(t, err)
	sent := proxy.sent.Load()
	require.Positive(t, sent)

	proxy.armed.Store(true)
	_, err = c.Take(ctx, "client", 1)
	require.Error(t, err, "the answer was lost")
	assert.NotErrorIs(t, err, redisstore.ErrUnavailable)
	assert.True(t, proxy.ran(), "Redis ran the function")
	assert.Equal(t, sent+1, proxy.sent.Load(), "sent once")
	d, err = c.Peek(ctx, "client", 0)
	require.NoError(t, err, "a new connection works")
	assert.Equal(t, 8, d.Remaining, "counted once")

	d, err = c.Take(ctx, "client", 1)
	require.NoError(t, err)
	assert.Equal(t, 7, d.Remaining)
}

// TestConcurrentDecisionsShareRoundTrips: decisions that arrive while a
// round trip is on the wire go together in the next one, as one FCALL
// that decides them all (each still its own exact decision): 64
// goroutines fire 640 requests at a limit of 100, exactly 100 are
// admitted, in fewer round trips and fewer commands than decisions, one
// command per round trip.
func TestConcurrentDecisionsShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}) // pipelining needs it
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &roundTrips{}
	rdb.AddHook(hook)
	ctx := context.Background()
	s := newStore(t, rdb, nil, redisstore.WithInFlight(1))
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	hook.n.Store(0)
	for _, alg := range algorithms {
		c := bind(t, s, core.Limit{Name: "shared", Algorithm: alg, Rate: core.PerHour(100)})
		assert.Equal(t, 100, storetest.TakeConcurrently(t, []core.Counter{c.Counter}, 64, 10), alg)
	}
	decisions := 5 * 640
	trips := int(hook.n.Load())
	stats := commandStats(t, rdb)
	t.Logf("%d decisions in %d round trips, %d FCALLs", decisions, trips, stats["fcall"])
	assert.Less(t, trips, decisions/2, "round trips")
	assert.Equal(t, trips, stats["fcall"], "one command per round trip, carrying every decision in it")
	assert.Zero(t, failedCalls(t, rdb)["fcall"])
	assert.Zero(t, stats["eval"]+stats["evalsha"])
}

// TestInFlightOption: WithInFlight takes 1 to 1024 round trips.
func TestInFlightOption(t *testing.T) {
	rdb := offlineClient(t) // New on a refused address with go-redis's retries: TestOptionErrors
	for _, n := range []int{0, -1, 1025} {
		_, err := redisstore.New(rdb, redisstore.WithInFlight(n))
		assert.Error(t, err, n)
	}
	_, err := redisstore.New(rdb, redisstore.WithInFlight(8))
	assert.NoError(t, err)
}
