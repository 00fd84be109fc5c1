package overlimit

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// countingStore counts the calls that reach the store it wraps; its
// decisions are the wrapped store's. fail makes the next Take or Peek
// return an error after the store has decided.
type countingStore struct {
	inner                                   core.Store
	takes, peeks, refunds, inspects, resets atomic.Int64
	grants                                  atomic.Int64
	fail                                    atomic.Bool

	// When set, a Take that the store has decided signals entered and
	// waits for release before it returns.
	entered, release chan struct{}
}

func (s *countingStore) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.inner.Bind(limits)
	if err != nil {
		return nil, err
	}
	return &countingCounter{s: s, inner: c}, nil
}

// decisions returns the Take and Peek calls so far.
func (s *countingStore) decisions() int64 { return s.takes.Load() + s.peeks.Load() }

type countingCounter struct {
	s     *countingStore
	inner core.Counter
}

var errFailing = errors.New("store failing")

func (c *countingCounter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	c.s.takes.Add(1)
	at, err := c.inner.Take(ctx, key, cost, ds)
	if c.s.entered != nil {
		c.s.entered <- struct{}{}
		<-c.s.release
	}
	if c.s.fail.Swap(false) {
		return at, errFailing
	}
	return at, err
}

func (c *countingCounter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	c.s.peeks.Add(1)
	err := c.inner.Peek(ctx, key, cost, ds)
	if c.s.fail.Swap(false) {
		return errFailing
	}
	return err
}

func (c *countingCounter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	c.s.refunds.Add(1)
	return c.inner.Refund(ctx, key, cost, at, ds)
}

func (c *countingCounter) Inspect(ctx context.Context, key string, ds []core.Decision, gs []core.Grant) (bool, error) {
	c.s.inspects.Add(1)
	return c.inner.Inspect(ctx, key, ds, gs)
}

func (c *countingCounter) Reset(ctx context.Context, key string) (bool, error) {
	c.s.resets.Add(1)
	return c.inner.Reset(ctx, key)
}

func (c *countingCounter) Grant(ctx context.Context, key string, amount int, ttl time.Duration) error {
	c.s.grants.Add(1)
	return c.inner.Grant(ctx, key, amount, ttl)
}

// fixture is a memory store on a test clock, counted, and a Cache over it
// on the same clock.
type fixture struct {
	clock *storetest.Clock
	mem   *core.MemoryStore
	store *countingStore
	cache *Cache
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	f := &fixture{clock: storetest.NewClock(storetest.Epoch)}
	f.mem = &core.MemoryStore{Clock: f.clock.Now}
	f.store = &countingStore{inner: f.mem}
	c, err := New(f.store, append([]Option{WithClock(f.clock.Now)}, opts...)...)
	require.NoError(t, err)
	f.cache = c
	return f
}

// limiter returns a limiter of the given limits in the cache.
func (f *fixture) limiter(t *testing.T, lim core.Limit, more ...core.Limit) *core.Limiter {
	t.Helper()
	opts := []core.Option{core.WithStore(f.cache), core.WithLogger(quiet)}
	for _, l := range more {
		opts = append(opts, core.WithLimit(l))
	}
	l, err := core.NewLimiter(lim, opts...)
	require.NoError(t, err)
	return l
}

// bind returns a counter of the limits in the cache, and one of the same
// limits straight in the memory store, which shares its counts: the
// store's truth, asked with Peek.
func (f *fixture) bind(t *testing.T, limits ...core.Limit) (cached, truth core.Counter) {
	t.Helper()
	cached, err := f.cache.Bind(limits)
	require.NoError(t, err)
	truth, err = f.mem.Bind(limits)
	require.NoError(t, err)
	return cached, truth
}

// set sets the clock to d after the epoch.
func (f *fixture) set(d time.Duration) { f.clock.Set(storetest.Epoch.Add(d)) }

var ctx = context.Background()

// quiet drops the limiters' log lines of resets and grants.
var quiet = slog.New(slog.DiscardHandler)

// want is the part of a decision the traces check.
type want struct {
	allowed    bool
	remaining  int
	retry      time.Duration
	reset      time.Duration
	storeCalls int64 // Take and Peek calls that reached the store so far
}

