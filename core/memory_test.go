package core_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
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
// keys can neither evict them nor gain more than the sketch's cells hold.
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
	// A flood of new keys is counted in the sketch: 2 rows of 64 cells,
	// each admitting 3 in the window, 384 at most however many keys.
	admitted := 0
	for i := 0; i < 10_000; i++ {
		clock.Advance(time.Millisecond)
		d, err := c.Take(ctx, fmt.Sprint("flood-", i), 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	require.LessOrEqual(t, admitted, 2*64*3, "new keys at the cap gain no more than the sketch's cells")
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

// A bucket rebound with another count keeps the time it needs to refill,
// capped at the burst of the limit deciding; another period starts afresh.
func TestMemoryStoreRebindKeepsRefillTime(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := newMemory(t, clock)
	fast := bind(t, s, core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)})
	_, err := fast.Take(ctx, "k", 1000) // a second to refill
	require.NoError(t, err)

	slow := bind(t, s, core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.PerSecond(10), Burst: 5})
	d, err := slow.Peek(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed, "a second of refill is more than the half second a 5-token burst takes: empty")
	require.Equal(t, 100*time.Millisecond, d.RetryAfter)
	require.Equal(t, 500*time.Millisecond, d.ResetAfter, "capped at the burst")

	clock.Advance(700 * time.Millisecond)
	d, err = fast.Peek(ctx, "k", 0)
	require.NoError(t, err)
	require.Equal(t, 700, d.Remaining, "the fast binding still reads its own state")

	other := bind(t, s, core.Limit{Name: "x", Algorithm: core.TokenBucket, Rate: core.Rate{Count: 2000, Period: 2 * time.Second}})
	d, err = other.Peek(ctx, "k", 0)
	require.NoError(t, err)
	require.Equal(t, 2000, d.Remaining, "another period starts afresh")
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

// At the cap, Peek sees the sketch's estimate that Take would count in, so
// a limiter with several limits never counts a request another one
// rejects.
func TestMemoryStorePeekSeesOverflow(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := &core.MemoryStore{Clock: clock.Now, Shards: 1, MaxKeys: 1}
	lim, err := core.NewLimiter(core.Limit{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(s), core.WithLimit(core.Limit{Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}))
	require.NoError(t, err)
	_, err = lim.Take(ctx, "tracked", 1) // the shard's one slot
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		d, err := lim.Take(ctx, "k", 1) // in the sketch
		require.NoError(t, err)
		require.Equal(t, i == 1, d.Allowed, "request %d", i)
	}
	d, err := lim.Take(ctx, "k", 0)
	require.NoError(t, err)
	require.Equal(t, 0, d.Remaining, "limit b must show its one request")
	ab, err := s.Bind([]core.Limit{{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}, {Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}})
	require.NoError(t, err)
	ds := make([]core.Decision, 2)
	require.NoError(t, ab.Peek(ctx, "k", 0, ds))
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

// collectUntil collects garbage, and lets the cleanups it queues run, until
// done reports true: a bounded number of times.
func collectUntil(done func() bool) bool {
	for range 100 {
		if done() {
			return true
		}
		runtime.GC()
		for range 10 {
			runtime.Gosched()
		}
	}
	return done()
}

// A set of limits keeps its table while a counter bound to it is
// reachable, and while keys are still counting in it; once neither holds,
// the table is dropped.
func TestMemoryStoreDropsUnreachableTables(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := &core.MemoryStore{Clock: clock.Now}
	api := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	tracked := func() int { return s.TrackedKeys(api) }

	// A counter whose keys are back to full: dropped once unreachable.
	func() {
		c := bind(t, s, api)
		_, err := c.Take(ctx, "client", 1)
		require.NoError(t, err)
	}()
	clock.Advance(time.Minute)
	require.Equal(t, 1, tracked(), "a full key stays until its shard grows")
	require.True(t, collectUntil(func() bool { return tracked() == 0 }), "the table of an unreachable counter was kept")

	// A counter whose key still counts: its table outlives it, and a
	// binding of the same limit shares the count, however the collections
	// and the cleanups fall.
	func() {
		c := bind(t, s, api)
		for range 3 {
			_, err := c.Take(ctx, "client", 1)
			require.NoError(t, err)
		}
	}()
	collectUntil(func() bool { return false })
	require.Equal(t, 1, tracked())
	func() {
		d, err := bind(t, s, api).Peek(ctx, "client", 0)
		require.NoError(t, err)
		require.Equal(t, 2, d.Remaining, "a key still counting was forgotten")
	}()
	// Once the key is back to full, the orphaned table goes.
	clock.Advance(3 * time.Minute)
	require.True(t, collectUntil(func() bool { return tracked() == 0 }), "the orphaned table was kept after its keys were full")
}

// Bindings of the same limits share their table while one of them is
// reachable, however often others are bound, dropped and collected,
// concurrently: their counts, and, once the keys are full, the table
// itself.
func TestMemoryStoreRebindWhileAliveSharesCounts(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := &core.MemoryStore{Clock: clock.Now}
	api := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(5)}
	tracked := func() int { return s.TrackedKeys(api) }
	keep := bind(t, s, api)
	for range 3 {
		_, err := keep.Take(ctx, "client", 1)
		require.NoError(t, err)
	}
	// churn binds the limit again and again from several goroutines,
	// dropping each binding at once, with collections in between; check
	// runs on each binding.
	churn := func(check func(c core.Counter) error) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					c, err := s.Bind([]core.Limit{api})
					if !assert.NoError(t, err) {
						return
					}
					if err := check(c); err != nil {
						t.Errorf("binding %d of goroutine %d: %v", i, g, err)
						return
					}
					if i%50 == 0 {
						runtime.GC()
					}
				}
			}()
		}
		wg.Wait()
		collectUntil(func() bool { return false })
	}
	churn(func(c core.Counter) error {
		ds := make([]core.Decision, 1)
		if err := c.Peek(ctx, "client", 0, ds); err != nil {
			return err
		}
		if ds[0].Remaining != 2 {
			return fmt.Errorf("remaining %d, want 2", ds[0].Remaining)
		}
		return nil
	})
	d, err := keep.Peek(ctx, "client", 0)
	require.NoError(t, err)
	require.Equal(t, 2, d.Remaining)
	_, err = bind(t, s, api).Take(ctx, "client", 1)
	require.NoError(t, err)
	d, err = keep.Peek(ctx, "client", 0)
	require.NoError(t, err)
	require.Equal(t, 1, d.Remaining, "a new binding counts in the same table")

	// Full again, the key no longer keeps the table: keep does.
	clock.Advance(time.Hour)
	churn(func(core.Counter) error { return nil })
	require.Equal(t, 1, tracked(), "the table was dropped while a counter bound to it was reachable")
	runtime.KeepAlive(keep)
	require.True(t, collectUntil(func() bool { return tracked() == 0 }), "the table outlived its counters")
}

