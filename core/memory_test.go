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

func TestMemoryStoreFieldsAreValidated(t *testing.T) {
	lim := []core.Limit{{Rate: core.PerMinute(1)}}
	_, err := (&core.MemoryStore{MaxKeys: -1}).Bind(lim)
	require.ErrorContains(t, err, "MaxKeys -1")
	_, err = (&core.MemoryStore{Shards: -1}).Bind(lim)
	require.ErrorContains(t, err, "Shards -1")
	_, err = (&core.MemoryStore{}).Bind(lim)
	require.NoError(t, err)
	_, err = (&core.MemoryStore{}).Bind(nil)
	require.ErrorIs(t, err, core.ErrInvalidLimit)
}

func newMemory(t *testing.T, c *storetest.Clock) *core.MemoryStore {
	return &core.MemoryStore{Clock: c.Now}
}

func bind(t *testing.T, s core.Store, l core.Limit) storetest.One {
	t.Helper()
	c, err := s.Bind([]core.Limit{l})
	require.NoError(t, err)
	return storetest.One{Counter: c}
}

var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

func TestMemoryStoreDecisionOnKnownKeyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			lim, err := core.NewLimiter(core.Limit{Algorithm: alg, Rate: core.PerSecond(1000)},
				core.WithStore(newMemory(t, clock)),
				core.WithLimit(core.Limit{Name: "hourly", Algorithm: alg, Rate: core.PerHour(1 << 30)}))
			require.NoError(t, err)
			// Fill the sliding log to its full size first.
			for i := 0; i < 2000; i++ {
				_, err := lim.Take(ctx, "client", 1)
				require.NoError(t, err)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				clock.Advance(time.Millisecond)
				_, _ = lim.Take(ctx, "client", 1)
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
	s := &core.MemoryStore{Clock: clock.Now, Shards: 1}
	c := bind(t, s, core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(10)})
	for i := 0; i < 100_000; i++ {
		// Each client sends one request; 100ms later its bucket is full.
		clock.Advance(time.Millisecond)
		_, err := c.Take(ctx, fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	require.Less(t, s.TrackedKeys(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(10)}), 1000, "full keys were not dropped")
}

// At the key cap, clients over their limit keep their state: a flood of new
// keys can neither evict them nor gain a budget of its own.
func TestMemoryStoreCapDoesNotResetClients(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := &core.MemoryStore{Clock: clock.Now, Shards: 1, MaxKeys: 8}
	c := bind(t, s, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})

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
	require.LessOrEqual(t, s.TrackedKeys(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)}), 8)
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
	s := &core.MemoryStore{}
	c := bind(t, s, core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(10)})
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
	require.Equal(t, n, s.TrackedKeys(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(10)}))
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	require.Less(t, perKey, 200.0, "bytes per 10 KB key")
}

// Rebinding a bucket with a much slower rate keeps the level in tokens,
// capped at the new capacity, without overflowing.
func TestMemoryStoreRescaleIsBounded(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	fast := bind(t, s, core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)})
	_, err := fast.Take(ctx, "k", 1000)
	require.NoError(t, err)
	for _, rate := range []core.Rate{{Count: 1, Period: core.MaxPeriod}, {Count: 1, Period: 10_000_000 * time.Second}} {
		slow := bind(t, s, core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: rate})
		d, err := slow.Peek(ctx, "k", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed, "rate %v: an empty bucket must stay empty", rate)
		require.LessOrEqual(t, d.ResetAfter, d.Window, "rate %v", rate)
		require.Equal(t, rate.Period/time.Duration(rate.Count), d.RetryAfter, "rate %v", rate)
	}
	// The level was capped at the 1-token burst: 1 token used of 10.
	ten := bind(t, s, core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.PerHour(10)})
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
		s := &core.MemoryStore{Clock: clock.Now, Shards: 1, MaxKeys: 4}
		perMinute := bind(t, s, core.Limit{Name: "x", Algorithm: alg, Rate: core.PerMinute(5)})
		for i := 0; i < 4; i++ {
			_, err := perMinute.Take(ctx, fmt.Sprint("old-", i), 5)
			require.NoError(t, err)
		}
		perHour := bind(t, s, core.Limit{Name: "x", Algorithm: alg, Rate: core.PerHour(5)})
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
	s := &core.MemoryStore{Clock: clock.Now, Shards: 1, MaxKeys: 1}
	lim, err := core.NewLimiter(core.Limit{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(s), core.WithLimit(core.Limit{Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}))
	require.NoError(t, err)
	var last core.Decision
	for i := 1; i <= 4; i++ {
		last, err = lim.Take(ctx, fmt.Sprint("k", i), 1)
		require.NoError(t, err)
		require.Equal(t, i <= 2, last.Allowed, "request %d", i)
	}
	d, err := lim.Take(ctx, "k5", 0)
	require.NoError(t, err)
	require.Equal(t, 0, d.Remaining, "limit b must show its one request")
	ab, err := s.Bind([]core.Limit{{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}, {Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}})
	require.NoError(t, err)
	ds := make([]core.Decision, 2)
	require.NoError(t, ab.Peek(ctx, "k5", 0, ds))
	require.Equal(t, 9, ds[0].Remaining, "limit a counted requests that limit b rejected")
}

func TestTrackedKeys(t *testing.T) {
	s := &core.MemoryStore{}
	api := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(5)}
	login := core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	assert.Zero(t, s.TrackedKeys(api), "never bound")
	a := bind(t, s, api)
	l := bind(t, s, login)
	for i := 0; i < 3; i++ {
		_, err := a.Take(context.Background(), fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	_, err := l.Take(context.Background(), "client-0", 1)
	require.NoError(t, err)
	assert.Equal(t, 3, s.TrackedKeys(api))
	assert.Equal(t, 1, s.TrackedKeys(login))
	assert.Zero(t, s.TrackedKeys(core.Limit{}), "invalid limit")
}
