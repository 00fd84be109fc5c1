package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func TestParseAlgorithm(t *testing.T) {
	for _, a := range core.Algorithms() {
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
		"zero count":        {core.Limit{Rate: core.PerMinute(0)}, "rate count 0"},
		"negative count":    {core.Limit{Rate: core.PerMinute(-5)}, "rate count -5"},
		"zero period":       {core.Limit{Rate: core.Rate{Count: 5}}, "rate period 0s"},
		"negative period":   {core.Limit{Rate: core.Rate{Count: 5, Period: -time.Second}}, "rate period -1s"},
		"period too long":   {core.Limit{Rate: core.Rate{Count: 5, Period: 400 * 24 * time.Hour}}, "at most"},
		"negative burst":    {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(5), Burst: -1}, "burst -1"},
		"burst on a window": {core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5), Burst: 10}, "burst applies to token-bucket and leaky-bucket, not fixed-window"},
		"shaping a token bucket": {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(5), Shaping: true},
			"shaping applies to leaky-bucket"},
		"max delay without shaping": {core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(5), MaxDelay: time.Second},
			"max delay applies only"},
		"negative max delay": {core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(5), Shaping: true, MaxDelay: -1},
			"max delay -1ns"},
		"unknown algorithm":      {core.Limit{Algorithm: 42, Rate: core.PerMinute(5)}, "unknown algorithm 42"},
		"refill too long":        {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerDay(1), Burst: 100_000}, "longer than"},
		"rate not representable": {core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 600_000_000, Period: time.Second}}, "within 1%"},
		"too fast":               {core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 2000, Period: time.Microsecond}}, "faster than one request per nanosecond"},
		"bad name":               {core.Limit{Name: `a"b`, Rate: core.PerMinute(5)}, `character '"' not allowed`},
		"long name":              {core.Limit{Name: strings.Repeat("n", 65), Rate: core.PerMinute(5)}, "longer than 64 bytes"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.limit.Validate()
			require.ErrorIs(t, err, core.ErrInvalidLimit)
			require.ErrorContains(t, err, tc.msg)
			_, err = core.NewLimiter(tc.limit)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

func TestLimitDefaults(t *testing.T) {
	lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(100)})
	require.NoError(t, err)
	l := lim.Limits()[0]
	require.Equal(t, core.SlidingWindowCounter, l.Algorithm)
	require.Equal(t, "100-per-1m0s", l.Name)
	require.Equal(t, "100-per-1m0s:sliding-window-counter", l.ID())

	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithLimit(core.Limit{Rate: core.PerMinute(1)}))
	require.ErrorContains(t, err, "two limits with the ID")
	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithStore(nil))
	require.Error(t, err)
	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithFailMode(7))
	require.Error(t, err)
}

func newClocked(t *testing.T, l core.Limit, opts ...core.Option) (*core.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	opts = append([]core.Option{core.WithStore(newMemory(t, clock))}, opts...)
	lim, err := core.NewLimiter(l, opts...)
	require.NoError(t, err)
	return lim, clock
}

// With two limits, a request rejected by one is counted by neither, and
// the decision describes the most restrictive limit.
func TestSeveralLimits(t *testing.T) {
	ctx := context.Background()
	perSecond := core.Limit{Name: "second", Algorithm: core.FixedWindow, Rate: core.PerSecond(3)}
	perMinute := core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	lim, clock := newClocked(t, perSecond, core.WithLimit(perMinute))

	d, err := lim.Take(ctx, "c")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, "second", d.Name) // 2 left of 3 beats 4 left of 5
	require.Equal(t, 2, d.Remaining)
	lim.Take(ctx, "c")
	lim.Take(ctx, "c")
	d, _ = lim.Take(ctx, "c")
	require.False(t, d.Allowed)
	require.Equal(t, "second", d.Name)
	require.Equal(t, time.Second, d.RetryAfter)

	// The rejected request was not counted by the per-minute limit: two
	// requests are left there.
	clock.Advance(time.Second)
	d, _ = lim.Take(ctx, "c")
	require.True(t, d.Allowed)
	require.Equal(t, "minute", d.Name)
	require.Equal(t, 1, d.Remaining)
	lim.Take(ctx, "c")
	d, _ = lim.Take(ctx, "c")
	require.False(t, d.Allowed)
	require.Equal(t, "minute", d.Name)
	require.Equal(t, 59*time.Second, d.RetryAfter)

	_, err = lim.TakeN(ctx, "c", 4)
	require.ErrorIs(t, err, core.ErrCostExceedsLimit)
	status, _ := core.Rejection(core.Decision{}, err)
	require.Equal(t, 500, status)

	// An empty key is never a bucket shared by everybody.
	d, err = lim.Take(ctx, "")
	require.ErrorIs(t, err, core.ErrMissingKey)
	require.False(t, d.Allowed)
	status, _ = core.Rejection(d, err)
	require.Equal(t, 400, status)
}

