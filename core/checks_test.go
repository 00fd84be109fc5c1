package core_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// outcomes records the observer's events by outcome.
type outcomes map[core.Outcome]int

func (o outcomes) observe(e core.Event) { o[e.Outcome]++ }

func TestShadow(t *testing.T) {
	ctx := context.Background()
	seen := outcomes{}
	lim, _ := newClocked(t, core.Limit{Name: "new", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithShadow(), core.WithObserver(seen.observe))
	for i := range 4 {
		v, fields := lim.Verdict(ctx, "k", nil, 1, nil)
		require.True(t, v.Pass(), "request %d", i+1)
		h := headerMap(fields)
		assert.Equal(t, "2", h[core.HeaderLimit])
		assert.Equal(t, []string{"1", "0", "0", "0"}[i], h[core.HeaderRemaining])
		assert.Empty(t, h[core.HeaderRetryAfter])
		assert.Equal(t, i >= 2, v.Decision.Shadow)
	}
	assert.Equal(t, outcomes{core.Allowed: 2, core.ShadowDenied: 2}, seen)

	// Errors that are not decisions stay errors.
	v, _ := lim.Verdict(ctx, "", nil, 1, nil)
	assert.Equal(t, http.StatusBadRequest, v.Status)
}

// Soft throttling, hand-computed: a token bucket of 10 per minute with 20%
// soft admits 12 at once; the 11th and 12th are soft, then one token
// comes back every 6 s... of the raised rate, 12 per minute: every 5 s.
func TestSoftPercent(t *testing.T) {
	ctx := context.Background()
	seen := outcomes{}
	lim, clock := newClocked(t, core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(10)},
		core.WithSoftPercent(20), core.WithObserver(seen.observe))
	for i := range 13 {
		d, err := lim.Take(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, 10, d.Limit, "the limit itself is reported")
		assert.Equal(t, i < 12, d.Allowed, "request %d", i+1)
		assert.Equal(t, i == 10 || i == 11, d.Soft, "request %d", i+1)
		assert.Equal(t, max(9-i, 0), d.Remaining, "request %d", i+1)
		if i == 12 {
			assert.Equal(t, 5*time.Second, d.RetryAfter)
		}
	}
	assert.Equal(t, outcomes{core.Allowed: 10, core.SoftAllowed: 2, core.Denied: 1}, seen)
	v, fields := lim.Verdict(ctx, "k", nil, 0, nil)
	assert.True(t, v.Pass())
	assert.Equal(t, "true", headerMap(fields)[core.HeaderSoft], "a key in the soft zone")

	clock.Advance(time.Minute)
	d, _ := lim.Take(ctx, "k")
	assert.False(t, d.Soft)
	assert.Equal(t, 9, d.Remaining)

	_, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithSoftPercent(-1))
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(core.MaxCount)}, core.WithSoftPercent(50))
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
}

// Checks with two keys: a rejection by one is counted by neither, shadow
// checks included; a block rejects without a store; headers describe the
// most restrictive.
func TestChecks(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	store := newMemory(t, clock)
	newLim := func(name string, n int, opts ...core.Option) *core.Limiter {
		l, err := core.NewLimiter(core.Limit{Name: name, Algorithm: core.FixedWindow, Rate: core.PerMinute(n)},
			append([]core.Option{core.WithStore(store)}, opts...)...)
		require.NoError(t, err)
		return l
	}
	perIP, perKey, shadow := newLim("ip", 10), newLim("key", 2), newLim("shadow", 100, core.WithShadow())
	cs := core.Checks{{Limiter: perIP, Key: "192.0.2.1"}, {Limiter: perKey, Key: "abc"}, {Limiter: shadow, Key: "x"}}

	for i := range 3 {
		v, fields := cs.Verdict(ctx, nil, 1, nil)
		h := headerMap(fields)
		if i < 2 {
			require.True(t, v.Pass())
			assert.Equal(t, "2", h[core.HeaderLimit], "the per-key limit is the most restrictive")
		} else {
			assert.Equal(t, http.StatusTooManyRequests, v.Status)
			assert.Equal(t, "key", v.Decision.Name)
			assert.Equal(t, "60", h[core.HeaderRetryAfter])
		}
	}
	remaining := func(l *core.Limiter, key string) int {
		d, err := l.TakeN(ctx, key, 0)
		require.NoError(t, err)
		return d.Remaining
	}
	assert.Equal(t, 8, remaining(perIP, "192.0.2.1"), "the rejected request was not counted")
	assert.Equal(t, 98, remaining(shadow, "x"), "nor by the shadow check")

	block := core.Checks{{Limiter: perIP, Key: "192.0.2.9"}, {Limiter: newLim("blocked", 1), Key: "-", Block: true}}
	v, fields := block.Verdict(ctx, nil, 1, nil)
	assert.Equal(t, http.StatusTooManyRequests, v.Status)
	assert.Equal(t, "60", headerMap(fields)[core.HeaderRetryAfter])
	assert.Equal(t, 10, remaining(perIP, "192.0.2.9"))
	shadowBlock := core.Checks{{Limiter: newLim("blocked-shadow", 1, core.WithShadow()), Key: "-", Block: true}}
	v, _ = shadowBlock.Verdict(ctx, nil, 1, nil)
	assert.True(t, v.Pass())

	v, fields = core.Checks(nil).Verdict(ctx, nil, 1, nil)
	assert.True(t, v.Pass())
	assert.Empty(t, fields)
	v, _ = cs.Verdict(ctx, nil, 50, nil)
	assert.Equal(t, http.StatusInternalServerError, v.Status, "a cost beyond a capacity")
	v, _ = core.Checks{{Limiter: perIP, Key: ""}, {Limiter: perKey, Key: "k"}}.Verdict(ctx, nil, 1, nil)
	assert.Equal(t, http.StatusBadRequest, v.Status)
}

