package core_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
)

func TestParams(t *testing.T) {
	// 7 per 10 s in bursts of 4: one token every 10s/7 = 1,428,571.428 µs,
	// kept as 1,428,571 µs; 4 tokens refill in 5,714,284 µs.
	p, err := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.Rate{Count: 7, Period: 10 * time.Second}, Burst: 4}.
		Params(time.Microsecond)
	require.NoError(t, err)
	assert.Equal(t, core.Params{
		ID: "api:token-bucket", Name: "api", Algorithm: core.TokenBucket,
		Count: 7, Burst: 4, Capacity: 4, Unit: time.Microsecond,
		Period: 10_000_000, Emission: 1_428_571, Tau: 5_714_284,
		Window: 5_714_284 * time.Microsecond,
	}, p)

	// A shaping leaky bucket: 3 per 2 s, one slot every 666,666 µs; a
	// delay bound of 1.1 s admits the request at the head and one more.
	p, err = core.Limit{Algorithm: core.LeakyBucket, Rate: core.Rate{Count: 3, Period: 2 * time.Second}, Burst: 5,
		Shaping: true, MaxDelay: 1100 * time.Millisecond}.Params(time.Microsecond)
	require.NoError(t, err)
	assert.Equal(t, "3-per-2s", p.Name)
	assert.Equal(t, int64(2), p.Capacity)
	assert.Equal(t, int64(1_100_000), p.MaxDelay)

	// A delay bound below one unit stays a bound: it is rounded up.
	p, err = core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1000), Burst: 10,
		Shaping: true, MaxDelay: 500 * time.Nanosecond}.Params(time.Microsecond)
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.MaxDelay)
	assert.Equal(t, int64(1), p.Capacity)

	// Windows have no burst and no emission; the default algorithm is filled in.
	p, err = core.Limit{Rate: core.PerMinute(100)}.Params(time.Nanosecond)
	require.NoError(t, err)
	assert.Equal(t, core.SlidingWindowCounter, p.Algorithm)
	assert.Equal(t, int64(100), p.Capacity)
	assert.Equal(t, int64(time.Minute), p.Period)
	assert.Zero(t, p.Emission)
	assert.Equal(t, time.Minute, p.Window)
}

func TestParamsErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		limit core.Limit
		unit  time.Duration
	}{
		"invalid limit":          {core.Limit{Rate: core.PerMinute(0)}, time.Microsecond},
		"period not whole units": {core.Limit{Rate: core.Rate{Count: 1, Period: 1500 * time.Nanosecond}}, time.Microsecond},
		"faster than the unit":   {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(2_000_000)}, time.Microsecond},
		"unit rounds over 1%":    {core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(300_000)}, time.Microsecond},
	} {
		_, err := tc.limit.Params(tc.unit)
		assert.True(t, errors.Is(err, core.ErrInvalidLimit), "%s: %v", name, err)
	}
	// The same rates are fine in nanoseconds.
	_, err := core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(300_000)}.Params(time.Nanosecond)
	assert.NoError(t, err)
	_, err = core.Limit{Rate: core.PerMinute(1)}.Params(0)
	assert.Error(t, err)
}