// failingStore fails every decision until healed.
type failingStore struct {
	mu      sync.Mutex
	healthy bool
}

func (s *failingStore) Bind(l core.Limit) (core.Counter, error) { return s, nil }
func (s *failingStore) heal()                                   { s.mu.Lock(); s.healthy = true; s.mu.Unlock() }
func (s *failingStore) Take(ctx context.Context, key string, cost int) (core.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.healthy {
		return core.Decision{}, errors.New("connection refused")
	}
	return core.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
}
func (s *failingStore) Peek(ctx context.Context, key string, cost int) (core.Decision, error) {
	return s.Take(ctx, key, cost)
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
		d, err := open.Take(ctx, "c")
		require.ErrorContains(t, err, "connection refused")
		require.True(t, d.Allowed, "fail open admits")
	}
	require.Len(t, events, 5)
	require.Equal(t, core.ErrorAllowed, events[0].Outcome)
	require.Equal(t, "api", events[0].Limit)
	require.Equal(t, 1, strings.Count(logs.String(), "store failing"), "one log line per episode:\n%s", logs.String())
	store.heal()
	d, err := open.Take(ctx, "c")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Contains(t, logs.String(), "failed_decisions=5")

	closed, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(&failingStore{}), core.WithFailMode(core.FailClosed),
		core.WithFailRetryAfter(3*time.Second), core.WithLogger(logger), observe)
	require.NoError(t, err)
	d, err = closed.Take(ctx, "c")
	require.Error(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, 3*time.Second, d.RetryAfter)
	require.Equal(t, core.ErrorDenied, events[len(events)-1].Outcome)

	status, body := core.Rejection(d, err)
	require.Equal(t, 503, status)
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, core.ProblemReducedCapacity, p["type"])
	require.EqualValues(t, 3, p["retry_after"])
}

func TestObserverSeesEveryDecision(t *testing.T) {
	var events []core.Event
	lim, _ := newClocked(t, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithObserver(func(e core.Event) { events = append(events, e) }))
	for i := 0; i < 3; i++ {
		lim.Take(context.Background(), "c")
	}
	require.Len(t, events, 3)
	assert.Equal(t, []core.Outcome{core.Allowed, core.Allowed, core.Denied},
		[]core.Outcome{events[0].Outcome, events[1].Outcome, events[2].Outcome})
	assert.Equal(t, "login", events[2].Limit)
	assert.Equal(t, "denied", events[2].Outcome.String())
	assert.GreaterOrEqual(t, events[0].Latency, time.Duration(0))
}

func headerMap(hs []core.Header) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Name] = h.Value[0]
	}
	return m
}