func check(t *testing.T, f *fixture, step string, d core.Decision, w want) {
	t.Helper()
	assert.Equal(t, w.allowed, d.Allowed, "%s: allowed", step)
	assert.Equal(t, w.remaining, d.Remaining, "%s: remaining", step)
	assert.Equal(t, w.retry, d.RetryAfter, "%s: retry after", step)
	assert.Equal(t, w.reset, d.ResetAfter, "%s: reset after", step)
	assert.Equal(t, w.storeCalls, f.store.decisions(), "%s: store calls", step)
}

// TestFixedWindow: 5 per second from 0.2 s into a window. A rejection is
// cached until the window ends, its RetryAfter counting down; a smaller
// cost and cost 0 go to the store.
func TestFixedWindow(t *testing.T) {
	f := newFixture(t)
	limit := core.Limit{Name: "w", Algorithm: core.FixedWindow, Rate: core.PerSecond(5)}
	lim := f.limiter(t, limit)
	_, truth := f.bind(t, limit)
	take := func(cost int) core.Decision {
		t.Helper()
		d, err := lim.Take(ctx, "k", cost)
		require.NoError(t, err)
		return d
	}
	// agrees checks that the store itself, asked now, says what d says.
	agrees := func(cost int, d core.Decision) {
		t.Helper()
		ds := make([]core.Decision, 1)
		require.NoError(t, truth.Peek(ctx, "k", cost, ds))
		d.Policies = "" // the limiter's list, which a counter's decisions lack
		assert.Equal(t, ds[0], d, "the store's own answer")
	}
	ms := time.Millisecond

	f.set(200 * ms)
	for i := range 4 {
		check(t, f, "take "+strconv.Itoa(i), take(1), want{allowed: true, remaining: 4 - i, reset: 800 * ms, storeCalls: int64(i + 1)})
	}
	d := take(2)
	check(t, f, "cost 2 rejected by the store", d, want{remaining: 1, retry: 800 * ms, reset: 800 * ms, storeCalls: 5})

	f.set(300 * ms)
	d = take(3)
	check(t, f, "cost 3, cached", d, want{remaining: 1, retry: 700 * ms, reset: 700 * ms, storeCalls: 5})
	agrees(3, d)
	d = take(2)
	check(t, f, "cost 2, cached", d, want{remaining: 1, retry: 700 * ms, reset: 700 * ms, storeCalls: 5})
	agrees(2, d)
	d = take(1)
	check(t, f, "cost 1 below the cached cost: the store admits", d, want{allowed: true, remaining: 0, reset: 700 * ms, storeCalls: 6})
	d = take(1)
	check(t, f, "cost 1 rejected by the store", d, want{remaining: 0, retry: 700 * ms, reset: 700 * ms, storeCalls: 7})

	f.set(700 * ms)
	d = take(1)
	check(t, f, "cost 1, cached", d, want{remaining: 0, retry: 300 * ms, reset: 300 * ms, storeCalls: 7})
	agrees(1, d)
	d = take(0)
	check(t, f, "cost 0 goes to the store", d, want{allowed: true, remaining: 0, reset: 300 * ms, storeCalls: 8})

	f.set(999 * ms)
	d = take(1)
	check(t, f, "the last nanoseconds, cached", d, want{remaining: 0, retry: ms, reset: ms, storeCalls: 8})
	agrees(1, d)

	f.set(1000 * ms)
	d = take(1)
	check(t, f, "the next window, from the store", d, want{allowed: true, remaining: 4, reset: time.Second, storeCalls: 9})
}