// Tables freed: limits bound and dropped by the thousand give their memory
// back; and a set of limits that only blocks costs no table while alive.
func TestMemoryStoreTableMemory(t *testing.T) {
	s := &core.MemoryStore{}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	const n = 1000
	before := heap()
	func() {
		cs := make([]core.Counter, n)
		for i := range cs {
			c, err := s.Bind([]core.Limit{{Name: fmt.Sprint("rule-", i), Rate: core.PerMinute(5)}})
			require.NoError(t, err)
			cs[i] = c
		}
		bound := heap()
		t.Logf("%d tables: %.0f bytes each", n, float64(bound-before)/n)
		require.Greater(t, bound, before+n*1024, "the test measures no tables")
	}()
	var after uint64
	require.True(t, collectUntil(func() bool { after = heap(); return after < before+n*100 }),
		"%d dropped tables kept %d bytes", n, after-before)

	before = heap()
	blocks := make([]core.Counter, n)
	for i := range blocks {
		c, err := s.Bind([]core.Limit{{Name: fmt.Sprint("block-", i), Rate: core.PerMinute(0)}})
		require.NoError(t, err)
		blocks[i] = c
	}
	perBlock := float64(heap()-before) / n
	t.Logf("block-only counters: %.0f bytes each", perBlock)
	require.Less(t, perBlock, 1024.0)
	ds := make([]core.Decision, 1)
	_, err := blocks[0].Take(context.Background(), "client", 1, ds)
	require.NoError(t, err)
	require.False(t, ds[0].Allowed)
	runtime.KeepAlive(blocks)
}

// A limit that blocked (count 0, no state) and now counts, with the first
// binding still alive, counts from zero: alone, or beside another limit.
func TestMemoryStoreBlockThenCount(t *testing.T) {
	ctx := context.Background()
	s := &core.MemoryStore{}
	admitted := func(l *core.Limiter) int {
		n := 0
		for range 10 {
			d, err := l.Take(ctx, "client", 1)
			require.NoError(t, err)
			if d.Allowed {
				n++
			}
		}
		return n
	}
	block := core.Must(core.NewLimiter(core.Limit{Name: "x", Rate: core.PerMinute(0)}, core.WithStore(s)))
	five := core.Must(core.NewLimiter(core.Limit{Name: "x", Rate: core.PerMinute(5)}, core.WithStore(s)))
	require.Equal(t, 5, admitted(five))
	require.Zero(t, admitted(block))

	y := core.Limit{Name: "y", Rate: core.PerMinute(5)}
	yBlock := core.Must(core.NewLimiter(y, core.WithStore(s), core.WithLimit(core.Limit{Name: "z", Rate: core.PerMinute(0)})))
	yThree := core.Must(core.NewLimiter(y, core.WithStore(s), core.WithLimit(core.Limit{Name: "z", Rate: core.PerMinute(3)})))
	require.Equal(t, 3, admitted(yThree))
	require.Zero(t, admitted(yBlock))
}
