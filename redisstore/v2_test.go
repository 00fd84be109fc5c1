package redisstore_test

// Tests of the store's v2 behaviour: the circuit breaker and the
// in-process fallback, per-decision errors, Redis out of memory, servers
// that refuse Functions, the cold start, the memory a client costs. Each
// runs against redis-server processes of its own (redistest).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// ctxClient returns a client of srv that applies context deadlines
// (ContextTimeoutEnabled), as the package documentation asks, closed when
// the test ends.
func ctxClient(t testing.TB, srv *redistest.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// eventually polls cond until it holds, for at most within, and returns
// how long that took; it fails the test if cond never held.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// noFunctionsClient creates, on srv, a user that may run everything but
// FUNCTION (as an ACL or a managed service may have it) and returns a
// client that logs in as that user.
func noFunctionsClient(t testing.TB, srv *redistest.Server) *redis.Client {
	admin := srv.Client(t)
	require.NoError(t, admin.Do(context.Background(),
		"ACL", "SETUSER", "limited", "on", "nopass", "~*", "&*", "+@all", "-function").Err())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "limited", Password: "any", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	err := rdb.FunctionLoad(context.Background(), "#!lua name=x\nredis.register_function('x', function() return 1 end)").Err()
	require.True(t, redis.HasErrorPrefix(err, "NOPERM"), "FUNCTION LOAD as the limited user: %v", err)
	return rdb
}

// hungServer returns the address of a server that accepts connections and
// never answers.
func hungServer(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// isTimeout reports the error of a decision that ran out of time: the
// context's deadline, as such or as the socket's.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// infoInt returns a numeric field of INFO section.
func infoInt(t testing.TB, rdb *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, line)
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// TestNewOnHungServer: a server that accepts connections but never
// answers holds New up for about two seconds at most, whether or not the
// client applies context deadlines itself; the store it returns has its
// circuit open and fails decisions at once.
func TestNewOnHungServer(t *testing.T) {
	addr := hungServer(t)
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			t.Parallel() // each waits out the start's bound: wait together
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { _ = rdb.Close() })
			start := time.Now()
			s, err := redisstore.New(rdb)
			took := time.Since(start)
			require.NoError(t, err)
			t.Logf("New returned in %v", took)
			assert.Less(t, took, 2500*time.Millisecond, "New is bounded at about 2 s")
			start = time.Now()
			_, err = bind(t, s, core.Limit{Rate: core.PerMinute(1)}).Take(context.Background(), "client", 1)
			assert.ErrorIs(t, err, redisstore.ErrUnavailable, "the circuit is open from the start")
			assert.Less(t, time.Since(start), 50*time.Millisecond)
		})
	}
}

// TestCircuitBreaker: while Redis hangs, the first decisions time out;
// after three in a row the circuit opens and decisions fail at once with
// ErrUnavailable (100 of them in well under one store timeout). When
// Redis answers again, decisions go back to it within a second, by
// themselves. The limiter logs the whole episode in two lines.
func TestCircuitBreaker(t *testing.T) {
	srv := redistest.Start(t)
	rdb := ctxClient(t, srv)
	const timeout = 50 * time.Millisecond
	store := newStore(t, rdb, nil, redisstore.WithTimeout(timeout))
	logs := &logRecorder{}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(1000)},
		core.WithStore(store), core.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.Take(ctx, "client", 1)
	require.NoError(t, err)

	srv.Pause(t)
	opened := -1
	for i := 0; i < 10 && opened < 0; i++ {
		start := time.Now()
		d, err := lim.Take(ctx, "client", 1)
		took := time.Since(start)
		require.Error(t, err)
		assert.True(t, d.Allowed, "fail open")
		if errors.Is(err, redisstore.ErrUnavailable) {
			opened = i
			continue
		}
		assert.True(t, isTimeout(err), "decision %d: %v", i, err)
		assert.Less(t, took, 2*time.Second, "decision %d: bounded by the store's timeout", i)
	}
	require.Equal(t, tripAfter, opened, "the circuit opens after three timeouts in a row")

	start := time.Now()
	for i := 0; i < 100; i++ {
		d, err := lim.Take(ctx, "client-"+strconv.Itoa(i), 1)
		require.ErrorIs(t, err, redisstore.ErrUnavailable)
		require.True(t, d.Allowed, "fail open")
	}
	took := time.Since(start)
	t.Logf("100 decisions with the circuit open: %v", took)
	assert.Less(t, took, 100*time.Millisecond, "an open circuit does not wait for Redis")
	msgs, _ := logs.messages("")
	assert.Equal(t, []string{"ratekit: store failing"}, msgs)

	srv.Resume(t)
	back := eventually(t, 10*time.Second, "decisions back in Redis", func() bool {
		_, err := lim.Take(ctx, "client", 1)
		return err == nil
	})
	t.Logf("decisions back in Redis %v after it resumed", back)
	assert.Less(t, back, time.Second)
	for i := 0; i < 20; i++ {
		_, err := lim.Take(ctx, "client-"+strconv.Itoa(i), 1)
		require.NoError(t, err, "the circuit stays closed")
	}

	msgs, values := logs.messages("failed_decisions")
	require.Equal(t, []string{"ratekit: store failing", "ratekit: store answering again"}, msgs, "one episode, two lines")
	failed, err := strconv.Atoi(values[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, failed, tripAfter+1+100, "every failed decision of the episode is counted")
}