// TestTokenBucket: 10 per second, burst 10. A rejection is cached for one
// emission interval (100 ms), after which the store admits.
func TestTokenBucket(t *testing.T) {
	f := newFixture(t)
	limit := core.Limit{Name: "b", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)}
	lim := f.limiter(t, limit)
	_, truth := f.bind(t, limit)
	take := func() core.Decision {
		t.Helper()
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		return d
	}
	ms := time.Millisecond

	for i := range 10 {
		check(t, f, "burst "+strconv.Itoa(i), take(), want{allowed: true, remaining: 9 - i, reset: time.Duration(i+1) * 100 * ms, storeCalls: int64(i + 1)})
	}
	check(t, f, "empty: rejected by the store", take(), want{retry: 100 * ms, reset: time.Second, storeCalls: 11})

	f.set(60 * ms)
	d := take()
	check(t, f, "cached", d, want{retry: 40 * ms, reset: 940 * ms, storeCalls: 11})
	ds := make([]core.Decision, 1)
	require.NoError(t, truth.Peek(ctx, "k", 1, ds))
	d.Policies = "" // the limiter's list, which a counter's decisions lack
	assert.Equal(t, ds[0], d, "the store's own answer")

	f.set(100 * ms)
	check(t, f, "one token back: the store admits", take(), want{allowed: true, reset: time.Second, storeCalls: 12})
	check(t, f, "empty again", take(), want{retry: 100 * ms, reset: time.Second, storeCalls: 13})

	// A second at 1000 requests per second: the store is asked once per
	// emission interval to admit, and once to reject.
	admitted := 0
	for i := 1; i <= 1000; i++ {
		f.set(100*ms + time.Duration(i)*ms)
		if take().Allowed {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted)
	assert.Equal(t, int64(13+10+9), f.store.decisions(), "admissions at 200, 300, ... 1100 ms; rejections at 201, ... 1001 ms")
}

// TestTwoLimits: a limiter of 2 per second and 5 per minute. The rejection
// by one is cached with the other limit's admission; when both reject, the
// entry lasts as long as the longer, and the shorter turns into an
// admission once its own RetryAfter has passed.
func TestTwoLimits(t *testing.T) {
	f := newFixture(t)
	second := core.Limit{Name: "second", Algorithm: core.FixedWindow, Rate: core.PerSecond(2)}
	minute := core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	c, truth := f.bind(t, second, minute)
	take := func(cost int) []core.Decision {
		t.Helper()
		ds := make([]core.Decision, 2)
		_, err := c.Take(ctx, "k", cost, ds)
		require.NoError(t, err)
		return ds
	}
	peekTruth := func(cost int) []core.Decision {
		t.Helper()
		ds := make([]core.Decision, 2)
		require.NoError(t, truth.Peek(ctx, "k", cost, ds))
		return ds
	}
	ms := time.Millisecond

	take(1)
	take(1)
	ds := take(1)
	check(t, f, "second rejects", ds[0], want{retry: time.Second, reset: time.Second, storeCalls: 3})
	check(t, f, "minute admits", ds[1], want{allowed: true, remaining: 2, reset: time.Minute, storeCalls: 3})

	f.set(500 * ms)
	ds = take(1)
	check(t, f, "second's rejection, cached", ds[0], want{retry: 500 * ms, reset: 500 * ms, storeCalls: 3})
	check(t, f, "minute's admission kept", ds[1], want{allowed: true, remaining: 2, reset: time.Minute - 500*ms, storeCalls: 3})
	assert.Equal(t, peekTruth(1), ds, "the store's own answer")

	f.set(time.Second)
	take(1)
	take(1)
	f.set(2 * time.Second)
	take(1) // second: 1 of 2, minute: 5 of 5
	ds = take(2)
	check(t, f, "cost 2: second rejects", ds[0], want{remaining: 1, retry: time.Second, reset: time.Second, storeCalls: 7})
	check(t, f, "cost 2: minute rejects", ds[1], want{remaining: 0, retry: 58 * time.Second, reset: 58 * time.Second, storeCalls: 7})

	f.set(2500 * ms)
	ds = take(2)
	check(t, f, "both cached: second", ds[0], want{remaining: 1, retry: 500 * ms, reset: 500 * ms, storeCalls: 7})
	check(t, f, "both cached: minute", ds[1], want{remaining: 0, retry: 57500 * ms, reset: 57500 * ms, storeCalls: 7})
	assert.Equal(t, peekTruth(2), ds, "the store's own answer")

	f.set(3500 * ms)
	ds = take(2)
	check(t, f, "second's rejection over: an admission", ds[0], want{allowed: true, remaining: 1, storeCalls: 7})
	check(t, f, "minute, cached", ds[1], want{remaining: 0, retry: 56500 * ms, reset: 56500 * ms, storeCalls: 7})
	assert.Equal(t, peekTruth(2)[1], ds[1], "the store's own answer for the deciding limit")

	ds = take(1)
	check(t, f, "cost 1, below the cached cost, from the store: second", ds[0], want{allowed: true, remaining: 1, reset: 500 * ms, storeCalls: 8})
	check(t, f, "cost 1, from the store: minute", ds[1], want{remaining: 0, retry: 56500 * ms, reset: 56500 * ms, storeCalls: 8})

	f.set(59999 * ms)
	ds = take(1)
	check(t, f, "cost 1 cached: minute", ds[1], want{remaining: 0, retry: ms, reset: ms, storeCalls: 8})

	f.set(time.Minute)
	ds = take(1)
	check(t, f, "the next minute: second admits", ds[0], want{allowed: true, remaining: 1, reset: time.Second, storeCalls: 9})
	check(t, f, "the next minute: minute admits", ds[1], want{allowed: true, remaining: 4, reset: time.Minute, storeCalls: 9})

	// Through a limiter, the decision is the longest rejection, the store's.
	lim := f.limiter(t, second, minute)
	for range 4 {
		_, err := lim.Take(ctx, "k2", 1)
		require.NoError(t, err)
	} // second rejected the third and fourth: 2 admitted
	f.set(time.Minute + time.Second)
	for range 3 {
		_, err := lim.Take(ctx, "k2", 1)
		require.NoError(t, err)
	} // 2 more admitted, the third rejected by the second: 4 of 5
	f.set(time.Minute + 2*time.Second)
	d, err := lim.Take(ctx, "k2", 2)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "minute", d.Name)
	assert.Equal(t, 58*time.Second, d.RetryAfter)
	calls := f.store.decisions()
	f.set(time.Minute + 30*time.Second)
	d, err = lim.Take(ctx, "k2", 2)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "minute", d.Name)
	assert.Equal(t, 30*time.Second, d.RetryAfter)
	assert.Equal(t, calls, f.store.decisions(), "cached")
}

