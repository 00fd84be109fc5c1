package core_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// The elastic traces and concurrency checks of storetest, on the memory
// store (the decisions written in place), and on the memory store seen as
// a remote store (the path every other store takes).
func TestElastic(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.RunElastic(t, func(t *testing.T, c *storetest.Clock) core.Store { return newMemory(t, c) })
	})
	t.Run("remote", func(t *testing.T) {
		storetest.RunElastic(t, func(t *testing.T, c *storetest.Clock) core.Store { return storetest.Slow(newMemory(t, c), 0) })
	})
}

func TestElasticOptionErrors(t *testing.T) {
	spare := func() bool { return true }
	lim := core.Limit{Rate: core.PerMinute(5)}
	for name, opts := range map[string][]core.Option{
		"percent 0":          {core.WithElastic(0, spare)},
		"percent 1001":       {core.WithElastic(1001, spare)},
		"negative percent":   {core.WithElastic(-5, spare)},
		"nil signal":         {core.WithElastic(100, nil)},
		"soft, then elastic": {core.WithSoftPercent(10), core.WithElastic(100, spare)},
		"elastic, then soft": {core.WithElastic(100, spare), core.WithSoftPercent(10)},
	} {
		_, err := core.NewLimiter(lim, opts...)
		assert.ErrorIs(t, err, core.ErrInvalidLimit, name)
		_, err = core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) { return lim, nil }, opts...)
		assert.ErrorIs(t, err, core.ErrInvalidLimit, name+", plan limiter")
	}
	_, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(core.MaxCount)}, core.WithElastic(1, spare))
	assert.ErrorIs(t, err, core.ErrInvalidLimit, "a ceiling beyond MaxCount")
	assert.ErrorContains(t, err, "elastic percent 1")
	_, err = core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: 24 * time.Hour}, Burst: 30_000},
		core.WithElastic(1000, spare))
	assert.ErrorIs(t, err, core.ErrInvalidLimit, "a raised burst that takes more than 100 years to refill")

	// A soft percent of 0 is soft throttling off: no conflict.
	_, err = core.NewLimiter(lim, core.WithSoftPercent(0), core.WithElastic(100, spare))
	assert.NoError(t, err)
}

// Observers see elastic admissions as ElasticAllowed; the signal is asked
// once per decision, and a cost the limit itself cannot take is refused
// even with room.
func TestElasticObserved(t *testing.T) {
	ctx := context.Background()
	seen := outcomes{}
	var room atomic.Bool
	var asked atomic.Int64
	spare := func() bool { asked.Add(1); return room.Load() }
	lim, _ := newClocked(t, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(4)},
		core.WithElastic(50, spare), core.WithObserver(seen.observe))
	room.Store(true)
	for i := range 7 {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, i < 6, d.Allowed, "request %d", i+1)
		assert.Equal(t, i == 4 || i == 5, d.Elastic, "request %d", i+1)
		assert.Equal(t, 4, d.Quota)
	}
	room.Store(false)
	d, _ := lim.Take(ctx, "k", 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, outcomes{core.Allowed: 4, core.ElasticAllowed: 2, core.Denied: 2}, seen)
	assert.Equal(t, int64(8), asked.Load(), "one question per decision")
	assert.Equal(t, "elastic_allowed", core.ElasticAllowed.String())

	room.Store(true)
	_, err := lim.Take(ctx, "other", 5)
	assert.ErrorIs(t, err, core.ErrCostExceedsLimit, "a cost over the limit itself")
}

// TakeAll carries Elastic from the check that admitted beyond its limit,
// asking each elastic limiter's signal once; a limiter of several limits
// reports Elastic when one of them admitted beyond itself.
func TestElasticTakeAll(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	var asked atomic.Int64
	spare := func() bool { asked.Add(1); return true }
	per := core.Limit{Name: "per-key", Algorithm: core.FixedWindow, Rate: core.PerSecond(2)}
	global, err := core.NewLimiter(core.Limit{Name: "global", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(100)}, core.WithStore(s))
	require.NoError(t, err)
	elastic, err := core.NewLimiter(per, core.WithStore(s), core.WithElastic(100, spare),
		core.WithLimit(core.Limit{Name: "per-key-minute", Algorithm: core.TokenBucket, Rate: core.PerMinute(60), Burst: 3}))
	require.NoError(t, err)
	checks := []core.Check{{Limiter: global, Key: "all"}, {Limiter: elastic, Key: "k"}}
	var got []bool
	for range 5 {
		d, err := core.TakeAll(ctx, checks, 1)
		require.NoError(t, err)
		if !d.Allowed {
			got = append(got, false)
			assert.Equal(t, "per-key", d.Name)
			assert.Equal(t, time.Second, d.RetryAfter)
			continue
		}
		got = append(got, d.Elastic)
	}
	// 2 per second raised to 4; the burst of 3 raised to 6: the 3rd and
	// 4th are beyond the per-second limit, the 4th beyond the burst too,
	// and the 5th over the raised per-second limit.
	assert.Equal(t, []bool{false, false, true, true, false}, got)
	assert.Equal(t, int64(5), asked.Load())
	d, _ := global.Take(ctx, "all", 0)
	assert.Equal(t, 96, d.Remaining, "the rejected request was not counted")
}

// A plan limiter binds each plan with the elastic option, and plans of one
// name share their counts with room or without.
func TestElasticPlans(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	var room atomic.Bool
	free := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}
	lim, err := core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) { return free, nil },
		core.WithStore(newMemory(t, clock)), core.WithElastic(100, room.Load))
	require.NoError(t, err)
	room.Store(true)
	for i := range 4 {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, i >= 2, d.Elastic)
	}
	room.Store(false)
	d, _ := lim.Take(ctx, "k", 1)
	assert.False(t, d.Allowed)
	st, err := lim.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, st.Decision.Allowed, "the operator sees the limit as configured")
	assert.Equal(t, 2, st.Decision.Quota)
}

func ExampleWithElastic() {
	// The signal is the application's: here a flag that a load monitor
	// would keep up to date.
	var room atomic.Bool
	clock := storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))
	lim, _ := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithElastic(100, room.Load), // up to 4 per minute while there is room
		core.WithStore(&core.MemoryStore{Clock: clock.Now}),
	)
	ctx := context.Background()
	room.Store(true)
	for range 5 {
		d, _ := lim.Take(ctx, "client-42", 1)
		fmt.Printf("room: allowed %v, elastic %v, remaining %d of %d\n", d.Allowed, d.Elastic, d.Remaining, d.Quota)
	}
	room.Store(false)
	d, _ := lim.Take(ctx, "client-42", 1)
	fmt.Printf("no room: allowed %v, retry after %s\n", d.Allowed, d.RetryAfter)
	// Output:
	// room: allowed true, elastic false, remaining 1 of 2
	// room: allowed true, elastic false, remaining 0 of 2
	// room: allowed true, elastic true, remaining 0 of 2
	// room: allowed true, elastic true, remaining 0 of 2
	// room: allowed false, elastic false, remaining 0 of 2
	// no room: allowed false, retry after 1m0s
}
