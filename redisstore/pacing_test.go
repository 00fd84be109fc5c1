package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/stdhttp"
)

// The fleet pacing test: a ratekit server allows its callers, together,
// fleetRate requests per second, as one token bucket of fleetServerBurst;
// fleetInstances instances of a calling service, each with its own
// client.Transport and its own core.Limiter, share the server's rate
// through one limiter state (in Redis, or in one process's memory) and
// fire requests as fast as they can for fleetRun.
//
// The clients' limiter is a token bucket of the server's rate and half its
// burst. Both are GCRA meters on the same machine's clock (the server's
// memory store reads the system clock, Redis TIME reads the same one), so
// the requests the clients admit, at the instants of their Takes, conform
// to a bucket of rate R and burst fleetClientBurst. The server decides each
// of them a little later, after a delay d (the HTTP round trip, the
// scheduler) that varies; a sequence that conforms to a bucket of burst B,
// each element delayed by between d and d + J, conforms to a bucket of
// burst B + J×R. With the server's burst 50 requests larger, the server
// rejects none unless the delays vary by more than 50/R = 500 ms: the
// clients can never exceed the server's limit, however their requests
// interleave.
//
// The measured interval starts when the clients' limiters first admit a
// request (not when the test starts: scheduling goroutines on a loaded
// machine is no part of pacing) and lasts fleetRun. The requests the
// server admits in it were taken by the clients in it (a Take precedes its
// request), so they are at most the clients' burst plus R×fleetRun, plus
// one for the token at the interval's edge and one for the clocks (the
// first admission is seen when Take returns, after Redis decided it). The
// steady throughput is what the server admitted beyond the clients'
// initial burst, per second: it must be at least 95% of R. What it misses
// is what the clients took in the interval's last round trip, which
// reaches the server after it.
const (
	fleetRate        = 100 // requests per second, the server's limit
	fleetServerBurst = 100
	fleetClientBurst = 50
	fleetInstances   = 4
	fleetGoroutines  = 8 // per instance
	fleetRun         = 2 * time.Second
	fleetGrace       = 300 * time.Millisecond // for the first request, and so that none is missing at the end
)

// fleetServer is a ratekit server of the fleet's limit, which records when
// it admits requests and counts those it rejects.
type fleetServer struct {
	*httptest.Server
	rejected atomic.Int64
	mu       sync.Mutex
	admitted []time.Time
}

func newFleetServer(t *testing.T) *fleetServer {
	t.Helper()
	lim, err := core.NewLimiter(core.Limit{Name: "provider", Algorithm: core.TokenBucket,
		Rate: core.PerSecond(fleetRate), Burst: fleetServerBurst})
	require.NoError(t, err)
	s := &fleetServer{}
	everyone := func(*http.Request) (string, error) { return "all-callers", nil }
	handler := stdhttp.New(lim, everyone, stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, _ core.Decision) {
		s.rejected.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		at := time.Now()
		s.mu.Lock()
		s.admitted = append(s.admitted, at)
		s.mu.Unlock()
	}))
	s.Server = httptest.NewServer(handler)
	t.Cleanup(s.Close)
	return s
}

// admittedWithin returns how many requests the server admitted from start
// to start+d.
func (s *fleetServer) admittedWithin(start time.Time, d time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.admitted {
		if !at.Before(start) && at.Sub(start) <= d {
			n++
		}
	}
	return n
}

// clientLimit is the limit of the clients' limiters.
var clientLimit = core.Limit{Name: "provider-calls", Algorithm: core.TokenBucket,
	Rate: core.PerSecond(fleetRate), Burst: fleetClientBurst}

// fleetClock records when the clients' limiters first admitted a request
// and counts their decisions that failed.
type fleetClock struct {
	mu       sync.Mutex
	first    time.Time
	failures atomic.Int64
}

func (c *fleetClock) observe(e core.Event) {
	if e.Err != nil {
		c.failures.Add(1)
	}
	if e.Outcome != core.Allowed {
		return
	}
	now := time.Now()
	c.mu.Lock()
	if c.first.IsZero() {
		c.first = now
	}
	c.mu.Unlock()
}