// TestTakeAll: a user limit and an IP limit over one cache. Once both
// keys are over their limits, neither the take of the first check nor the
// peek of the second reaches the store.
func TestTakeAll(t *testing.T) {
	f := newFixture(t)
	user := f.limiter(t, core.Limit{Name: "user", Algorithm: core.FixedWindow, Rate: core.PerSecond(3)})
	ip := f.limiter(t, core.Limit{Name: "ip", Algorithm: core.FixedWindow, Rate: core.PerSecond(3)})
	checks := []core.Check{{Limiter: user, Key: "alice"}, {Limiter: ip, Key: "10.0.0.1"}}
	takeAll := func(checks []core.Check) core.Decision {
		t.Helper()
		d, err := core.TakeAll(ctx, checks, 1)
		require.NoError(t, err)
		return d
	}
	for range 3 {
		assert.True(t, takeAll(checks).Allowed)
	}
	assert.Equal(t, int64(6), f.store.takes.Load())

	d := takeAll(checks)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, int64(7), f.store.takes.Load(), "the user check's take")
	assert.Equal(t, int64(1), f.store.peeks.Load(), "the IP check's peek")

	for i := 1; i < 100; i++ {
		f.set(time.Duration(i) * 10 * time.Millisecond)
		d := takeAll(checks)
		assert.False(t, d.Allowed)
		assert.Equal(t, time.Second-time.Duration(i)*10*time.Millisecond, d.RetryAfter)
	}
	assert.Equal(t, int64(7), f.store.takes.Load(), "cached")
	assert.Equal(t, int64(1), f.store.peeks.Load(), "cached")
	assert.Zero(t, f.store.refunds.Load())

	// The same user from an IP under its limit: the user's rejection is
	// cached, the IP's admission is not, so its peek goes to the store.
	other := []core.Check{{Limiter: user, Key: "alice"}, {Limiter: ip, Key: "alice"}}
	for range 3 {
		assert.False(t, takeAll(other).Allowed)
	}
	assert.Equal(t, int64(7), f.store.takes.Load())
	assert.Equal(t, int64(4), f.store.peeks.Load(), "one peek per request for the admitting check")

	f.set(time.Second)
	assert.True(t, takeAll(checks).Allowed, "the next window")
	assert.Equal(t, int64(9), f.store.takes.Load())
}

