package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func ExampleNewLimiter() {
	// 100 requests per minute, in bursts of up to 20.
	lim, err := core.NewLimiter(core.Limit{
		Name:      "api",
		Algorithm: core.TokenBucket,
		Rate:      core.PerMinute(100),
		Burst:     20,
	})
	if err != nil {
		panic(err)
	}
	d, err := lim.Take(context.Background(), "client-42")
	fmt.Println(d.Allowed, d.Limit, d.Remaining, err)
	// Output: true 20 19 <nil>
}

func ExampleLimiter_TakeN() {
	// A fixed clock makes the example exact; servers use the system clock.
	clock := storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 30, 0, time.UTC))
	store, _ := core.NewMemoryStore(core.WithClock(clock))
	lim, _ := core.NewLimiter(
		core.Limit{Name: "uploads", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(store),
	)
	ctx := context.Background()
	for _, cost := range []int{4, 4, 4} {
		d, _ := lim.TakeN(ctx, "client-42", cost)
		fmt.Printf("cost %d: allowed %v, remaining %d, retry after %s\n", cost, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// cost 4: allowed true, remaining 6, retry after 0s
	// cost 4: allowed true, remaining 2, retry after 0s
	// cost 4: allowed false, remaining 2, retry after 30s
}

func ExampleWithLimit() {
	// Ten per second and a thousand per hour on the same key: a request
	// passes only if both admit it.
	lim, _ := core.NewLimiter(
		core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)},
		core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(1000)}),
	)
	d, _ := lim.Take(context.Background(), "client-42")
	fmt.Println(d.Allowed, d.Name, d.Remaining)
	// Output: true burst 9
}

func ExampleParseAlgorithm() {
	a, err := core.ParseAlgorithm("leaky-bucket")
	fmt.Println(a, err)
	_, err = core.ParseAlgorithm("gcra")
	fmt.Println(err)
	// Output:
	// leaky-bucket <nil>
	// ratekit: unknown algorithm "gcra" (valid: token-bucket, leaky-bucket, fixed-window, sliding-window-log, sliding-window-counter)
}
