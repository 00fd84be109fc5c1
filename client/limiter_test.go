package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// clientLimiter returns a limiter of lim in a memory store on clock, the
// clock a fakeClock's waits advance.
func clientLimiter(t *testing.T, clock *storetest.Clock, lim core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(lim, append([]core.Option{core.WithStore(&core.MemoryStore{Clock: clock.Now})}, opts...)...)
	require.NoError(t, err)
	return l
}

// TestLimiterWaits sends 6 requests at once through a limiter of 3 per
// minute: each wait is the RetryAfter (or, shaping, the Delay) of the
// algorithm, computed by hand, and the request after it is admitted.
func TestLimiterWaits(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name  string
		limit core.Limit
		waits []time.Duration
	}{
		// a token every 20s: requests 4, 5 and 6 wait for theirs
		{"token bucket", core.Limit{Algorithm: core.TokenBucket}, []time.Duration{20 * s, 20 * s, 20 * s}},
		// the next window, at 60s, admits 4, 5 and 6
		{"fixed window", core.Limit{Algorithm: core.FixedWindow}, []time.Duration{60 * s}},
		// the 3 requests logged at 0s expire at 60s
		{"sliding window log", core.Limit{Algorithm: core.SlidingWindowLog}, []time.Duration{60 * s}},
		// at 80s: 1 + 3 × (1 − 20/60) = 3; at 100s: 2 + 3 × (1 − 40/60) = 3; at 120s: 3 + 0
		{"sliding window counter", core.Limit{Algorithm: core.SlidingWindowCounter}, []time.Duration{80 * s, 20 * s, 20 * s}},
		// shaping: every request after the first is admitted with the
		// delay of its slot, 20s after the one before
		{"shaping leaky bucket", core.Limit{Algorithm: core.LeakyBucket, Shaping: true},
			[]time.Duration{20 * s, 20 * s, 20 * s, 20 * s, 20 * s}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, limited(http.StatusTooManyRequests, 0))
			serverClock := storetest.NewClock(now)
			tt.limit.Rate = core.PerMinute(3)
			lim := clientLimiter(t, serverClock, tt.limit)
			clock := sharedClock(serverClock)
			rt, rec := newTransport(t, nil, clock, client.WithLimiter(lim, nil), client.WithMaxWait(2*time.Minute))
			for range 6 {
				resp, err := get(t, rt, context.Background(), srv.URL)
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
			assert.Len(t, srv.Received(), 6)
			assert.Equal(t, tt.waits, clock.Waits())
			var want []client.Wait
			for _, d := range tt.waits {
				want = append(want, client.Wait{Host: srv.Host(), Duration: d, Attempt: 0, Source: client.SourceLimiter})
			}
			assert.Equal(t, want, rec.Waits())
		})
	}
}

// TestLimiterBeforeEachRetry: a retry takes from the limiter too, after the
// server's Retry-After.
func TestLimiterBeforeEachRetry(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "1"))
	serverClock := storetest.NewClock(now)
	lim := clientLimiter(t, serverClock, core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: 10 * time.Second}})
	clock := sharedClock(serverClock)
	rt, rec := newTransport(t, nil, clock, client.WithLimiter(lim, nil))
	resp, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// 0s: taken, 429; 1s: the Retry-After waited, the token is back at 10s
	assert.Equal(t, []client.Wait{
		{Host: srv.Host(), Duration: time.Second, Attempt: 1, Source: client.SourceRetryAfter},
		{Host: srv.Host(), Duration: 9 * time.Second, Attempt: 1, Source: client.SourceLimiter},
	}, rec.Waits())
	assert.Len(t, srv.Received(), 2)
}

// spent returns a limiter of one request per minute whose request is
// taken, on a fakeClock that advances it.
func spent(t *testing.T, key string) (*core.Limiter, *fakeClock) {
	t.Helper()
	serverClock := storetest.NewClock(now)
	lim := clientLimiter(t, serverClock, core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(1)})
	d, err := lim.Take(context.Background(), key, 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	return lim, sharedClock(serverClock)
}

func TestLimiterCancelDuringWait(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	lim, clock := spent(t, "k")
	clock.block = make(chan struct{})
	rt, rec := newTransport(t, nil, clock, client.WithLimiter(lim, func(*http.Request) string { return "k" }))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-clock.block
		cancel()
	}()
	body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("payload"))}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, body)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, client.ErrLimited)
	assert.True(t, body.closed.Load(), "the request body is closed")
	assert.Equal(t, []time.Duration{time.Minute}, clock.Waits())
	assert.Len(t, rec.Waits(), 1)
	assert.Empty(t, srv.Received())
}