// TestFallback: with WithFallback(2), a limit of 10 a minute admits 5
// requests per client from the in-process store while Redis hangs (each
// of two servers its half), and no decision fails once the circuit is
// open; when Redis answers again, decisions go back to the counts in
// Redis, as they were before the outage.
func TestFallback(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := ctxClient(t, srv)
			clock := storetest.NewClock(storetest.Epoch) // standing: nothing refills
			store := newStore(t, rdb, clock, redisstore.WithTimeout(50*time.Millisecond), redisstore.WithFallback(2))
			c := bind(t, store, core.Limit{Name: "api", Algorithm: alg, Rate: core.PerMinute(10)})
			ctx := context.Background()
			for i := 0; i < 3; i++ {
				d, err := c.Take(ctx, "alice", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.Equal(t, 10, d.Quota)
			}

			srv.Pause(t)
			// Another client's looks open the circuit: the decision that
			// opens it is the fallback's already.
			for i := 0; ; i++ {
				_, err := c.Peek(ctx, "opener", 1)
				if err == nil {
					require.Equal(t, tripAfter-1, i, "the third timeout opens the circuit")
					break
				}
				require.Less(t, i, tripAfter, "decisions go on failing: %v", err)
				require.True(t, isTimeout(err), "%v", err)
			}
			start := time.Now()
			admitted := 0
			for i := 0; i < 10; i++ {
				d, err := c.Take(ctx, "alice", 1)
				require.NoError(t, err, "request %d", i)
				assert.Equal(t, 5, d.Quota, "the fallback's share of the limit")
				if d.Allowed {
					admitted++
					assert.Equal(t, 4-i, d.Remaining)
				} else {
					assert.Positive(t, d.RetryAfter)
				}
			}
			assert.Equal(t, 5, admitted, "10 a minute over 2 servers")
			assert.Less(t, time.Since(start), 50*time.Millisecond, "the fallback does not wait for Redis")

			srv.Resume(t)
			var d core.Decision
			back := eventually(t, 10*time.Second, "decisions back in Redis", func() bool {
				var err error
				d, err = c.Peek(ctx, "alice", 0)
				require.NoError(t, err)
				return d.Quota == 10
			})
			t.Logf("decisions back in Redis %v after it resumed", back)
			assert.Less(t, back, time.Second)
			assert.Equal(t, 7, d.Remaining, "the counts in Redis are those before the outage")
			d, err := c.Take(ctx, "alice", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			assert.Equal(t, 6, d.Remaining)
		})
	}
}

