package concurrency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// At most 2 reports of one client are computed at once; the third, while
// two run, is refused until one of them ends.
func Example() {
	lim, err := concurrency.NewLimiter(2, concurrency.WithName("reports"))
	if err != nil {
		panic(err) // a bad max, TTL or name
	}
	ctx := context.Background()
	_, first, _ := lim.Acquire(ctx, "client-1")
	_, second, _ := lim.Acquire(ctx, "client-1")
	res, _, _ := lim.Acquire(ctx, "client-1")
	fmt.Println("third admitted:", res.Admitted, "in flight:", res.InFlight, "retry after:", res.RetryAfter)

	first.Release() // in middleware: defer lease.Release()
	res, third, _ := lim.Acquire(ctx, "client-1")
	fmt.Println("after a release:", res.Admitted, "in flight in this instance:", lim.InFlight())
	second.Release()
	third.Release()
	// Output:
	// third admitted: false in flight: 2 retry after: 1s
	// after a release: true in flight in this instance: 2
}

// The middleware answers a client with a request in flight already with
// 429 and Retry-After.
func Example_middleware() {
	lim, err := concurrency.NewLimiter(1, concurrency.WithName("uploads"))
	if err != nil {
		panic(err)
	}
	inside := make(chan struct{})
	done := make(chan struct{})
	upload := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inside)
		<-done // a slow upload
	})
	h := stdhttp.Concurrency(lim, keyfuncs.PeerIP)(upload)

	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/upload", nil))
	<-inside
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/upload", nil)) // same client
	fmt.Println(w.Code, w.Header().Get("Retry-After"))
	close(done)
	// Output:
	// 429 1
}