// TestLimiterWaitTooLong: a wait past the deadline, or longer than the
// maximum wait, is not begun; the request is not sent.
func TestLimiterWaitTooLong(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	t.Run("deadline", func(t *testing.T) {
		lim, clock := spent(t, "k")
		rt, rec := newTransport(t, nil, clock, client.WithLimiter(lim, func(*http.Request) string { return "k" }))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("payload"))}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, body)
		require.NoError(t, err)
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		assert.Less(t, time.Since(start), 5*time.Second, "at once")
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, client.ErrLimited)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "a wait of 1m0s would outlast the deadline")
		assert.True(t, body.closed.Load(), "the request body is closed")
		assert.Empty(t, clock.Waits())
		assert.Empty(t, rec.Waits())
	})
	t.Run("max wait", func(t *testing.T) {
		lim, clock := spent(t, "k")
		rt, _ := newTransport(t, nil, clock, client.WithLimiter(lim, func(*http.Request) string { return "k" }),
			client.WithMaxWait(59*time.Second))
		_, err := get(t, rt, context.Background(), srv.URL)
		assert.ErrorIs(t, err, client.ErrLimited)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "a wait of 1m0s, more than the maximum 59s")
		assert.Empty(t, clock.Waits())
	})
	assert.Empty(t, srv.Received())
}

// TestLimiterKey: by default the normalized host, so that one host's
// spellings share a budget and other hosts have their own; or the key
// function's.
func TestLimiterKey(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	next := stub(func(r *http.Request) (int, http.Header) {
		mu.Lock()
		sent = append(sent, r.URL.String())
		mu.Unlock()
		return http.StatusOK, nil
	})
	serverClock := storetest.NewClock(now)
	lim := clientLimiter(t, serverClock, core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(1)})
	clock := sharedClock(serverClock)
	rt, rec := newTransport(t, next, clock, client.WithLimiter(lim, nil))
	for _, url := range []string{"https://API.example.com:443/a", "https://api.example.com/b", "https://api.example.com:8443/c"} {
		require.NoError(t, do(rt, context.Background(), url))
	}
	assert.Equal(t, []client.Wait{{Host: "api.example.com", Duration: time.Minute, Source: client.SourceLimiter}}, rec.Waits(),
		"the second spelling of the host waited, another port did not")

	byTenant := func(r *http.Request) string { return "tenant:" + r.Header.Get("X-Tenant") }
	rt, rec = newTransport(t, next, clock, client.WithLimiter(lim, byTenant))
	for _, url := range []string{"https://one.example/", "https://two.example/"} {
		require.NoError(t, do(rt, context.Background(), url))
	}
	assert.Equal(t, []client.Wait{{Host: "two.example", Duration: time.Minute, Source: client.SourceLimiter}}, rec.Waits(),
		"two hosts, one key: one budget")
	assert.Len(t, sent, 5)
}

func TestLimiterErrors(t *testing.T) {
	_, err := client.New(nil, client.WithLimiter(nil, nil))
	assert.ErrorContains(t, err, "ratekit/client: WithLimiter(nil)")

	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	lim, clock := spent(t, "k")
	rt, _ := newTransport(t, nil, clock, client.WithLimiter(lim, func(*http.Request) string { return "" }))
	_, err = get(t, rt, context.Background(), srv.URL)
	assert.ErrorIs(t, err, core.ErrMissingKey, "an empty key is the caller's error, not a wait")
	assert.NotErrorIs(t, err, client.ErrLimited)
	assert.Empty(t, clock.Waits())
	assert.Empty(t, srv.Received())
}

// brokenStore is a store whose counters fail every call, as a Redis that
// cannot be reached does.
type brokenStore struct{}

var errBroken = errors.New("store unreachable")

func (brokenStore) Bind([]core.Limit) (core.Counter, error) { return brokenCounter{}, nil }

type brokenCounter struct{}

func (brokenCounter) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errBroken
}
func (brokenCounter) Peek(context.Context, string, int, []core.Decision) error { return errBroken }
func (brokenCounter) Refund(context.Context, string, int, time.Time, []core.Decision) error {
	return errBroken
}
func (brokenCounter) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, errBroken
}
func (brokenCounter) Reset(context.Context, string) (bool, error) { return false, errBroken }
func (brokenCounter) Grant(context.Context, string, int, time.Duration) error {
	return errBroken
}

