package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// manualClock is a client.Clock that does not sleep: a wait moves the
// time forward, and with it the server's limiter, which reads the same
// clock. Real programs use the default system clock.
type manualClock struct{ *storetest.Clock }

func (c manualClock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// newServer starts a server that allows 2 requests per minute per client
// IP address, on a limiter that reads clock.
func newServer(clock *storetest.Clock, algo core.Algorithm) *httptest.Server {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: algo, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now})))
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	return httptest.NewServer(stdhttp.New(lim, keyfuncs.PeerIP)(hello))
}

func ExampleNew() {
	clock := storetest.NewClock(storetest.Epoch)
	srv := newServer(clock, core.TokenBucket) // one request every 30s, bursts of 2
	defer srv.Close()

	rt, err := client.New(http.DefaultTransport,
		client.WithClock(manualClock{clock}),
		client.WithObserver(func(w client.Wait) {
			fmt.Printf("waiting %s (%s, retry %d)\n", w.Duration, w.Source, w.Attempt)
		}))
	if err != nil {
		log.Fatal(err)
	}
	hc := &http.Client{Transport: rt}
	for range 3 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// 200 OK
	// 200 OK
	// waiting 30s (retry-after, retry 1)
	// 200 OK
}

// With pacing, the client learns from X-Ratelimit-Remaining: 0 that its
// quota is spent and waits for X-Ratelimit-Reset before the next request,
// so the server never has to reject it.
func ExampleWithPacing() {
	clock := storetest.NewClock(storetest.Epoch)
	srv := newServer(clock, core.FixedWindow) // 2 requests per clock minute
	defer srv.Close()

	rt, err := client.New(nil,
		client.WithPacing(true),
		client.WithClock(manualClock{clock}),
		client.WithObserver(func(w client.Wait) { fmt.Printf("waiting %s (%s)\n", w.Duration, w.Source) }))
	if err != nil {
		log.Fatal(err)
	}
	hc := &http.Client{Transport: rt}
	for range 3 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status, "remaining", resp.Header.Get("X-Ratelimit-Remaining"))
	}
	// Output:
	// 200 OK remaining 1
	// 200 OK remaining 0
	// waiting 1m0s (pacing)
	// 200 OK remaining 1
}