// wrongType sets the key of client "bad" under l to a hash, on which the
// store's GET fails with WRONGTYPE, and then decides 1000 requests
// through one limiter, every other one for "bad" and the rest for ten
// other clients, 50 each, from the given number of goroutines (more than
// one: decisions share FCALLs). It returns the limiter's log, the
// admissions per other client and the FCALLs sent.
func wrongType(t *testing.T, goroutines int) (*logRecorder, map[string]int, int) {
	srv := redistest.Start(t)
	rdb := ctxClient(t, srv)
	ctx := context.Background()
	store := newStore(t, rdb, nil, redisstore.WithInFlight(1))
	l := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerHour(10)}
	key, err := store.Key(l, "bad")
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, key, "f", "v").Err())
	logs := &logRecorder{}
	lim, err := core.NewLimiter(l, core.WithStore(store), core.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 1000; i += goroutines {
				if i%2 == 0 {
					d, err := lim.Take(ctx, "bad", 1)
					if !assert.Error(t, err, "request %d", i) {
						return
					}
					assert.ErrorContains(t, err, "WRONGTYPE", "request %d", i)
					assert.NotErrorIs(t, err, redisstore.ErrUnavailable, "request %d: a key's error does not open the circuit", i)
					assert.True(t, d.Allowed, "fail open")
					continue
				}
				client := "good-" + strconv.Itoa(i/2%10)
				d, err := lim.Take(ctx, client, 1)
				if !assert.NoError(t, err, "request %d", i) {
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[client]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	fcalls := commandStats(t, rdb)["fcall"]
	typ, err := rdb.Type(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "hash", typ, "the store never overwrites a key it cannot read")
	return logs, admitted, fcalls
}

// TestWrongTypeKey: a key of the wrong type fails the decisions of its
// client only (WRONGTYPE, through the fail mode); the decisions of other
// clients, alone or in the same FCALLs, are right, and the circuit stays
// closed.
func TestWrongTypeKey(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		_, admitted, fcalls := wrongType(t, 1)
		assert.Equal(t, 1000, fcalls)
		assert.Len(t, admitted, 10)
		for client, n := range admitted {
			assert.Equal(t, 10, n, client)
		}
	})
	t.Run("batched", func(t *testing.T) {
		_, admitted, fcalls := wrongType(t, 32)
		t.Logf("1000 decisions in %d FCALLs", fcalls)
		assert.Less(t, fcalls, 1000, "decisions shared FCALLs")
		assert.Len(t, admitted, 10)
		for client, n := range admitted {
			assert.Equal(t, 10, n, client)
		}
	})
}

// TestWrongTypeLogLines: the decisions failing on one key, interleaved
// with the others' successes, are one failure episode for the limiter's
// log: at most two lines, not a line per request.
func TestWrongTypeLogLines(t *testing.T) {
	logs, _, _ := wrongType(t, 1)
	msgs, _ := logs.messages("")
	counts := map[string]int{}
	for _, m := range msgs {
		counts[m]++
	}
	t.Logf("%d log lines: %v", len(msgs), counts)
	assert.LessOrEqual(t, len(msgs), 2, "log lines for 500 failed decisions interleaved with 500 decided ones")
}

// TestOutOfMemory: Redis at maxmemory (noeviction) flooded with new
// clients. Clients with a key are still decided in Redis: one over its
// limit stays rejected, one under it is admitted and counted. A new
// client is decided by the in-process store, within the limit, and adds
// no key; no decision fails.
func TestOutOfMemory(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	rdb := ctxClient(t, srv)
	ctx := context.Background()
	store := newStore(t, rdb, nil, redisstore.WithLogger(slog.New(&logRecorder{})))
	l := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerHour(5)}
	c := bind(t, store, l)
	for i := 0; i < 6; i++ {
		d, err := c.Take(ctx, "alice", 1)
		require.NoError(t, err)
		require.Equal(t, i < 5, d.Allowed, "alice's request %d", i)
	}
	d, err := c.Take(ctx, "carol", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	// The flood: distinct new clients, 32 at a time, until a plain SET is
	// refused.
	var failed atomic.Int64
	var firstErr atomic.Value
	flooded := 0
	for oom := false; !oom; {
		require.Less(t, flooded, 500_000, "Redis never ran out of memory (used_memory %d)", infoInt(t, rdb, "memory", "used_memory"))
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func(base int) {
				defer wg.Done()
				for i := base; i < base+100; i++ {
					if _, err := c.Take(ctx, "flood-"+strconv.Itoa(i), 1); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}(flooded + g*100)
		}
		wg.Wait()
		flooded += 3200
		// Out of memory for good: a SET refused still once the flood's
		// buffers are freed.
		for i := 0; i < 2; i++ {
			err := rdb.Set(ctx, "probe", "x", 0).Err()
			oom = redis.HasErrorPrefix(err, "OOM")
			require.True(t, err == nil || oom, "%v", err)
			if !oom {
				break
			}
			settledMemory(t, rdb)
		}
	}
	require.Zero(t, failed.Load(), "flood decisions failed: %v", firstErr.Load())
	keys, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	t.Logf("out of memory after %d new clients, %d keys, used_memory %d", flooded, keys, infoInt(t, rdb, "memory", "used_memory"))

	d, err = c.Take(ctx, "alice", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "alice is decided in Redis, over her limit: not a fresh budget")
	assert.Positive(t, d.RetryAfter)
	d, err = c.Take(ctx, "carol", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "carol is decided in Redis")
	assert.Equal(t, 3, d.Remaining, "carol's second request is counted in Redis")

	for _, client := range []string{"bob", "dave"} {
		admitted := 0
		for i := 0; i < 8; i++ {
			d, err := c.Take(ctx, client, 1)
			require.NoError(t, err, "%s's request %d", client, i)
			assert.Equal(t, 5, d.Quota)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, 5, admitted, "%s, new, is decided in process, up to the limit", client)
	}
	after, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, keys, after, "no key added while Redis is out of memory")
	assert.True(t, redis.HasErrorPrefix(rdb.Set(ctx, "probe", "x", 0).Err(), "OOM"), "still out of memory")
}