// Review findings, each once a bug: the rejection carries its own check's
// error (not another check's store failure); a shadow check's bad cost is
// found before anything counts; shadow checks stay out of the headers;
// soft throttling shows with several limits; shadow mode never delays.
func TestChecksEdges(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	store := newMemory(t, clock)
	quiet := slog.New(slog.DiscardHandler)
	newLim := func(name string, n int, opts ...core.Option) *core.Limiter {
		l, err := core.NewLimiter(core.Limit{Name: name, Algorithm: core.FixedWindow, Rate: core.PerMinute(n)},
			append([]core.Option{core.WithStore(store), core.WithLogger(quiet)}, opts...)...)
		require.NoError(t, err)
		return l
	}

	down, err := core.NewLimiter(core.Limit{Name: "down", Rate: core.PerMinute(10)}, core.WithStore(&failingStore{}), core.WithLogger(quiet))
	require.NoError(t, err)
	one := newLim("one", 1)
	cs := core.Checks{{Limiter: down, Key: "k"}, {Limiter: one, Key: "k"}}
	v, _ := cs.Verdict(ctx, nil, 1, nil)
	require.True(t, v.Pass())
	assert.ErrorContains(t, v.Err, "connection refused", "a passing request reports the store failure")
	v, _ = cs.Verdict(ctx, nil, 1, nil)
	assert.Equal(t, http.StatusTooManyRequests, v.Status, "the healthy limit rejects: 429, not the 503 of a store failure")
	assert.NoError(t, v.Err)

	enforced, shadow := newLim("enforced", 10), newLim("shadow", 2, core.WithShadow())
	cs = core.Checks{{Limiter: enforced, Key: "k"}, {Limiter: shadow, Key: "k"}}
	v, _ = cs.Verdict(ctx, nil, 3, nil)
	assert.Equal(t, http.StatusInternalServerError, v.Status, "cost 3 exceeds the shadow limit's capacity")
	d, err := enforced.TakeN(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 10, d.Remaining, "nothing was counted")

	for range 3 {
		v, fields := cs.Verdict(ctx, nil, 1, nil)
		require.True(t, v.Pass())
		assert.Equal(t, "enforced", v.Decision.Name, "the shadow limit does not show")
		assert.Equal(t, "10", headerMap(fields)[core.HeaderLimit])
	}

	soft, _ := newClocked(t, core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithLimit(core.Limit{Name: "hour", Algorithm: core.FixedWindow, Rate: core.PerHour(12)}), core.WithSoftPercent(50))
	for i := 1; i <= 12; i++ {
		d, err := soft.Take(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, i > 10, d.Soft, "request %d", i)
	}

	shaping, _ := newClocked(t, core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1), Burst: 5, Shaping: true}, core.WithShadow())
	for i := range 3 {
		d, err := shaping.Take(ctx, "k")
		require.NoError(t, err)
		assert.Zero(t, d.Delay, "request %d", i+1)
	}
}
