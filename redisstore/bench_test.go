package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// BenchmarkTake measures decisions against a private redis-server on
// loopback, for every algorithm and for a limiter of three limits, from
// 1, 8 and 64 goroutines, on one hot key and on 10,000 keys:
//
//	go test ./redisstore -run '^$' -bench Take -benchmem
//
// Beside ns/op (wall time per decision: the inverse of throughput) it
// reports decisions/s and round trips per decision (a go-redis hook counts
// commands sent alone and pipelines). The client applies context
// deadlines itself (ContextTimeoutEnabled), as the package documentation
// recommends; BenchmarkBaseline measures bare go-redis round trips on the
// same kind of server for comparison.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	trips := &roundTrips{}
	rdb.AddHook(trips)
	s := newStore(b, rdb, nil)
	ctx := context.Background()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	type benchCase struct {
		name   string
		limits []core.Limit
	}
	var cases []benchCase
	for _, alg := range algorithms {
		// A limit no benchmark exhausts, so every decision writes.
		cases = append(cases, benchCase{alg.String(), []core.Limit{{Name: "bench", Algorithm: alg, Rate: core.PerSecond(10_000)}}})
	}
	// A limiter of three limits: one script decides all three.
	cases = append(cases, benchCase{"three-limits", []core.Limit{
		{Name: "bench-second", Algorithm: core.TokenBucket, Rate: core.PerSecond(10_000)},
		{Name: "bench-minute", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(1_000_000)},
		{Name: "bench-hour", Algorithm: core.FixedWindow, Rate: core.PerHour(10_000_000)},
	}})
	for _, tc := range cases {
		c := bindAll(b, s, tc.limits...)
		if _, err := c.Take(ctx, "warm-up", 1, make([]core.Decision, len(tc.limits))); err != nil {
			b.Fatal(err)
		}
		for _, goroutines := range []int{1, 8, 64} {
			for _, spread := range []int{1, len(keys)} {
				name := fmt.Sprintf("%s/goroutines=%d/keys=%d", tc.name, goroutines, spread)
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					trips.n.Store(0)
					var next atomic.Int64
					work := func() {
						ds := make([]core.Decision, len(tc.limits))
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							if _, err := c.Take(ctx, keys[int(i*7919)%spread], 1, ds); err != nil {
								b.Error(err)
								return
							}
						}
					}
					start := time.Now()
					b.ResetTimer()
					var wg sync.WaitGroup
					for range goroutines {
						wg.Add(1)
						go func() { defer wg.Done(); work() }()
					}
					wg.Wait()
					b.StopTimer()
					b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
					b.ReportMetric(float64(trips.n.Load())/float64(b.N), "trips/decision")
				})
			}
		}
	}
}

// BenchmarkBaseline measures what any decision costs before ratekit's
// part: a go-redis PING, and EVALSHA of a script that returns at once,
// serially, on the same kind of private server.
func BenchmarkBaseline(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	b.Run("ping", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	noop := redis.NewScript("return {1, 2, 3, 4, 5, 6}")
	b.Run("evalsha", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := noop.Run(ctx, rdb, []string{"k"}, "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
