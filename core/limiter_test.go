package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func TestParseAlgorithm(t *testing.T) {
	for _, a := range algorithms {
		got, err := core.ParseAlgorithm(a.String())
		require.NoError(t, err)
		require.Equal(t, a, got)
	}
	got, err := core.ParseAlgorithm(" Token_Bucket ")
	require.NoError(t, err)
	require.Equal(t, core.TokenBucket, got)
	_, err = core.ParseAlgorithm("gcra")
	require.EqualError(t, err, `ratekit: unknown algorithm "gcra" (valid: token-bucket, leaky-bucket, fixed-window, sliding-window-log, sliding-window-counter)`)
	require.Equal(t, "sliding-window-counter", core.Algorithm(0).String())
}

func TestBadLimitsAreErrors(t *testing.T) {
	cases := map[string]struct {
		limit core.Limit
		msg   string
	}{
		"negative count":    {core.Limit{Rate: core.PerMinute(-5)}, "rate count -5"},
		"zero period":       {core.Limit{Rate: core.Rate{Count: 5}}, "rate period 0s"},
		"negative period":   {core.Limit{Rate: core.Rate{Count: 5, Period: -time.Second}}, "rate period -1s"},
		"period too long":   {core.Limit{Rate: core.Rate{Count: 5, Period: 400 * 24 * time.Hour}}, "at most"},
		"negative burst":    {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(5), Burst: -1}, "burst -1"},
		"burst on a window": {core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5), Burst: 10}, "burst applies to token-bucket and leaky-bucket, not fixed-window"},
		"burst on a block":  {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(0), Burst: 10}, "blocks every request"},
		"shaping a token bucket": {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(5), Shaping: true},
			"shaping applies to leaky-bucket"},
		"max delay without shaping": {core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(5), MaxDelay: time.Second},
			"max delay applies only"},
		"negative max delay": {core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(5), Shaping: true, MaxDelay: -1},
			"max delay -1ns"},
		"unknown algorithm":      {core.Limit{Algorithm: 42, Rate: core.PerMinute(5)}, "unknown algorithm 42"},
		"refill too long":        {core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: 24 * time.Hour}, Burst: 100_000}, "longer than"},
		"rate not representable": {core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 600_000_000, Period: time.Second}}, "within 1%"},
		"too fast":               {core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 2000, Period: time.Microsecond}}, "faster than one request per 1ns"},
		"bad name":               {core.Limit{Name: `a"b`, Rate: core.PerMinute(5)}, `character '"' not allowed`},
		"long name":              {core.Limit{Name: strings.Repeat("n", 65), Rate: core.PerMinute(5)}, "longer than 64 bytes"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := core.NewLimiter(tc.limit)
			require.ErrorIs(t, err, core.ErrInvalidLimit)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

func TestLimitDefaults(t *testing.T) {
	p, err := core.Limit{Rate: core.PerMinute(100)}.Params(time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, core.SlidingWindowCounter, p.Algorithm)
	require.Equal(t, "100-per-1m0s", p.Name)
	require.Equal(t, "100-per-1m0s:sliding-window-counter", p.ID)

	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithLimit(core.Limit{Rate: core.PerMinute(1)}))
	require.ErrorContains(t, err, "two limits with the ID")
	for _, o := range []core.Option{core.WithStore(nil), core.WithObserver(nil), core.WithLogger(nil)} {
		_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, o)
		require.Error(t, err)
	}
	var many []core.Option
	for i := 0; i < core.MaxLimits; i++ {
		many = append(many, core.WithLimit(core.Limit{Name: fmt.Sprint("l", i), Rate: core.PerMinute(1)}))
	}
	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, many...)
	require.ErrorIs(t, err, core.ErrInvalidLimit)
}

func newClocked(t *testing.T, l core.Limit, opts ...core.Option) (*core.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	opts = append([]core.Option{core.WithStore(newMemory(t, clock))}, opts...)
	lim, err := core.NewLimiter(l, opts...)
	require.NoError(t, err)
	return lim, clock
}

// burst sends 64 concurrent requests, two each, through take and returns
// how many were admitted.
func burst(t *testing.T, take func() (core.Decision, error)) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 2; i++ {
				d, err := take()
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return int(admitted.Load())
}

