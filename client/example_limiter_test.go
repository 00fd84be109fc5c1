package client_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// Two instances of a service share one budget for an API that allows 2
// requests per minute: each instance's Transport takes from one limiter
// before every request, and waits its turn instead of collecting a 429.
// Here the limiter is in memory and the clock manual; a fleet of processes
// shares a limiter in Redis (package redisstore).
func ExampleWithLimiter() {
	clock := storetest.NewClock(storetest.Epoch)
	srv := newServer(clock, core.TokenBucket) // one request every 30s, bursts of 2
	defer srv.Close()

	lim, err := core.NewLimiter(core.Limit{Name: "api-calls", Algorithm: core.TokenBucket, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now})) // in production: core.WithStore(redisStore)
	if err != nil {
		log.Fatal(err)
	}
	var instances []*http.Client
	for i := range 2 {
		rt, err := client.New(nil,
			client.WithLimiter(lim, nil), // keyed by the request's host
			client.WithClock(manualClock{clock}),
			client.WithObserver(func(w client.Wait) {
				fmt.Printf("instance %d waits %s (%s)\n", i+1, w.Duration, w.Source)
			}))
		if err != nil {
			log.Fatal(err)
		}
		instances = append(instances, &http.Client{Transport: rt})
	}
	for range 2 {
		for i, hc := range instances {
			resp, err := hc.Get(srv.URL)
			if err != nil {
				log.Fatal(err)
			}
			resp.Body.Close()
			fmt.Printf("instance %d: %s\n", i+1, resp.Status)
		}
	}
	// Output:
	// instance 1: 200 OK
	// instance 2: 200 OK
	// instance 1 waits 30s (limiter)
	// instance 1: 200 OK
	// instance 2 waits 30s (limiter)
	// instance 2: 200 OK
}
