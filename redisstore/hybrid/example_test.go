package hybrid_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore/hybrid"
	"github.com/ratekit/ratekit/stdhttp"
)

// Every server of an API that runs this decides its requests in process,
// on leases of the limit that it takes from Redis, and syncs with Redis
// every second: most requests never wait for a round trip, and the
// servers together admit no more than 6,000 requests a minute per client
// IP.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // lets the store's timeout cut a hung sync short
	})
	store, err := hybrid.New(rdb, time.Second, hybrid.WithPrefix("myapi"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // sends this server's last counts, gives back its leases
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(6000)},
		core.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", stdhttp.New(lim, keyfuncs.PeerIP)(http.NewServeMux())))
}

// While Redis is away, a server goes on deciding in process, within its
// share of what no server had leased: alone, the whole limit.
func ExampleNew_redisAway() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens here
	defer rdb.Close()
	store, err := hybrid.New(rdb, time.Second, hybrid.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerHour(3)},
		core.WithStore(store)))
	for range 4 {
		d, err := lim.Take(context.Background(), "203.0.113.9", 1)
		fmt.Println(d.Allowed, d.Remaining, err)
	}
	// Output:
	// true 2 <nil>
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}

// A fleet in two regions shares one limit. This server is in "eu": it
// syncs with the Redis of eu every 500 ms and sends its region's counts to
// the Redis of "us", whose servers send theirs to eu's.
func ExampleWithRegion() {
	local := redis.NewClient(&redis.Options{Addr: "redis.eu.internal:6379", ContextTimeoutEnabled: true})
	us := redis.NewClient(&redis.Options{Addr: "redis.us.internal:6379", ContextTimeoutEnabled: true})
	store, err := hybrid.New(local, 500*time.Millisecond,
		hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": us}))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(6000)},
		core.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", stdhttp.New(lim, keyfuncs.PeerIP)(http.NewServeMux())))
}
