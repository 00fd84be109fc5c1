package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// TestTakeEachTrace follows three checks (a minute window of 4, an hour
// window of 2 and a shadow minute window of 1) through a hand-computed
// trace: each check's own decision, admitted and rejected.
func TestTakeEachTrace(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch.Truncate(time.Hour))
	s := newMemory(t, clock)
	minute, _ := core.NewLimiter(core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(4)}, core.WithStore(s))
	hour, _ := core.NewLimiter(core.Limit{Name: "hour", Algorithm: core.FixedWindow, Rate: core.PerHour(2)}, core.WithStore(s))
	shadow, _ := core.NewLimiter(core.Limit{Name: "shadow", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}, core.WithStore(s), core.WithShadow())
	checks := []core.Check{{Limiter: minute, Key: "a"}, {Limiter: hour, Key: "a"}, {Limiter: shadow, Key: "a"}}
	each := make([]core.Decision, 3)

	// 1: all admit; minute 4-1=3, hour 2-1=1, shadow 1-1=0.
	d, err := core.TakeEach(ctx, checks, 1, each)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, []int{3, 1, 0}, remaining(each))
	assert.Equal(t, []bool{true, true, true}, allowed(each))
	assert.False(t, each[2].Shadow)

	// 2: all admit; the shadow limit is over (Shadow), minute 2, hour 0.
	d, err = core.TakeEach(ctx, checks, 1, each)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, []int{2, 0, 0}, remaining(each))
	assert.True(t, each[2].Shadow)

	// 3: the hour rejects. Nothing counts: the minute check reports 2 as
	// before the request, the hour its rejection (retry: the hour's end),
	// the shadow check its would-be rejection.
	d, err = core.TakeEach(ctx, checks, 1, each)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "hour", d.Name)
	assert.Equal(t, []int{2, 0, 0}, remaining(each))
	assert.Equal(t, []bool{true, false, true}, allowed(each))
	assert.Equal(t, time.Hour, each[1].RetryAfter)
	assert.True(t, each[2].Shadow)
	d, _ = minute.Take(ctx, "a", 0)
	assert.Equal(t, 2, d.Remaining, "the rejected request was given back")

	// 4: a minute later, the minute windows are new, the hour still full:
	// the minute check, asked first, counts and gives back.
	clock.Advance(time.Minute)
	_, err = core.TakeEach(ctx, checks, 1, each)
	require.NoError(t, err)
	assert.Equal(t, []int{4, 0, 1}, remaining(each))
	assert.Equal(t, []bool{true, false, true}, allowed(each))
	assert.Equal(t, 59*time.Minute, each[1].RetryAfter)

	// Cost 3 on the hour's next window: minute 4-3=1, hour rejects
	// (3 > 2) with no retry in time; minute reported 4.
	clock.Advance(59 * time.Minute)
	_, err = core.TakeEach(ctx, checks[:2], 3, each)
	require.ErrorIs(t, err, core.ErrCostExceedsLimit, "a cost over a limit is an error, as for TakeAll")

	// One check: each[0] is the decision.
	d, err = core.TakeEach(ctx, checks[:1], 1, each)
	require.NoError(t, err)
	assert.Equal(t, d, each[0])
	assert.Equal(t, 3, each[0].Remaining)

	_, err = core.TakeEach(ctx, checks, 1, each[:2])
	assert.Error(t, err, "no room for three decisions")
}

func remaining(ds []core.Decision) []int {
	r := make([]int, len(ds))
	for i := range ds {
		r[i] = ds[i].Remaining
	}
	return r
}

func allowed(ds []core.Decision) []bool {
	r := make([]bool, len(ds))
	for i := range ds {
		r[i] = ds[i].Allowed
	}
	return r
}
