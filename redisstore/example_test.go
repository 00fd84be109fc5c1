package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/stdhttp"
)

// Every server of an API that runs this shares two limits per client IP:
// 100 requests per minute and 2,000 per hour. Both are decided at once,
// all or nothing, in one script: one round trip to Redis per request.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // lets the store's timeout cut a hung call short
	})
	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapi"), redisstore.WithTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(100)},
		core.WithLimit(core.Limit{Name: "api-hourly", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(2000)}),
		core.WithStore(store),
	)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	log.Fatal(http.ListenAndServe(":8080", stdhttp.New(lim, keyfuncs.PeerIP)(mux)))
}

// A Redis Cluster works the same way: every key one decision touches is in
// one hash slot.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"},
		ContextTimeoutEnabled: true,
	})
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	_ = core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		core.WithStore(store)))
}

// A limit of 0 requests blocks every request and keeps nothing in Redis: a
// limiter of block limits only never sends Redis a command, so it answers
// even with Redis out of reach.
func ExampleStore_Bind_block() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens here
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	blocked := core.Must(core.NewLimiter(
		core.Limit{Name: "blocked", Rate: core.Rate{Count: 0, Period: time.Hour}},
		core.WithStore(store)))
	d, err := blocked.Take(context.Background(), "203.0.113.9", 1)
	fmt.Println(d.Allowed, d.Name, d.Quota, d.RetryAfter, err)
	// Output: false blocked 0 1h0m0s <nil>
}

// Four servers share a limit; while Redis is away, each decides in
// process with a quarter of it, so the fleet as a whole admits about the
// limit until Redis answers again.
func ExampleWithFallback() {
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	store, err := redisstore.New(rdb, redisstore.WithFallback(4))
	if err != nil {
		log.Fatal(err)
	}
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}, core.WithStore(store)))
	log.Fatal(http.ListenAndServe(":8080", stdhttp.New(lim, keyfuncs.PeerIP)(http.NewServeMux())))
}
