package demo

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"log/slog"
	"net/http"
	"strings"
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
// hybrid in Redis on the -redis server (keys PREFIX:q:{orders}:...), so
// that every demo server on that Redis shares it and a queued order
// outlives the server that queued it.
//
// Authentication comes first, in front of the queueing limiter: a request
// without a customer's token (Authorization: Bearer TOKEN, one of
// Customers) is answered 401 and never queued. The worker replays a queued
// order without its Authorization field (credentials are not kept in the
// queue): the authentication puts the customer's name in the field
// Orders-Customer, which the queue keeps, and Place reads. Each client
// holds at most ordersPerClient orders in the queue; past it, it is told
// 429, as without a queue. An order the worker cannot place within
// ordersAttempts deliveries, or that Place refuses, is logged as a dead
// letter with its ID and the reason.

// ordersLimit is the limit of POST /orders per client IP, and paceLimit
// the pace of the workers that place the queued orders, for all clients
// together (for all demo servers, with -store redis or hybrid). Fixed
// windows, which every store takes.
var (
	ordersLimit = core.Limit{Name: "orders", Algorithm: core.FixedWindow, Rate: core.PerSecond(2)}
	paceLimit   = core.Limit{Name: "orders-worker", Algorithm: core.FixedWindow, Rate: core.PerSecond(2)}
)

// Bounds of the orders queue: ordersPerClient orders of one client IP (10
// seconds of the worker's pace), ordersAttempts deliveries of an order.
const (
	ordersCapacity  = 1000
	ordersPerClient = 20
	ordersAttempts  = 5
	ordersMaxBody   = 16 << 10
)

// Customers are the demo's customers by token: POST /orders needs
// "Authorization: Bearer TOKEN" with one of these tokens.
var Customers = map[string]string{"alice-t0ken": "alice", "bob-t0ken": "bob"}

// CustomerHeader is the field that the authentication of POST /orders
// sets to the customer's name, replacing any the client sent, and that
// the queue keeps for the replay.
const CustomerHeader = "Orders-Customer"

// The answer to a request of POST /orders without a customer's token.
const (
	Unauthorized   = "unauthorized: POST /orders needs Authorization: Bearer TOKEN\n"
	OrdersRealm    = `Bearer realm="demo orders"`
	HeaderAuthWall = "WWW-Authenticate"
)

// Customer returns the customer whose token the Authorization field
// value authorization carries, comparing the tokens' SHA-256 in constant
// time.
func Customer(authorization string) (name string, ok bool) {
	scheme, token, _ := strings.Cut(authorization, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	got := sha256.Sum256([]byte(token))
	for t, n := range Customers {
		want := sha256.Sum256([]byte(t))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			name, ok = n, true
		}
	}
	return name, ok
}

// Authenticate authenticates r, a request of POST /orders: it sets
// CustomerHeader to the customer's name and reports true, or reports
// false, and then the request must be answered with Refuse.
func Authenticate(r *http.Request) bool {
	name, ok := Customer(r.Header.Get("Authorization"))
	if ok {
		r.Header.Set(CustomerHeader, name)
	}
	return ok
}

// Refuse answers 401 to a request that Authenticate refused.
func Refuse(w http.ResponseWriter) {
	w.Header().Set(HeaderAuthWall, OrdersRealm)
	w.Header().Set("Content-Type", TextPlain)
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(Unauthorized))
}

// Authenticated is net/http middleware that lets only the requests that
// Authenticate accepts reach next.
func Authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Authenticate(r) {
			Refuse(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

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
		q, err = redisstore.NewQueue(rdb, "orders", redisstore.QueueOptions{MaxLen: ordersCapacity, PerKey: ordersPerClient, Prefix: c.redisPrefix})
	} else {
		q, err = queue.NewMemory(queue.MemoryOptions{Capacity: ordersCapacity, PerKey: ordersPerClient, Now: clock})
	}
	if err != nil {
		return nil, err
	}
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type", "Idempotency-Key", CustomerHeader},
		MaxBody: ordersMaxBody, Logger: log})
	if err != nil {
		return nil, err
	}
	place := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		customer := r.Header.Get(CustomerHeader) // set by the authentication in front
		if customer == "" {
			// Not authenticated: a route mounted without Authenticated.
			Refuse(w)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, ordersMaxBody))
		if it, ok := queue.ItemFrom(r.Context()); ok {
			log.Info("demo: queued order placed", "id", it.ID, "attempt", it.Attempt,
				"waited", time.Since(it.Enqueued).Round(time.Millisecond), "bytes", len(body), "customer", customer)
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
	// The worker logs each order it gives up (queue's own line, with the
	// ID and the reason); a real shop would keep it in a table for a
	// person to look at: here the dead-letter handler logs it once more
	// as the demo's.
	dead := func(_ context.Context, it *queue.Item, why queue.Reason) {
		log.Warn("demo: order not placed; kept as a dead letter", "id", it.ID, "reason", why.String(),
			"customer", it.Header.Get(CustomerHeader))
	}
	worker, err := queue.NewWorker(q, pace, "worker", place, queue.WithLogger(log),
		queue.WithMaxAttempts(ordersAttempts), queue.WithDeadLetter(dead))
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