func TestHeaders(t *testing.T) {
	ctx := context.Background()
	l := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}
	lim, clock := newClocked(t, l)
	clock.Advance(15*time.Second + time.Millisecond)
	d, _ := lim.Take(ctx, "c")
	require.Equal(t, map[string]string{
		"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "1", "X-Ratelimit-Reset": "45",
	}, headerMap(lim.AppendHeaders(nil, d)))
	lim.Take(ctx, "c")
	d, _ = lim.Take(ctx, "c")
	require.Equal(t, map[string]string{
		"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "45",
		"Retry-After": "45", "X-Ratelimit-Retry-After": "45",
	}, headerMap(lim.AppendHeaders(nil, d)))

	ietf, clock := newClocked(t, l, core.WithHeaders(core.IETFHeaders))
	clock.Advance(15 * time.Second)
	d, _ = ietf.Take(ctx, "c")
	require.Equal(t, map[string]string{
		"Ratelimit-Policy": `"api";q=2;w=60`, "Ratelimit": `"api";r=1;t=45`,
	}, headerMap(ietf.AppendHeaders(nil, d)))

	none, _ := newClocked(t, l, core.WithHeaders(core.NoHeaders))
	require.Empty(t, none.AppendHeaders(nil, d))
	// A rejection always says when to come back, at least a second ahead.
	require.Equal(t, map[string]string{"Retry-After": "1"},
		headerMap(none.AppendHeaders(nil, core.Decision{Limit: 2, RetryAfter: time.Millisecond})))
	// A fail-open decision has no counts to report.
	require.Empty(t, lim.AppendHeaders(nil, core.Decision{Allowed: true}))

	two, _ := newClocked(t, l, core.WithHeaders(core.BothHeaders),
		core.WithLimit(core.Limit{Name: "day", Algorithm: core.TokenBucket, Rate: core.PerDay(1000), Burst: 50}))
	d, _ = two.Take(ctx, "c")
	h := headerMap(two.AppendHeaders(nil, d))
	require.Equal(t, `"api";q=2;w=60, "day";q=50;w=4320`, h["Ratelimit-Policy"])
	require.Equal(t, "2", h["X-Ratelimit-Limit"])
	require.Equal(t, "1", h["X-Ratelimit-Remaining"])
}

func TestHeaderValuesDoNotAllocate(t *testing.T) {
	lim, _ := newClocked(t, core.Limit{Rate: core.PerMinute(100)})
	d := core.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 30 * time.Second}
	var buf [8]core.Header
	require.Zero(t, testing.AllocsPerRun(100, func() { lim.AppendHeaders(buf[:0], d) }))
}

func TestRejectionBodies(t *testing.T) {
	status, body := core.Rejection(core.Decision{Name: "api", Limit: 5, RetryAfter: 1500 * time.Millisecond}, nil)
	require.Equal(t, 429, status)
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, map[string]any{"type": core.ProblemQuotaExceeded, "title": "Too Many Requests", "status": 429.0,
		"detail": "rate limit exceeded; retry in 2 s", "limit": "api", "retry_after": 2.0}, p)

	status, body = core.Rejection(core.Decision{}, errors.Join(core.ErrMissingKey, errors.New(`header "X-Api-Key" is empty`)))
	require.Equal(t, 400, status)
	require.Contains(t, string(body), `X-Api-Key`)
	status, _ = core.Rejection(core.Decision{}, errors.New("database down"))
	require.Equal(t, 500, status)
}

func TestHold(t *testing.T) {
	require.NoError(t, core.Hold(context.Background(), core.Decision{Allowed: true}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, core.Hold(ctx, core.Decision{Allowed: true, Delay: time.Hour}), context.Canceled)
}

func TestParseOptions(t *testing.T) {
	m, err := core.ParseFailMode("closed")
	require.NoError(t, err)
	require.Equal(t, core.FailClosed, m)
	_, err = core.ParseFailMode("sideways")
	require.EqualError(t, err, `ratekit: unknown fail mode "sideways" (valid: open, closed)`)
	s, err := core.ParseHeaderStyle("ietf")
	require.NoError(t, err)
	require.Equal(t, core.IETFHeaders, s)
	_, err = core.ParseHeaderStyle("draft")
	require.ErrorContains(t, err, "valid: x-ratelimit, ietf, both, none")
}

func TestNoDecision(t *testing.T) {
	lim, _ := newClocked(t, core.Limit{Rate: core.PerMinute(5)})
	_, err := lim.Take(context.Background(), "")
	require.True(t, core.NoDecision(err))
	_, err = lim.TakeN(context.Background(), "c", 6)
	require.True(t, core.NoDecision(err))
	require.False(t, core.NoDecision(nil))
	require.False(t, core.NoDecision(errors.New("connection refused")))
}