// TestResetAndGrant: an operator's Reset or Grant through the cache drops
// the key's entry; one through another process's cache takes effect here
// once the cached rejection ends.
func TestResetAndGrant(t *testing.T) {
	f := newFixture(t)
	limit := core.Limit{Name: "r", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}
	lim := f.limiter(t, limit)
	take := func() core.Decision {
		t.Helper()
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		return d
	}
	take()
	take()
	assert.False(t, take().Allowed)
	assert.False(t, take().Allowed)
	assert.Equal(t, int64(3), f.store.takes.Load(), "the second rejection was cached")

	found, err := lim.Reset(ctx, "k", "test")
	require.NoError(t, err)
	assert.True(t, found)
	d := take()
	assert.True(t, d.Allowed, "after Reset")
	assert.Equal(t, 1, d.Remaining)
	assert.Equal(t, int64(4), f.store.takes.Load())

	assert.True(t, take().Allowed)
	assert.False(t, take().Allowed)
	assert.False(t, take().Allowed)
	assert.Equal(t, int64(6), f.store.takes.Load(), "cached again")

	require.NoError(t, lim.Grant(ctx, "k", 1, "test"))
	d = take()
	assert.True(t, d.Allowed, "paid by the grant")
	assert.True(t, d.Granted)
	assert.False(t, take().Allowed)
	assert.Equal(t, int64(8), f.store.takes.Load())

	// Another process resets the key in the shared store: this process
	// keeps its cached rejection until the rejection ends.
	elsewhere, err := New(f.mem, WithClock(f.clock.Now))
	require.NoError(t, err)
	other, err := core.NewLimiter(limit, core.WithStore(elsewhere), core.WithLogger(quiet))
	require.NoError(t, err)
	f.set(30 * time.Second)
	_, err = other.Reset(ctx, "k", "elsewhere")
	require.NoError(t, err)
	d = take()
	assert.False(t, d.Allowed, "still cached here")
	assert.Equal(t, 30*time.Second, d.RetryAfter)
	assert.Equal(t, int64(8), f.store.takes.Load())
	od, err := other.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, od.Allowed, "the other process asks the store")

	// Inspect always asks the store.
	st, err := lim.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, st.Decision.Allowed)
	assert.Equal(t, 0, st.Decision.Remaining)
	assert.Equal(t, int64(1), f.store.inspects.Load())
}