// TestFunctionsRefused: a user whose ACL refuses FUNCTION gets a working
// store: New succeeds and loads the same code as scripts (SCRIPT LOAD:
// the script and the one that may write when Redis is out of memory), and
// decisions run it by EVALSHA, never FCALL; the conformance suite passes
// on that path.
func TestFunctionsRefused(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rdb := noFunctionsClient(t, srv)
	ctx := context.Background()
	s := newStore(t, rdb, nil)
	stats := commandStats(t, admin)
	assert.Equal(t, 2, stats["script|load"], "New loaded both scripts")
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	decisions := 0
	for _, alg := range algorithms {
		c := bind(t, s, core.Limit{Name: "api", Algorithm: alg, Rate: core.PerMinute(2)})
		for i := 0; i < 3; i++ {
			d, err := c.Take(ctx, "client", 1)
			require.NoError(t, err)
			assert.Equal(t, i < 2, d.Allowed, "%s request %d", alg, i)
			decisions++
		}
	}
	stats = commandStats(t, admin)
	assert.Equal(t, decisions, stats["evalsha"], "one EVALSHA per decision")
	assert.Zero(t, stats["eval"], "no EVAL: New loaded the script")
	assert.Zero(t, stats["fcall"]+stats["function|load"])
	libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	assert.Empty(t, libs)

	storetest.Run(t, func(t *testing.T, c *storetest.Clock) core.Store {
		return newStore(t, rdb, c)
	})
	assert.Zero(t, commandStats(t, admin)["fcall"])
}

// TestColdStart: the first decisions on a fresh server and a new store,
// with the default timeout, 32 at once on one key: none fails (New has
// loaded the code and opened the connections), and the count is exact.
func TestColdStart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := ctxClient(t, srv)
	store, err := redisstore.New(rdb)
	require.NoError(t, err)
	logs := &logRecorder{}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerHour(50)},
		core.WithStore(store), core.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	burst := func() (admitted, failed int) {
		var a, f atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := lim.Take(context.Background(), "client", 1)
				if err != nil {
					f.Add(1)
					t.Log(err)
				} else if d.Allowed {
					a.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		return int(a.Load()), int(f.Load())
	}
	admitted, failed := burst()
	assert.Zero(t, failed)
	assert.Equal(t, 32, admitted)
	admitted, failed = burst()
	assert.Zero(t, failed)
	assert.Equal(t, 18, admitted, "50 in all")
	msgs, _ := logs.messages("")
	assert.Empty(t, msgs)
}

// settledMemory returns INFO used_memory once four readings 50 ms apart
// agree: a dict that grew is rehashed incrementally, and keeps its old
// table until Redis's cron (every 100 ms) has moved every entry; a closed
// connection's buffers are freed when Redis gets to it.
func settledMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	last, same := infoInt(t, rdb, "memory", "used_memory"), 0
	for deadline := time.Now().Add(10 * time.Second); same < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("used_memory still changing after 10 s (%d)", last)
		}
		time.Sleep(50 * time.Millisecond) // Redis's cron, not a race, moves the memory
		n := infoInt(t, rdb, "memory", "used_memory")
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last
}

