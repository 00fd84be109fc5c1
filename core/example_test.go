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
	d, err := lim.Take(context.Background(), "client-42", 1)
	fmt.Println(d.Allowed, d.Quota, d.Remaining, err)
	// Output: true 20 19 <nil>
}

func ExampleLimiter_Take() {
	// A fixed clock makes the example exact; servers use the system clock.
	clock := storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 30, 0, time.UTC))
	lim, _ := core.NewLimiter(
		core.Limit{Name: "uploads", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}),
	)
	ctx := context.Background()
	for _, cost := range []int{4, 4, 4} {
		d, _ := lim.Take(ctx, "client-42", cost)
		fmt.Printf("cost %d: allowed %v, remaining %d, retry after %s\n", cost, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// cost 4: allowed true, remaining 6, retry after 0s
	// cost 4: allowed true, remaining 2, retry after 0s
	// cost 4: allowed false, remaining 2, retry after 30s
}

func ExampleWithLimit() {
	// Three per second and five per minute on the same key: a request
	// passes only if both admit it, and a rejected one is counted by
	// neither.
	lim, _ := core.NewLimiter(
		core.Limit{Name: "second", Algorithm: core.FixedWindow, Rate: core.PerSecond(3)},
		core.WithLimit(core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}),
	)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, _ := lim.Take(ctx, "client-42", 1)
		fmt.Println(d.Allowed, d.Name, d.Remaining)
	}
	// Output:
	// true second 2
	// true second 1
	// true second 0
	// false second 0
}

func ExampleTakeAll() {
	// Two limiters with keys of their own, such as two rules of a rules
	// file: per client IP and per API key. All or nothing.
	perIP := core.Must(core.NewLimiter(core.Limit{Name: "ip", Rate: core.PerMinute(100)}))
	perKey := core.Must(core.NewLimiter(core.Limit{Name: "key", Rate: core.PerMinute(1)}))
	checks := []core.Check{{Limiter: perIP, Key: "192.0.2.7"}, {Limiter: perKey, Key: "key-123"}}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		d, _ := core.TakeAll(ctx, checks, 1)
		fmt.Println(d.Allowed, d.Name)
	}
	d, _ := perIP.Take(ctx, "192.0.2.7", 0)
	fmt.Println("per-IP remaining:", d.Remaining)
	// Output:
	// true key
	// false key
	// per-IP remaining: 99
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