// TestResetDuringTake: a rejection that the store gave before a Reset,
// returning while the Reset runs, is not cached after it.
func TestResetDuringTake(t *testing.T) {
	f := newFixture(t)
	lim := f.limiter(t, core.Limit{Name: "r", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	d, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	f.store.entered, f.store.release = make(chan struct{}), make(chan struct{})
	done := make(chan core.Decision)
	go func() {
		d, err := lim.Take(ctx, "k", 1)
		assert.NoError(t, err)
		done <- d
	}()
	<-f.store.entered // rejected by the store, not yet cached
	found, err := lim.Reset(ctx, "k", "")
	require.NoError(t, err)
	assert.True(t, found)
	close(f.store.release)
	assert.False(t, (<-done).Allowed)
	f.store.entered = nil

	d, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the stale rejection was not cached")
	assert.Equal(t, int64(3), f.store.takes.Load())
}

// TestErrorsNotCached: a decision that came with an error is not cached.
func TestErrorsNotCached(t *testing.T) {
	f := newFixture(t)
	c, _ := f.bind(t, core.Limit{Name: "e", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	ds := make([]core.Decision, 1)
	_, err := c.Take(ctx, "k", 1, ds)
	require.NoError(t, err)
	f.store.fail.Store(true)
	_, err = c.Take(ctx, "k", 1, ds)
	require.ErrorIs(t, err, errFailing)
	assert.False(t, ds[0].Allowed, "the store rejected, then failed")
	f.store.fail.Store(true)
	require.ErrorIs(t, c.Peek(ctx, "k", 1, ds), errFailing)
	_, err = c.Take(ctx, "k", 1, ds)
	require.NoError(t, err)
	assert.Equal(t, int64(4), f.store.decisions(), "neither failure was cached")
	require.NoError(t, c.Peek(ctx, "k", 1, ds))
	assert.Equal(t, int64(4), f.store.decisions(), "the rejection was")

	_, err = c.Take(ctx, "k", 2, ds)
	require.ErrorIs(t, err, core.ErrCostExceedsLimit, "an impossible cost goes to the store")
	_, err = c.Take(ctx, "k", -1, ds)
	require.ErrorIs(t, err, core.ErrCostExceedsLimit)
}

// TestStoreCallsPerRetryInterval: a client at 100 times its limit of 10
// per second, for 10 seconds, costs the store the admissions and one
// rejection per retry interval; without the cache, one call per request.
func TestStoreCallsPerRetryInterval(t *testing.T) {
	for _, tc := range []struct {
		algorithm core.Algorithm
		calls     int64 // with the cache
	}{
		// 10 admitted at the start of each window, then one rejection
		// cached until the window ends.
		{core.FixedWindow, 10 * (10 + 1)},
		// The burst of 10 in the first 10 ms and one rejection; then,
		// every 100 ms from 100 ms to 9.9 s, one admission and one
		// rejection.
		{core.TokenBucket, 10 + 1 + 99*2},
	} {
		t.Run(tc.algorithm.String(), func(t *testing.T) {
			run := func(cached bool) (admitted int, calls int64) {
				f := newFixture(t)
				var s core.Store = f.store
				if cached {
					s = f.cache
				}
				lim, err := core.NewLimiter(core.Limit{Algorithm: tc.algorithm, Rate: core.PerSecond(10)}, core.WithStore(s))
				require.NoError(t, err)
				for i := range 10_000 {
					f.set(time.Duration(i) * time.Millisecond)
					d, err := lim.Take(ctx, "hammer", 1)
					require.NoError(t, err)
					if d.Allowed {
						admitted++
					}
				}
				return admitted, f.store.decisions()
			}
			admitted, calls := run(true)
			plainAdmitted, plainCalls := run(false)
			assert.Equal(t, plainAdmitted, admitted, "the cache changes no decision")
			assert.Equal(t, int64(10_000), plainCalls)
			assert.Equal(t, tc.calls, calls)
			t.Logf("%s: 10000 requests, %d admitted, store calls %d with the cache, %d without", tc.algorithm, admitted, calls, plainCalls)
		})
	}
}

// TestMaxKeys: a flood of rejected keys, ten times the bound, leaves at
// most the bound cached; once the entries expire, new ones take their
// place. The keys not cached are still decided by the store.
func TestMaxKeys(t *testing.T) {
	const maxKeys = 1000
	f := newFixture(t, WithMaxKeys(maxKeys))
	total := 0
	for i := range f.cache.shards {
		total += f.cache.shards[i].cap
	}
	assert.Equal(t, maxKeys, total, "the shards' caps add up to the bound")

	c, _ := f.bind(t, core.Limit{Name: "m", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	ds := make([]core.Decision, 1)
	flood := func(prefix string) {
		t.Helper()
		for i := range 10 * maxKeys {
			key := prefix + strconv.Itoa(i)
			for range 2 {
				_, err := c.Take(ctx, key, 1, ds)
				require.NoError(t, err)
			}
			require.False(t, ds[0].Allowed)
			require.LessOrEqual(t, f.cache.size(), maxKeys)
		}
	}
	flood("a")
	assert.Equal(t, maxKeys, f.cache.size(), "every shard filled")

	// Every key is over its limit: the cached ones are answered here, the
	// others by the store, alike.
	before := f.store.decisions()
	for i := range 10 * maxKeys {
		_, err := c.Take(ctx, "a"+strconv.Itoa(i), 1, ds)
		require.NoError(t, err)
		require.False(t, ds[0].Allowed)
		require.Equal(t, time.Minute, ds[0].RetryAfter)
	}
	assert.Equal(t, int64(9*maxKeys), f.store.decisions()-before)

	f.set(time.Minute)
	flood("b")
	assert.Equal(t, maxKeys, f.cache.size(), "the expired entries gave way")

	one := newFixture(t, WithMaxKeys(1))
	assert.Len(t, one.cache.shards, 1)
	c, _ = one.bind(t, core.Limit{Name: "m", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	for _, key := range []string{"x", "x", "y", "y", "x", "y"} {
		_, err := c.Take(ctx, key, 1, ds)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, one.cache.size())
	assert.Equal(t, int64(5), one.store.decisions(), "x cached, y not")
}

// TestSeparateLimiters: two limiters in one cache keep their entries apart
// for the same key.
func TestSeparateLimiters(t *testing.T) {
	f := newFixture(t)
	a := f.limiter(t, core.Limit{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	b := f.limiter(t, core.Limit{Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	for range 3 {
		_, err := a.Take(ctx, "k", 1)
		require.NoError(t, err)
	}
	d, err := b.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(3), f.store.takes.Load())
}

func TestOptions(t *testing.T) {
	_, err := New(nil)
	assert.Error(t, err)
	_, err = New(&core.MemoryStore{}, WithMaxKeys(0))
	assert.Error(t, err)
	_, err = New(&core.MemoryStore{}, WithClock(nil))
	assert.Error(t, err)
	c, err := New(&core.MemoryStore{})
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxKeys, c.maxKeys)
	assert.Len(t, c.shards, maxShards)
	_, err = c.Bind([]core.Limit{{Rate: core.Rate{Count: -1, Period: time.Second}}})
	assert.ErrorIs(t, err, core.ErrInvalidLimit, "the store's error")
}

// TestNoAllocations: a decision answered from the cache allocates nothing.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	f := newFixture(t)
	c, _ := f.bind(t, core.Limit{Name: "n", Algorithm: core.TokenBucket, Rate: core.PerMinute(1)},
		core.Limit{Name: "h", Algorithm: core.FixedWindow, Rate: core.PerHour(10)})
	ds := make([]core.Decision, 2)
	for range 2 {
		_, err := c.Take(ctx, "client", 1, ds)
		require.NoError(t, err)
	}
	calls := f.store.decisions()
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = c.Take(ctx, "client", 1, ds)
		_ = c.Peek(ctx, "client", 1, ds)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, calls, f.store.decisions(), "every decision from the cache")
	assert.False(t, ds[0].Allowed)
}

// TestConcurrent runs decisions, peeks, refunds, resets and grants on a
// few keys from many goroutines while the clock moves, for the race
// detector; with the clock still, the store admits exactly the limit per
// key, the cache answering most rejections.
func TestConcurrent(t *testing.T) {
	f := newFixture(t)
	limit := core.Limit{Name: "c", Algorithm: core.FixedWindow, Rate: core.PerSecond(50)}
	lim := f.limiter(t, limit)
	keys := []string{"k0", "k1", "k2", "k3"}
	var admitted [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				k := (g + i) % len(keys)
				d, err := lim.Take(ctx, keys[k], 1)
				assert.NoError(t, err)
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		assert.Equal(t, int64(50), admitted[k].Load(), keys[k])
	}
	assert.Less(t, f.store.decisions(), int64(16*500), "most rejections were cached")

	other := f.limiter(t, core.Limit{Name: "o", Algorithm: core.FixedWindow, Rate: core.PerSecond(10)})
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Add(1)
	go func() {
		defer ticker.Done()
		for {
			select {
			case <-stop:
				return
			default:
				f.clock.Advance(time.Millisecond)
				runtime.Gosched()
			}
		}
	}()
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				key := keys[(g+i)%len(keys)]
				var err error
				switch i % 30 {
				case 7:
					_, err = lim.Reset(ctx, key, "")
				case 17:
					err = lim.Grant(ctx, key, 1, "")
				case 23:
					_, err = lim.Inspect(ctx, key)
				case 29:
					_, err = core.TakeAll(ctx, []core.Check{{Limiter: lim, Key: key}, {Limiter: other, Key: key}}, 1)
				default:
					_, err = lim.Take(ctx, key, 1+i%2)
				}
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	ticker.Wait()
}
