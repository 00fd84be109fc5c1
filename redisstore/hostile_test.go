package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

var everyAlgorithm = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

// A key never seen has no history whatever the store's clock says: before
// 1970, at the epoch, far in the future. Each clock is 30 s into a minute.
func TestZeroStateIsNoHistoryAtAnyClock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := ctxClient(t, srv)
	ctx := context.Background()
	for _, at := range []time.Time{
		time.Date(1900, 3, 1, 12, 0, 30, 0, time.UTC),
		time.Unix(-30, 0),
		time.Unix(30, 0),
		time.Date(3000, 1, 1, 0, 0, 30, 0, time.UTC),
	} {
		for _, alg := range everyAlgorithm {
			clock := storetest.NewClock(at)
			c := bind(t, newStore(t, rdb, clock), core.Limit{Rate: core.PerMinute(3), Algorithm: alg})
			for i := 2; i >= 0; i-- {
				d, err := c.Take(ctx, "k", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed, "%s at %v: request %d of 3 on a fresh key", alg, at, 3-i)
				require.Equal(t, i, d.Remaining)
			}
			d, err := c.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			if alg == core.FixedWindow {
				assert.Equal(t, 30*time.Second, d.RetryAfter, "%v: the window ends at the next whole minute", at)
			}
			clock.Advance(d.RetryAfter)
			d, err = c.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%s at %v: admitted again after Retry-After", alg, at)
		}
	}
}

// The largest cost on the largest limit each algorithm accepts costs Redis
// a bounded amount: a few bytes for buckets and windows; for a log, whose
// sorted set holds a member per unit, at most MaxLogCount members. A cost
// over a limit's capacity is refused before anything is written.
func TestHugeCostMemoryIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := ctxClient(t, srv)
	ctx := context.Background()
	used := func() int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		t.Fatal("no used_memory in INFO")
		return 0
	}
	for _, alg := range everyAlgorithm {
		t.Run(alg.String(), func(t *testing.T) {
			count, bound := core.MaxCount, int64(64<<10)
			if alg == core.SlidingWindowLog {
				count, bound = redisstore.MaxLogCount, 2<<20
			}
			c := bind(t, newStore(t, rdb, nil), core.Limit{Rate: core.Rate{Count: count, Period: core.MaxPeriod}, Algorithm: alg})
			_, err := c.Take(ctx, "warm-up", 1) // the script loaded, a connection open
			require.NoError(t, err)
			before := used()
			d, err := c.Take(ctx, "k", count)
			require.NoError(t, err)
			require.True(t, d.Allowed, "a cost of %d", count)
			d, err = c.Take(ctx, "k", count)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			grown := used() - before
			t.Logf("Redis used_memory grew by %d bytes", grown)
			assert.Less(t, grown, bound)
			if alg == core.SlidingWindowLog {
				_, err = c.Take(ctx, "k2", redisstore.MaxLogCount+1)
				require.ErrorIs(t, err, core.ErrCostExceedsLimit, "a cost over the log's count")
			}
		})
	}
}