func (c *fleetClock) First() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// runFleet runs the fleet against srv, instance i pacing with limiters[i],
// and checks and logs the figures. The limiters report to fc.
func runFleet(t *testing.T, name string, srv *fleetServer, fc *fleetClock, limiters []*core.Limiter) {
	var waits, sent429, limited atomic.Int64
	errs := make(chan error, fleetInstances*fleetGoroutines)
	var clients []*http.Client
	for _, lim := range limiters {
		conns := &http.Transport{MaxIdleConnsPerHost: fleetGoroutines}
		defer conns.CloseIdleConnections()
		rt, err := client.New(conns, client.WithLimiter(lim, nil), client.WithMaxRetries(0),
			client.WithObserver(func(client.Wait) { waits.Add(1) }))
		require.NoError(t, err)
		clients = append(clients, &http.Client{Transport: rt})
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(fleetRun+fleetGrace))
	defer cancel()
	var wg sync.WaitGroup
	for _, hc := range clients {
		for range fleetGoroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
					if err != nil {
						errs <- err
						return
					}
					resp, err := hc.Do(req)
					switch {
					case errors.Is(err, client.ErrLimited), ctx.Err() != nil:
						limited.Add(1) // the next token is past the run's end
						return
					case err != nil:
						errs <- err
						return
					}
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusTooManyRequests {
						sent429.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}

	first := fc.First()
	admitted := srv.admittedWithin(first, fleetRun)
	steady := float64(admitted-fleetClientBurst) / fleetRun.Seconds()
	t.Logf("%s: limit %d/s (server burst %d, clients' burst %d), %d instances × %d goroutines, "+
		"%s from the first admission (%s after the start): admitted %d = burst %d + %d, "+
		"steady %.1f/s = %.1f%% of the limit; %d rejected (429); %d limiter waits, %d requests stopped at the deadline",
		name, fleetRate, fleetServerBurst, fleetClientBurst, len(limiters), fleetGoroutines,
		fleetRun, first.Sub(start).Round(time.Millisecond), admitted, fleetClientBurst, admitted-fleetClientBurst,
		steady, 100*steady/fleetRate, srv.rejected.Load(), waits.Load(), limited.Load())

	require.Less(t, first.Sub(start), fleetGrace/2, "the first request came too late to measure a whole interval")
	assert.Zero(t, srv.rejected.Load(), "the server rejected requests")
	assert.Zero(t, sent429.Load(), "the clients saw 429s")
	assert.GreaterOrEqual(t, steady, 0.95*fleetRate, "steady throughput below 95%% of the limit")
	most := fleetClientBurst + int(fleetRate*fleetRun.Seconds()) + 2
	assert.LessOrEqual(t, admitted, most, "more than the clients' limiter admits: it is not shared")
	assert.Positive(t, waits.Load(), "the clients waited for the limiter")
	assert.Zero(t, fc.failures.Load(), "decisions failed: every one must be the shared limiter's")
}

// TestFleetPacingRedis: 4 instances of a service, each with its own Redis
// client, store and limiter on one Redis server, call a ratekit server
// whose limit they share: no 429, and at least 95% of the limit.
func TestFleetPacingRedis(t *testing.T) {
	rds := redistest.Start(t)
	var fc fleetClock
	var limiters []*core.Limiter
	for range fleetInstances {
		rdb := redis.NewClient(&redis.Options{Addr: rds.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		// A timeout that a loaded machine does not reach: a decision
		// taken without Redis would not be shared.
		store, err := redisstore.New(rdb, redisstore.WithTimeout(time.Second))
		require.NoError(t, err)
		lim, err := core.NewLimiter(clientLimit, core.WithStore(store), core.WithObserver(fc.observe))
		require.NoError(t, err)
		// Connected, and the library loaded, before the run: counts nothing.
		_, err = lim.Inspect(context.Background(), "warm-up")
		require.NoError(t, err)
		limiters = append(limiters, lim)
	}
	runFleet(t, "redis", newFleetServer(t), &fc, limiters)
}

// TestFleetPacingMemory: the same with 4 Transports of one process
// sharing one limiter in memory.
func TestFleetPacingMemory(t *testing.T) {
	var fc fleetClock
	lim, err := core.NewLimiter(clientLimit, core.WithObserver(fc.observe))
	require.NoError(t, err)
	limiters := make([]*core.Limiter, fleetInstances)
	for i := range limiters {
		limiters[i] = lim
	}
	runFleet(t, "memory", newFleetServer(t), &fc, limiters)
}

// TestFleetPacingRedisDown: with Redis gone, the clients' limiters fail
// open (the default) and every request is sent; the server's own limit
// still holds.
func TestFleetPacingRedisDown(t *testing.T) {
	rds := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rds.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb)
	require.NoError(t, err)
	var failures atomic.Int64
	lim, err := core.NewLimiter(clientLimit, core.WithStore(store), core.WithLogger(slog.New(slog.DiscardHandler)), core.WithObserver(func(e core.Event) {
		if e.Outcome == core.ErrorAllowed {
			failures.Add(1)
		}
	}))
	require.NoError(t, err)
	rds.Stop(t)

	srv := newFleetServer(t)
	rt, err := client.New(nil, client.WithLimiter(lim, nil))
	require.NoError(t, err)
	hc := &http.Client{Transport: rt}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := hc.Do(req)
		cancel()
		require.NoError(t, err, fmt.Sprint("request ", i))
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	assert.EqualValues(t, 3, failures.Load(), "each request was decided without the store")
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Len(t, srv.admitted, 3)
}
