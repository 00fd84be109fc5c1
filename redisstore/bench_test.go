package redisstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// BenchmarkTake measures one decision against a private redis-server on
// loopback, for every algorithm: serially (one round trip at a time, the
// latency a request sees) and in parallel over 1000 keys (throughput).
//
//	go test ./redisstore -run '^$' -bench . -benchmem
//
// The client applies context deadlines itself (ContextTimeoutEnabled), as
// the package documentation recommends; BenchmarkBaseline measures the
// bare go-redis round trips on the same server for comparison.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	s := newStore(b, rdb, nil)
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	for _, alg := range core.Algorithms() {
		// A limit no benchmark exhausts, so every decision writes.
		c := bind(b, s, core.Limit{Name: "bench", Algorithm: alg, Rate: core.PerSecond(10_000)})
		if _, err := c.Take(ctx, "warm-up", 1); err != nil {
			b.Fatal(err)
		}
		b.Run(alg.String()+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := c.Take(ctx, keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg.String()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := c.Take(ctx, keys[i%len(keys)], 1); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
		})
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
	noop := redis.NewScript("return {1, 2, 3, 4, 5}")
	b.Run("evalsha", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := noop.Run(ctx, rdb, []string{"k"}, "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