// The measurement of the issue: 3 per second and 5 per minute, 64
// concurrent requests, then 2.5 s later ten paced requests. Rejected
// requests must leave no count: exactly 3, then exactly 2 are admitted,
// for every pair of algorithms, on the memory store and on a slow one,
// whether the limits are one limiter's or two limiters' with other keys.
func TestAllOrNothingUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	stores := map[string]func(*storetest.Clock) core.Store{
		"memory": func(c *storetest.Clock) core.Store { return newMemory(t, c) },
		"slow":   func(c *storetest.Clock) core.Store { return storetest.Slow(newMemory(t, c), 100*time.Microsecond) },
	}
	for storeName, newStore := range stores {
		for _, a := range algorithms {
			for _, b := range algorithms {
				second := core.Limit{Name: "second", Algorithm: a, Rate: core.PerSecond(3)}
				minute := core.Limit{Name: "minute", Algorithm: b, Rate: core.PerMinute(5)}
				t.Run(fmt.Sprintf("%s/one-limiter/%s+%s", storeName, a, b), func(t *testing.T) {
					clock := storetest.NewClock(storetest.Epoch.Add(time.Second))
					lim, err := core.NewLimiter(second, core.WithLimit(minute), core.WithStore(newStore(clock)))
					require.NoError(t, err)
					take := func() (core.Decision, error) { return lim.Take(ctx, "client", 1) }
					require.Equal(t, 3, burst(t, take))
					clock.Advance(2500 * time.Millisecond)
					require.Equal(t, 2, paced(t, take), "ten paced requests 2.5 s later")
				})
				for _, order := range []string{"second-first", "minute-first"} {
					t.Run(fmt.Sprintf("%s/two-keys/%s/%s+%s", storeName, order, a, b), func(t *testing.T) {
						clock := storetest.NewClock(storetest.Epoch.Add(time.Second))
						s := newStore(clock)
						perIP, err := core.NewLimiter(second, core.WithStore(s))
						require.NoError(t, err)
						perUser, err := core.NewLimiter(minute, core.WithStore(s))
						require.NoError(t, err)
						checks := []core.Check{{Limiter: perIP, Key: "10.0.0.1"}, {Limiter: perUser, Key: "alice"}}
						if order == "minute-first" {
							checks[0], checks[1] = checks[1], checks[0]
						}
						take := func() (core.Decision, error) { return core.TakeAll(ctx, checks, 1) }
						require.Equal(t, 3, burst(t, take))
						clock.Advance(2500 * time.Millisecond)
						require.Equal(t, 2, paced(t, take), "ten paced requests 2.5 s later")
					})
				}
			}
		}
	}
}

func paced(t *testing.T, take func() (core.Decision, error)) int {
	n := 0
	for i := 0; i < 10; i++ {
		d, err := take()
		require.NoError(t, err)
		if d.Allowed {
			n++
		}
	}
	return n
}

// A rejection over several checks carries the longest RetryAfter of the
// enforcing checks, so that a client that waits it is admitted.
func TestTakeAllRetryAfterIsTrue(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	short, _ := core.NewLimiter(core.Limit{Name: "short", Algorithm: core.FixedWindow, Rate: core.PerSecond(1)}, core.WithStore(s))
	long, _ := core.NewLimiter(core.Limit{Name: "long", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}, core.WithStore(s))
	checks := []core.Check{{Limiter: short, Key: "a"}, {Limiter: long, Key: "b"}}
	d, err := core.TakeAll(ctx, checks, 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = core.TakeAll(ctx, checks, 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, "long", d.Name)
	assert.Equal(t, time.Minute, d.RetryAfter)
	clock.Advance(d.RetryAfter)
	d, _ = core.TakeAll(ctx, checks, 1)
	assert.True(t, d.Allowed)
}

func TestTakeAllEdges(t *testing.T) {
	ctx := context.Background()
	lim, _ := newClocked(t, core.Limit{Rate: core.PerMinute(5)})
	d, err := core.TakeAll(ctx, nil, 1)
	require.NoError(t, err)
	assert.Equal(t, core.Decision{Allowed: true}, d, "no checks: nothing applies")
	_, err = core.TakeAll(ctx, []core.Check{{Limiter: lim, Key: ""}}, 1)
	assert.ErrorIs(t, err, core.ErrMissingKey)
	_, err = lim.Take(ctx, "k", 6)
	assert.ErrorIs(t, err, core.ErrCostExceedsLimit)
	_, err = lim.Take(ctx, "k", -1)
	assert.ErrorIs(t, err, core.ErrCostExceedsLimit)
	_, err = core.TakeAll(ctx, []core.Check{{Key: "k"}}, 1)
	assert.Error(t, err)
	d, err = lim.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining, "cost 0 counts nothing")
}

