package readme

// snippet: queue
import (
	"context"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/stdhttp"
	"github.com/redis/go-redis/v9"
)

// end snippet

// queuedOrders builds the queue-for-later example: orders over the limit
// are queued in Redis and placed by a worker; serve gets the handler.
func queuedOrders(ctx context.Context, placeOrder http.Handler, serve func(http.Handler) error) error {
	// snippet: queue
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	q, err := redisstore.NewQueue(rdb, "orders", redisstore.QueueOptions{
		MaxLen:     100_000,          // full: 429 as without a queue
		PerKey:     100,              // one client's share; past it: 429 as without a queue
		Visibility: 30 * time.Second, // a worker that died: its order is served again after this
	})
	if err != nil {
		return err
	}
	offer, err := queue.NewOffer(q, queue.Options{
		Headers: []string{"Content-Type", "Idempotency-Key"}, // all other fields are dropped
		MaxBody: 64 << 10,                                    // larger: 413, never read past the bound
	})
	if err != nil {
		return err
	}
	perClient := core.Must(core.NewLimiter(core.Limit{Name: "orders", Rate: core.PerMinute(10)}))
	// Authentication first (requireLogin is yours): only an authenticated
	// request reaches the limiter, and so the queue.
	handler := requireLogin(stdhttp.New(perClient, keyfuncs.PeerIP, stdhttp.WithQueue(offer))(placeOrder))

	// The worker places the queued orders, 50 a second for all clients. An
	// order it gives up (5 failed deliveries, or a 4xx of placeOrder's) is
	// logged with its ID and the reason; keepForReview (yours) keeps it.
	pace := core.Must(core.NewLimiter(core.Limit{Name: "orders-worker", Algorithm: core.TokenBucket, Rate: core.PerSecond(50)}))
	worker, err := queue.NewWorker(q, pace, "all", placeOrder, queue.WithMaxAttempts(5),
		queue.WithDeadLetter(func(ctx context.Context, it *queue.Item, why queue.Reason) { keepForReview(ctx, it, why) }))
	if err != nil {
		return err
	}
	go worker.Run(ctx) // until ctx ends
	// end snippet
	return serve(handler)
}

// idempotentOrder is the handler side of the example: a replayed order
// carries its item, whose ID is the same on every delivery.
func idempotentOrder(done func(id string) bool) http.HandlerFunc {
	// snippet: queue-handler
	return func(w http.ResponseWriter, r *http.Request) {
		it, replayed := queue.ItemFrom(r.Context())
		if replayed && done(it.ID) {
			return // placed already: its worker died before acknowledging it
		}
		// ... place the order; when replayed, remember it.ID with it ...
	}
	// end snippet
}

// requireLogin stands for the application's authentication, in front of
// the queueing limiter.
func requireLogin(h http.Handler) http.Handler { return h }

// keepForReview stands for the application's store of the orders the
// worker gave up.
func keepForReview(context.Context, *queue.Item, queue.Reason) {}
