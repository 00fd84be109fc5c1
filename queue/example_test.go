package queue_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/stdhttp"
)

// Orders over the limit are queued with an ID, and a worker serves them
// later at its own pace.
func Example() {
	q, _ := queue.NewMemory(queue.MemoryOptions{Capacity: 1000})
	offer, _ := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type"}, MaxBody: 64 << 10})

	placeOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if it, ok := queue.ItemFrom(r.Context()); ok {
			fmt.Printf("order %s placed from the queue, attempt %d\n", body, it.Attempt)
			return
		}
		fmt.Printf("order %s placed at once\n", body)
	})
	front := core.Must(core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}))
	h := stdhttp.New(front, keyfuncs.PeerIP, stdhttp.WithQueue(offer))(placeOrder)

	for _, order := range []string{"#1", "#2"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(order)))
		fmt.Println(w.Code, len(w.Header().Get(queue.HeaderID)) == 32)
	}

	// The worker drains the queue at 10 orders a second.
	pace := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(10)}))
	worker, _ := queue.NewWorker(q, pace, "orders", placeOrder)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- worker.Run(ctx) }()
	for q.Len() > 0 { // for this example only: wait until the order is served
		time.Sleep(time.Millisecond)
	}
	stop()
	<-done
	// Output:
	// order #1 placed at once
	// 200 false
	// 202 true
	// order #2 placed from the queue, attempt 1
}
