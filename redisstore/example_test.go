package redisstore_test

import (
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/stdhttp"
)

// Every server of an API that runs this shares one limit of 100 requests
// per minute per client IP.
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
		core.WithStore(store),
		core.WithFailMode(core.FailOpen), // the default: a Redis outage never takes the API down
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