// onlyMeter waits until Redis has freed the connections of the stores
// that take closed, which it does when it reads their end: on a busy
// machine that can come after used_memory has looked settled, and their
// buffers are not the clients' cost.
func onlyMeter(t *testing.T, meter *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); infoInt(t, meter, "clients", "connected_clients") > 1; {
		if time.Now().After(deadline) {
			t.Fatalf("Redis still holds %d connections after 10 s", infoInt(t, meter, "clients", "connected_clients"))
		}
		time.Sleep(10 * time.Millisecond) // Redis's event loop, not a race
	}
}

// TestMemoryPerClient measures the Redis memory that one client costs
// under one limit, with the default key options (prefix "rk") and a limit
// named "api": INFO used_memory before and after one request each of
// 20,000 distinct clients (and of 100,000 with RATEKIT_MEASURE set), on a
// fresh server each time. Both readings are taken with the store's
// connections closed, whose buffers are not the clients' cost, and once
// Redis has finished rehashing (see settledMemory).
func TestMemoryPerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 60,000 decisions (360,000 with RATEKIT_MEASURE set)")
	}
	counts := []int{20_000}
	if measuring() {
		counts = append(counts, 100_000)
	}
	for _, alg := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingWindowCounter} {
		for _, clients := range counts {
			t.Run(fmt.Sprintf("%s/%d", alg, clients), func(t *testing.T) {
				srv := redistest.Start(t)
				meter := srv.Client(t)
				ctx := context.Background()
				// take sends one request for each of the clients from to to-1,
				// from a store of its own, and closes its connections.
				take := func(from, to int) {
					rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
					defer rdb.Close()
					store, err := redisstore.New(rdb, redisstore.WithTimeout(10*time.Second))
					require.NoError(t, err)
					// A day: no key expires while the test runs, even under -race.
					c := bind(t, store, core.Limit{Name: "api", Algorithm: alg, Rate: perDay(100)})
					const goroutines = 64
					var failed atomic.Int64
					var wg sync.WaitGroup
					for g := 0; g < goroutines; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := from + g; i < to; i += goroutines {
								if _, err := c.Take(ctx, "client-"+strconv.Itoa(i), 1); err != nil {
									failed.Add(1)
								}
							}
						}()
					}
					wg.Wait()
					require.Zero(t, failed.Load())
				}
				take(-1, 0) // loads the library, and Redis's structures for its first key
				keys0, err := meter.DBSize(ctx).Result()
				require.NoError(t, err)
				onlyMeter(t, meter)
				before := settledMemory(t, meter)

				take(0, clients)
				keys, err := meter.DBSize(ctx).Result()
				require.NoError(t, err)
				require.Equal(t, int64(clients), keys-keys0, "one key per client")
				onlyMeter(t, meter)
				after := settledMemory(t, meter)
				per := float64(after-before) / float64(clients)
				t.Logf("memory: %s, %d clients: %.1f bytes per client", alg, clients, per)
				assert.LessOrEqual(t, per, 140.0)
			})
		}
	}
}

// TestManySpecs: the library keeps the limits it parsed (a spec per
// limiter) and empties that cache when it holds 64; 100 limiters of
// different rates (buckets, which refill nothing in the test's few
// milliseconds), used in turn three times over, keep their own counts
// through every reset of the cache.
func TestManySpecs(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, ctxClient(t, srv), nil)
	ctx := context.Background()
	var lims []*core.Limiter
	for i := range 100 {
		l := core.Limit{Name: "spec-" + strconv.Itoa(i), Algorithm: core.TokenBucket, Rate: core.PerHour(10 + i)}
		lim, err := core.NewLimiter(l, core.WithStore(store))
		require.NoError(t, err)
		lims = append(lims, lim)
	}
	for round := 1; round <= 3; round++ {
		for i, lim := range lims {
			d, err := lim.Take(ctx, "alice", 2)
			require.NoError(t, err)
			require.True(t, d.Allowed, "limiter %d, round %d", i, round)
			assert.Equal(t, 10+i-2*round, d.Remaining, "limiter %d, round %d", i, round)
		}
	}
}