// A block (a count of 0) is an ordinary limit: it rejects with a retry of
// one period, and the limits beside it count nothing.
func TestBlock(t *testing.T) {
	ctx := context.Background()
	seen := outcomes{}
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	api, _ := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(5)}, core.WithStore(s))
	blocked, err := core.NewLimiter(core.Limit{Name: "blocked", Rate: core.Rate{Period: time.Hour}},
		core.WithStore(s), core.WithObserver(seen.observe))
	require.NoError(t, err)
	d, err := core.TakeAll(ctx, []core.Check{{Limiter: api, Key: "k"}, {Limiter: blocked, Key: "k"}}, 1)
	require.NoError(t, err)
	assert.Equal(t, core.Decision{Name: "blocked", Window: time.Hour, ResetAfter: time.Hour, RetryAfter: time.Hour,
		Policies: `"api";q=5;w=60`}, d, "a block is no quota policy: the request's list has the other limit")
	d, _ = api.Take(ctx, "k", 0)
	assert.Equal(t, 5, d.Remaining, "the rejected request was given back")
	assert.Equal(t, outcomes{core.Denied: 1}, seen)
	assert.Zero(t, s.TrackedKeys(core.Limit{Name: "blocked", Rate: core.Rate{Period: time.Hour}}), "a block keeps no state")

	shadow, _ := core.NewLimiter(core.Limit{Name: "blocked", Rate: core.Rate{Period: time.Hour}}, core.WithStore(s), core.WithShadow())
	d, _ = shadow.Take(ctx, "k", 1)
	assert.True(t, d.Allowed && d.Shadow, "a shadow block passes")
}

// failingStore fails every decision until healed.
type failingStore struct {
	mu      sync.Mutex
	healthy bool
}

func (s *failingStore) Bind([]core.Limit) (core.Counter, error) { return s, nil }
func (s *failingStore) heal()                                   { s.mu.Lock(); s.healthy = true; s.mu.Unlock() }
func (s *failingStore) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	return time.Time{}, s.Peek(ctx, key, cost, ds)
}
func (s *failingStore) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.healthy {
		return errors.New("connection refused")
	}
	ds[0] = core.Decision{Allowed: true, Name: "api", Quota: 10, Remaining: 9}
	return nil
}
func (s *failingStore) Refund(context.Context, string, int, time.Time, []core.Decision) error {
	return nil
}
func (*failingStore) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, errors.New("connection refused")
}
func (*failingStore) Reset(context.Context, string) (bool, error) {
	return false, errors.New("connection refused")
}
func (*failingStore) Grant(context.Context, string, int, time.Duration) error {
	return errors.New("connection refused")
}

func TestFailModes(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var events []core.Event
	observe := core.WithObserver(func(e core.Event) { events = append(events, e) })

	store := &failingStore{}
	open, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(store), core.WithLogger(logger), observe)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		d, err := open.Take(ctx, "c", 1)
		require.ErrorContains(t, err, "connection refused")
		require.True(t, d.Allowed, "fail open admits")
	}
	require.Len(t, events, 5)
	require.Equal(t, core.ErrorAllowed, events[0].Outcome)
	require.Equal(t, "api", events[0].Limit)
	require.Equal(t, 1, strings.Count(logs.String(), "store failing"), "one log line per episode:\n%s", logs.String())
	store.heal()
	d, err := open.Take(ctx, "c", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Contains(t, logs.String(), "failed_decisions=5")

	closed, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(&failingStore{}), core.WithFailClosed(), core.WithLogger(logger), observe)
	require.NoError(t, err)
	d, err = closed.Take(ctx, "c", 1)
	require.Error(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, time.Second, d.RetryAfter)
	require.Zero(t, d.Quota)
	require.Equal(t, core.ErrorDenied, events[len(events)-1].Outcome)
}