// TestLimiterStoreFailure: the limiter's fail mode decides. Open, every
// request is sent and the failure logged once; closed, the Transport waits
// the limiter's RetryAfter until the context ends.
func TestLimiterStoreFailure(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	t.Run("open", func(t *testing.T) {
		var logged bytes.Buffer
		lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithStore(brokenStore{}),
			core.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
		require.NoError(t, err)
		clock := newClock()
		rt, rec := newTransport(t, nil, clock, client.WithLimiter(lim, nil))
		for range 5 {
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		}
		assert.Len(t, srv.Received(), 5)
		assert.Empty(t, rec.Waits())
		assert.Equal(t, 1, strings.Count(logged.String(), "\n"), "one line for the episode: %s", logged.String())
		assert.Contains(t, logged.String(), "store unreachable")
	})
	t.Run("closed", func(t *testing.T) {
		lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithStore(brokenStore{}),
			core.WithFailClosed(), core.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		clock := newClock()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var waits []client.Wait
		rt, err := client.New(nil, client.WithClock(clock), client.WithLimiter(lim, nil),
			client.WithObserver(func(w client.Wait) {
				if waits = append(waits, w); len(waits) == 3 {
					cancel()
				}
			}))
		require.NoError(t, err)
		_, err = get(t, rt, ctx, srv.URL)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, []time.Duration{time.Second, time.Second, time.Second}, clock.Waits())
		for _, w := range waits {
			assert.Equal(t, client.Wait{Host: srv.Host(), Duration: time.Second, Source: client.SourceLimiter}, w)
		}
	})
	assert.Len(t, srv.Received(), 5, "nothing sent while failing closed")
}

// TestLimiterConcurrent: Transports sharing one limiter, used from many
// goroutines, send a request exactly when the limiter admits one, and wait
// only after a rejection.
func TestLimiterConcurrent(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	serverClock := storetest.NewClock(now)
	var allowed, denied atomic.Int64
	lim := clientLimiter(t, serverClock,
		core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: time.Second}, Burst: 5},
		core.WithObserver(func(e core.Event) {
			switch e.Outcome {
			case core.Allowed:
				allowed.Add(1)
			case core.Denied:
				denied.Add(1)
			}
		}))
	clock := sharedClock(serverClock)
	rec := &recorder{}
	var wg sync.WaitGroup
	errs := make(chan error, 4*4*10)
	for range 4 {
		rt, err := client.New(nil, client.WithClock(clock), client.WithObserver(rec.observe), client.WithLimiter(lim, nil))
		require.NoError(t, err)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					if err := do(rt, context.Background(), srv.URL); err != nil {
						errs <- err
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
	assert.Len(t, srv.Received(), 160)
	assert.EqualValues(t, 160, allowed.Load(), "one admission per request sent")
	assert.Positive(t, denied.Load())
	waits := rec.Waits()
	assert.NotEmpty(t, waits)
	assert.LessOrEqual(t, len(waits), int(denied.Load()), "at most one wait per rejection")
	for _, w := range waits {
		assert.True(t, w.Duration > 0 && w.Duration <= time.Second, "wait %s", w.Duration)
		assert.Equal(t, client.SourceLimiter, w.Source)
	}
}

// gatedStore is a memory store whose Take waits, once entered, until
// release is closed or its context ends, and records its context's error.
type gatedStore struct {
	mem      *core.MemoryStore
	entered  chan struct{}
	release  chan struct{}
	mu       sync.Mutex
	takeErrs []error
}

func (s *gatedStore) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.mem.Bind(limits)
	return gatedCounter{c, s}, err
}

type gatedCounter struct {
	core.Counter
	s *gatedStore
}

func (c gatedCounter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	c.s.entered <- struct{}{}
	select {
	case <-c.s.release:
	case <-ctx.Done():
	}
	c.s.mu.Lock()
	c.s.takeErrs = append(c.s.takeErrs, ctx.Err())
	c.s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return c.Counter.Take(ctx, key, cost, ds)
}

// TestLimiterCancelDuringTake: a request cancelled while the limiter's
// store decides it is not sent, and the store's call is not cut short:
// it is no store failure.
func TestLimiterCancelDuringTake(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	store := &gatedStore{mem: &core.MemoryStore{}, entered: make(chan struct{}), release: make(chan struct{})}
	var failures atomic.Int64
	lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(10)}, core.WithStore(store),
		core.WithLogger(slog.New(slog.DiscardHandler)),
		core.WithObserver(func(e core.Event) {
			if e.Err != nil {
				failures.Add(1)
			}
		}))
	require.NoError(t, err)
	rt, _ := newTransport(t, nil, newClock(), client.WithLimiter(lim, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := get(t, rt, ctx, srv.URL)
		done <- err
	}()
	<-store.entered
	cancel()
	close(store.release)
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, []error{nil}, store.takeErrs, "the store's call saw no cancellation")
	assert.Zero(t, failures.Load())
	assert.Empty(t, srv.Received())
}
