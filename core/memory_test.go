package core_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func TestMemoryStoreOptionsAreValidated(t *testing.T) {
	_, err := core.NewMemoryStore(core.WithMaxKeys(0))
	require.ErrorContains(t, err, "max keys 0")
	_, err = core.NewMemoryStore(core.WithShards(-1))
	require.ErrorContains(t, err, "shards -1")
	_, err = core.NewMemoryStore()
	require.NoError(t, err)
}

func TestMemoryStoreDecisionOnKnownKeyDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	for _, alg := range core.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			s := newMemory(t, clock)
			c, err := s.Bind(core.Limit{Algorithm: alg, Rate: core.PerSecond(1000)})
			require.NoError(t, err)
			// Fill the sliding log to its full size first.
			for i := 0; i < 2000; i++ {
				_, err := c.Take(ctx, "client", 1)
				require.NoError(t, err)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				clock.Advance(time.Millisecond)
				_, _ = c.Take(ctx, "client", 1)
			})
			require.Zero(t, allocs)
		})
	}
}

// Keys whose state is back to full are dropped when a shard must grow, so
// a stream of one-off clients does not accumulate.
func TestMemoryStoreDropsFullKeys(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s, err := core.NewMemoryStore(core.WithClock(clock), core.WithShards(1))
	require.NoError(t, err)
	c, err := s.Bind(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(10)})
	require.NoError(t, err)
	for i := 0; i < 100_000; i++ {
		// Each client sends one request; 100ms later its bucket is full.
		clock.Advance(time.Millisecond)
		_, err := c.Take(ctx, fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	require.Less(t, s.Len(), 1000, "full keys were not dropped")
}

// At the key cap, clients over their limit keep their state: a flood of new
// keys can neither evict them nor gain a budget of its own.
func TestMemoryStoreCapDoesNotResetClients(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s, err := core.NewMemoryStore(core.WithClock(clock), core.WithShards(1), core.WithMaxKeys(8))
	require.NoError(t, err)
	c, err := s.Bind(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	require.NoError(t, err)

	// Eight clients use up their limit: the shard is at its cap.
	for i := 0; i < 8; i++ {
		for j := 0; j < 3; j++ {
			d, err := c.Take(ctx, fmt.Sprint("victim-", i), 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	// A flood of new keys shares one overflow budget: 3 requests in all.
	admitted := 0
	for i := 0; i < 1000; i++ {
		clock.Advance(time.Millisecond)
		d, err := c.Take(ctx, fmt.Sprint("flood-", i), 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	require.Equal(t, 3, admitted, "new keys at the cap must share one budget")
	require.LessOrEqual(t, s.Len(), 8)
	for i := 0; i < 8; i++ {
		d, err := c.Take(ctx, fmt.Sprint("victim-", i), 1)
		require.NoError(t, err)
		require.False(t, d.Allowed, "client %d got a fresh budget", i)
	}

	// Once the window turns, the tracked keys are full again and are
	// dropped to make room: new clients get budgets of their own.
	clock.Advance(time.Minute)
	for i := 0; i < 5; i++ {
		for j := 0; j < 3; j++ {
			d, err := c.Take(ctx, fmt.Sprint("later-", i), 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "client %d request %d", i, j)
		}
	}
}

// Keys are stored as hashes: ten-kilobyte keys cost no more than short ones.
func TestMemoryStoreLongKeysAreNotStored(t *testing.T) {
	ctx := context.Background()
	s, err := core.NewMemoryStore()
	require.NoError(t, err)
	c, err := s.Bind(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(10)})
	require.NoError(t, err)
	pad := strings.Repeat("x", 10_000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 20_000
	for i := 0; i < n; i++ {
		_, err := c.Take(ctx, pad+fmt.Sprint(i), 1)
		require.NoError(t, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Equal(t, n, s.Len())
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	require.Less(t, perKey, 200.0, "bytes per 10 KB key")
}

// Rebinding a bucket with a much slower rate keeps the level in tokens,
// capped at the new capacity, without overflowing.
func TestMemoryStoreRescaleIsBounded(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	fast, err := s.Bind(core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)})
	require.NoError(t, err)
	_, err = fast.Take(ctx, "k", 1000)
	require.NoError(t, err)
	for _, rate := range []core.Rate{{Count: 1, Period: core.MaxPeriod}, {Count: 1, Period: 10_000_000 * time.Second}} {
		slow, err := s.Bind(core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: rate})
		require.NoError(t, err)
		d, err := slow.Peek(ctx, "k", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed, "rate %s: an empty bucket must stay empty", rate)
		require.LessOrEqual(t, d.ResetAfter, d.Window, "rate %s", rate)
		require.Equal(t, rate.Period/time.Duration(rate.Count), d.RetryAfter, "rate %s", rate)
	}
	// The level was capped at the 1-token burst: 1 token used of 10.
	ten, err := s.Bind(core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.PerHour(10)})
	require.NoError(t, err)
	d, err := ten.Peek(ctx, "k", 0)
	require.NoError(t, err)
	require.Equal(t, 9, d.Remaining)
}

// After a window limit's period is lengthened, keys written under the old
// period are full (the next request would reset them) and are dropped.
func TestMemoryStoreWindowPeriodChangeFreesKeys(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		clock := storetest.NewClock(storetest.Epoch.Add(59 * time.Minute))
		s, err := core.NewMemoryStore(core.WithClock(clock), core.WithShards(1), core.WithMaxKeys(4))
		require.NoError(t, err)
		perMinute, err := s.Bind(core.Limit{Name: "x", Algorithm: alg, Rate: core.PerMinute(5)})
		require.NoError(t, err)
		for i := 0; i < 4; i++ {
			_, err := perMinute.Take(ctx, fmt.Sprint("old-", i), 5)
			require.NoError(t, err)
		}
		perHour, err := s.Bind(core.Limit{Name: "x", Algorithm: alg, Rate: core.PerHour(5)})
		require.NoError(t, err)
		clock.Advance(48 * time.Hour)
		for i := 0; i < 4; i++ {
			d, err := perHour.Take(ctx, fmt.Sprint("new-", i), 5)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%s: new client %d landed in the overflow", alg, i)
		}
	}
}

// At the cap, Peek sees the overflow state that Take would count in, so a
// limiter with several limits never counts a request another one rejects.
func TestMemoryStorePeekSeesOverflow(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s, err := core.NewMemoryStore(core.WithClock(clock), core.WithShards(1), core.WithMaxKeys(1))
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(s), core.WithLimit(core.Limit{Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}))
	require.NoError(t, err)
	var last core.Decision
	for i := 1; i <= 4; i++ {
		last, err = lim.Take(ctx, fmt.Sprint("k", i))
		require.NoError(t, err)
		require.Equal(t, i <= 2, last.Allowed, "request %d", i)
	}
	a, err := s.Bind(core.Limit{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	require.NoError(t, err)
	d, err := a.Peek(ctx, "k5", 0)
	require.NoError(t, err)
	require.Equal(t, 9, d.Remaining, "limit a counted requests that limit b rejected")
}

func TestTrackedKeys(t *testing.T) {
	s, err := core.NewMemoryStore()
	require.NoError(t, err)
	api := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(5)}
	login := core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	assert.Zero(t, s.TrackedKeys(api), "never bound")
	a, err := s.Bind(api)
	require.NoError(t, err)
	l, err := s.Bind(login)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := a.Take(context.Background(), fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	_, err = l.Take(context.Background(), "client-0", 1)
	require.NoError(t, err)
	assert.Equal(t, 3, s.TrackedKeys(api))
	assert.Equal(t, 1, s.TrackedKeys(login))
	assert.Zero(t, s.TrackedKeys(core.Limit{}), "invalid limit")
}
