package demo

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/redisstore"
)

// POST /orders queues instead of rejecting (package queue): a client over
// the orders limit gets 202 Accepted and the ID of its queued order, and a
// worker places the queued orders at the pace of the same limit, logging
// each to standard error. The queue is in memory, or with -store redis or
// hybrid a Redis stream on the -redis server (key PREFIX:q:{orders}), so
// that every demo server on that Redis shares it and a queued order
// outlives the server that queued it.

// ordersLimit is the limit of POST /orders per client IP, and paceLimit
// the pace of the workers that place the queued orders, for all clients
// together (for all demo servers, with -store redis or hybrid). Fixed
// windows, which every store takes.
var (
	ordersLimit = core.Limit{Name: "orders", Algorithm: core.FixedWindow, Rate: core.PerSecond(2)}
	paceLimit   = core.Limit{Name: "orders-worker", Algorithm: core.FixedWindow, Rate: core.PerSecond(2)}
)

// Bounds of the orders queue.
const (
	ordersCapacity = 1000
	ordersMaxBody  = 16 << 10
)

// Orders is the POST /orders route: its limiter, the offer that queues
// what the limiter rejects, and the handler that places an order, which
// the worker replays the queued ones into.
type Orders struct {
	Limiter *core.Limiter
	Offer   *queue.Offer
	Place   http.Handler
	worker  *queue.Worker
}

// placed is the answer to an order placed at once.
const placed = "order placed\n"

// orders builds the route. clock, if not nil, is the clock of the
// limiters and of the memory queue (for tests); shared is the store of
// -store redis or hybrid, and rdb the client of -redis, both nil in
// memory.
func (c *config) orders(clock func() time.Time, shared core.Store, rdb redis.UniversalClient, log *slog.Logger) (*Orders, error) {
	limiter := func(l core.Limit) (*core.Limiter, error) { return c.newLimiter(l, clock, shared, log) }
	front, err := limiter(ordersLimit)
	if err != nil {
		return nil, err
	}
	var q queue.Queue
	if rdb != nil {
		q, err = redisstore.NewQueue(rdb, "orders", redisstore.QueueOptions{MaxLen: ordersCapacity, Prefix: c.redisPrefix})
	} else {
		q, err = queue.NewMemory(queue.MemoryOptions{Capacity: ordersCapacity, Now: clock})
	}
	if err != nil {
		return nil, err
	}
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type", "Idempotency-Key"},
		MaxBody: ordersMaxBody, Logger: log})
	if err != nil {
		return nil, err
	}
	place := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, ordersMaxBody))
		if it, ok := queue.ItemFrom(r.Context()); ok {
			log.Info("demo: queued order placed", "id", it.ID, "attempt", it.Attempt,
				"waited", time.Since(it.Enqueued).Round(time.Millisecond), "bytes", len(body))
			return
		}
		w.Header().Set("Content-Type", TextPlain)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(placed))
	})
	pace, err := limiter(paceLimit)
	if err != nil {
		return nil, err
	}
	worker, err := queue.NewWorker(q, pace, "worker", place, queue.WithLogger(log))
	if err != nil {
		return nil, err
	}
	return &Orders{Limiter: front, Offer: offer, Place: place, worker: worker}, nil
}

// newLimiter returns a limiter of l in the store s or, when s is nil, in
// a memory store of its own on clock, with the fail mode of -fail and the
// logger log.
func (c *config) newLimiter(l core.Limit, clock func() time.Time, s core.Store, log *slog.Logger) (*core.Limiter, error) {
	if s == nil {
		s = &core.MemoryStore{Clock: clock}
	}
	opts := []core.Option{core.WithStore(s), core.WithLogger(log)}
	if c.failClosed {
		opts = append(opts, core.WithFailClosed())
	}
	return core.NewLimiter(l, opts...)
}

// run runs the worker until ctx ends; done is closed when it has stopped.
func (o *Orders) run(ctx context.Context) (done <-chan struct{}) {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = o.worker.Run(ctx)
	}()
	return stopped
}