// outcomes records the observer's events by outcome.
type outcomes map[core.Outcome]int

func (o outcomes) observe(e core.Event) { o[e.Outcome]++ }

// Every observer attached sees every event; with two limits, each limit
// has its event, and a rejected request reports only the limit that
// rejected it.
func TestObserversCompose(t *testing.T) {
	first, second := outcomes{}, outcomes{}
	var names []string
	lim, _ := newClocked(t, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(100)}),
		core.WithObserver(first.observe), core.WithObserver(second.observe),
		core.WithObserver(func(e core.Event) { names = append(names, e.Limit) }))
	for i := 0; i < 3; i++ {
		_, _ = lim.Take(context.Background(), "c", 1)
	}
	want := outcomes{core.Allowed: 4, core.Denied: 1}
	assert.Equal(t, want, first)
	assert.Equal(t, want, second)
	assert.Equal(t, []string{"login", "hourly", "login", "hourly", "login"}, names)
}

func TestShadow(t *testing.T) {
	ctx := context.Background()
	seen := outcomes{}
	lim, _ := newClocked(t, core.Limit{Name: "new", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithShadow(), core.WithObserver(seen.observe))
	for i := range 4 {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i+1)
		assert.Equal(t, 2, d.Quota)
		assert.Equal(t, []int{1, 0, 0, 0}[i], d.Remaining)
		assert.Equal(t, i >= 2, d.Shadow)
	}
	assert.Equal(t, outcomes{core.Allowed: 2, core.ShadowDenied: 2}, seen)
}

// Soft throttling, hand-computed: a token bucket of 10 per minute with 20%
// soft admits 12 at once; the 11th and 12th are soft, then a token comes
// back at the raised rate, 12 per minute: every 5 s.
func TestSoftPercent(t *testing.T) {
	ctx := context.Background()
	seen := outcomes{}
	lim, clock := newClocked(t, core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(10)},
		core.WithSoftPercent(20), core.WithObserver(seen.observe))
	for i := range 13 {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, 10, d.Quota, "the limit itself is reported")
		assert.Equal(t, i < 12, d.Allowed, "request %d", i+1)
		assert.Equal(t, i == 10 || i == 11, d.Soft, "request %d", i+1)
		assert.Equal(t, max(9-i, 0), d.Remaining, "request %d", i+1)
		if i == 12 {
			assert.Equal(t, 5*time.Second, d.RetryAfter)
		}
	}
	assert.Equal(t, outcomes{core.Allowed: 10, core.SoftAllowed: 2, core.Denied: 1}, seen)
	clock.Advance(time.Minute)
	d, _ := lim.Take(ctx, "k", 1)
	assert.False(t, d.Soft)
	assert.Equal(t, 9, d.Remaining)

	_, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithSoftPercent(-1))
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(core.MaxCount)}, core.WithSoftPercent(50))
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
}

// Shadow checks are asked after the enforcing ones, and a rejection is
// counted by none of them.
func TestTakeAllShadowChecks(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	enforce, _ := core.NewLimiter(core.Limit{Name: "enforce", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}, core.WithStore(s))
	shadow, _ := core.NewLimiter(core.Limit{Name: "shadow", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}, core.WithStore(s), core.WithShadow())
	checks := []core.Check{{Limiter: shadow, Key: "k"}, {Limiter: enforce, Key: "k"}}
	d, _ := core.TakeAll(ctx, checks, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, "enforce", d.Name, "the headers describe the enforcing check")
	d, _ = core.TakeAll(ctx, checks, 1)
	assert.False(t, d.Allowed)
	d, _ = shadow.Take(ctx, "k", 0)
	assert.Equal(t, 4, d.Remaining, "the shadow check counted the rejected request")
}
