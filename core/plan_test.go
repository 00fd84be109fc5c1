package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// plans is a plan lookup the test can change: the plan of each user.
type plans struct {
	mu    sync.Mutex
	of    map[string]core.Limit
	calls atomic.Int64
}

func (p *plans) set(user string, l core.Limit) { p.mu.Lock(); p.of[user] = l; p.mu.Unlock() }

func (p *plans) plan(_ context.Context, user string) (core.Limit, error) {
	p.calls.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.of[user]
	if !ok {
		return core.Limit{}, errors.New("no such user")
	}
	return l, nil
}

func TestPlanLimiter(t *testing.T) {
	ctx := context.Background()
	free := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}
	paid := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	p := &plans{of: map[string]core.Limit{"ann": free, "bob": paid}}
	clock := storetest.NewClock(storetest.Epoch)
	lim, err := core.NewPlanLimiter(p.plan, core.WithStore(&core.MemoryStore{Clock: clock.Now}))
	require.NoError(t, err)

	for i := 0; i < 3; i++ {
		d, err := lim.Take(ctx, "ann", 1)
		require.NoError(t, err)
		assert.Equal(t, i < 2, d.Allowed, "free request %d", i)
		assert.Equal(t, 2, d.Quota, "the decision describes the free plan")
	}
	for i := 0; i < 5; i++ {
		d, err := lim.Take(ctx, "bob", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "paid request %d", i)
		assert.Equal(t, 5, d.Quota)
		assert.Equal(t, 4-i, d.Remaining)
	}

	// Ann upgrades: her 2 requests count against the paid plan's 5.
	p.set("ann", paid)
	d, err := lim.Take(ctx, "ann", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 2, d.Remaining, "2 used of 5, and this one")

	// And downgrades: 3 used of 2 is over.
	p.set("ann", free)
	d, err = lim.Take(ctx, "ann", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)

	// A bucket keeps the time it needs to refill: 80 of 100 used is 800
	// of 1000 at ten times the rate.
	bucketFree := core.Limit{Name: "b", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}
	p.set("cat", bucketFree)
	_, err = lim.Take(ctx, "cat", 80)
	require.NoError(t, err)
	p.set("cat", core.Limit{Name: "b", Algorithm: core.TokenBucket, Rate: core.PerMinute(1000)})
	d, err = lim.Take(ctx, "cat", 0)
	require.NoError(t, err)
	assert.Equal(t, 200, d.Remaining)

	// A plan with another name counts apart.
	p.set("bob", core.Limit{Name: "partner", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	d, err = lim.Take(ctx, "bob", 1)
	require.NoError(t, err)
	assert.Equal(t, "partner", d.Name)
	assert.Equal(t, 4, d.Remaining)
}

// A plan function's error, and an invalid limit it returns, are errors
// wrapping ErrPlan: never a panic, never a store failure to fail open on.
func TestPlanErrors(t *testing.T) {
	ctx := context.Background()
	p := &plans{of: map[string]core.Limit{"bad": {Rate: core.Rate{Count: -1, Period: time.Minute}}}}
	lim, err := core.NewPlanLimiter(p.plan, core.WithLogger(discard))
	require.NoError(t, err)

	_, err = lim.Take(ctx, "nobody", 1)
	assert.ErrorIs(t, err, core.ErrPlan)
	assert.ErrorContains(t, err, "no such user")
	_, err = lim.Take(ctx, "bad", 1)
	assert.ErrorIs(t, err, core.ErrPlan)
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
	_, err = lim.Take(ctx, "", 1)
	assert.ErrorIs(t, err, core.ErrMissingKey)
	assert.ErrorIs(t, lim.Grant(ctx, "nobody", 1, ""), core.ErrPlan)

	good := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(5)}))
	_, err = core.TakeAll(ctx, []core.Check{{Limiter: good, Key: "k"}, {Limiter: lim, Key: "bad"}}, 1)
	assert.ErrorIs(t, err, core.ErrPlan)
	d, err := good.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining, "a plan error in TakeAll counts nothing anywhere")

	_, err = core.NewPlanLimiter(nil)
	assert.Error(t, err)
	_, err = core.NewPlanLimiter(p.plan, core.WithStore(nil))
	assert.Error(t, err)
}

// Past MaxPlans distinct limits the limiter rebinds, and the counts stay.
func TestPlanLimiterManyLimits(t *testing.T) {
	ctx := context.Background()
	var count atomic.Int64
	count.Store(1)
	lim, err := core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) {
		return core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerHour(int(count.Load()))}, nil
	})
	require.NoError(t, err)
	for n := 1; n <= core.MaxPlans+50; n++ {
		count.Store(int64(n))
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "count %d", n)
		require.Equal(t, 0, d.Remaining, "count %d: the %d requests before are kept", n, n-1)
	}
}

// Plans, grants and the limiter's options under -race.
func TestPlanLimiterConcurrent(t *testing.T) {
	ctx := context.Background()
	free := core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(10)}
	paid := core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(40)}
	p := &plans{of: map[string]core.Limit{}}
	for i := 0; i < 8; i++ {
		p.of[fmt.Sprint("free-", i)] = free
		p.of[fmt.Sprint("paid-", i)] = paid
	}
	var observed atomic.Int64
	lim, err := core.NewPlanLimiter(p.plan, core.WithStore(&core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch).Now}),
		core.WithObserver(func(core.Event) { observed.Add(1) }))
	require.NoError(t, err)
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				plan := i % 2
				key := fmt.Sprint([]string{"free-", "paid-"}[plan], g%8)
				d, err := lim.Take(ctx, key, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[plan].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(8*10), admitted[0].Load())
	assert.Equal(t, int64(8*40), admitted[1].Load())
	assert.Equal(t, int64(1600), observed.Load(), "every plan's limiter has the observer")
}

// Free and paid users: the plan comes from the user, looked up per
// request; the decision, and so the response's headers, describe it.
func ExampleNewPlanLimiter() {
	ctx := context.Background()
	free := core.Limit{Name: "api", Rate: core.PerMinute(100)}
	paid := core.Limit{Name: "api", Rate: core.PerMinute(1000)}
	paying := map[string]bool{"alice": true}

	lim, err := core.NewPlanLimiter(func(ctx context.Context, user string) (core.Limit, error) {
		if paying[user] {
			return paid, nil
		}
		return free, nil
	})
	if err != nil {
		panic(err)
	}
	for _, user := range []string{"alice", "bob"} {
		d, _ := lim.Take(ctx, user, 1)
		fmt.Println(user, d.Quota, d.Remaining)
	}
	// Output:
	// alice 1000 999
	// bob 100 99
}
