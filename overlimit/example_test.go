package overlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/overlimit"
)

func Example() {
	// A fixed clock makes the example exact; servers use the system clock,
	// and a shared store such as redisstore.New(rdb) instead of memory.
	clock := storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))
	store := &core.MemoryStore{Clock: clock.Now}

	cache, err := overlimit.New(store, overlimit.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(cache),
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 7 {
		d, _ := lim.Take(ctx, "client-42", 1)
		fmt.Printf("%s: allowed %v, retry after %s\n", clock.Now().Format("15:04:05"), d.Allowed, d.RetryAfter)
		clock.Advance(10 * time.Second)
	}
	// The store rejects the third request; the cache answers the next
	// three with the numbers the store would give, until the window ends.

	// Output:
	// 12:00:00: allowed true, retry after 0s
	// 12:00:10: allowed true, retry after 0s
	// 12:00:20: allowed false, retry after 40s
	// 12:00:30: allowed false, retry after 30s
	// 12:00:40: allowed false, retry after 20s
	// 12:00:50: allowed false, retry after 10s
	// 12:01:00: allowed true, retry after 0s
}
