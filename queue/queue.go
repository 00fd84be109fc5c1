// Package queue keeps rejected requests to serve them later, instead of
// answering 429: "queue for later", for work such as orders that must not
// be lost when a client hits its limit during an overload.
//
// The model has three parts:
//
//   - An Offer answers a request that a ratekit middleware rejected. It
//     copies the request's method, path and query, the header fields of
//     an allowlist, and the body up to a bound into an Item, pushes it to
//     a Queue, and answers 202 Accepted with the item's ID, in the
//     Queue-Id header field and a small JSON body. Every adapter wires it
//     in with its WithQueue option (stdhttp.WithQueue, ratekitgin.WithQueue,
//     ...), built on the adapter's denied handler.
//   - A Queue holds the items: NewMemory for tests and single servers,
//     redisstore.NewQueue (hashes and lists in Redis) for a fleet. Both
//     are bounded.
//   - A Worker drains a Queue at the pace of a core.Limiter and replays
//     each item into an http.Handler, as a request marked with the
//     Queue-Id header field; the handler reads the item with ItemFrom.
//
// Each item carries the client key the limiter decided its request by
// (Item.Key; the adapters set it through Offer.ForKey). The queues bound
// each key's share (MemoryOptions.PerKey, default 1% of the capacity): a
// client past its share gets the rejection it would have got without a
// queue, and the others keep their room. They serve the keys in turn, not
// in the order pushed: one client's backlog, retries included, delays
// another client's next item by at most one item of each client waiting.
//
// Delivery is at least once; within a key, in about the order pushed (an
// item delivered again comes before the key's newer ones; several workers
// serve in parallel). The worker acknowledges an item after the handler
// answered below 400. An item answered 5xx, 429 or 408, or whose handler
// panicked, or whose worker died or stopped first, is delivered again, to
// any worker, once its visibility timeout has passed, up to the worker's
// WithMaxAttempts (default 5). A handler must therefore be idempotent:
// ItemFrom gives it the item's ID, the same on every delivery, to
// remember what it has done.
//
// No item is dropped silently. An item whose attempts ran out, and one
// the handler refused with another 4xx (a replay that lacks what the
// application needs, such as credentials), is given up: logged with its
// ID and the reason, counted (Worker.Stats), handed to the dead-letter
// handler (WithDeadLetter), and only then acknowledged. A client's
// request is either queued (202, with the item's ID) or answered as
// without a queue.
//
// Put authentication in front of a queueing limiter: the worker replays a
// request with the header fields of the Offer's allowlist only, never
// the credentials, so the application must have checked them before the
// request was queued; and an unauthenticated request must be refused
// before it can take a place in the queue.
//
// What the client is told, besides 202:
//
//   - the client's share of the queue is full (ErrKeyFull), or the queue
//     is: the rejection as it was (429, Retry-After and the rate-limit
//     fields, problem-details body);
//   - the queue fails (Redis down): the same rejection, logged once per
//     failure episode. A push that timed out (Options.Timeout) may still
//     land in the queue afterwards, and the client, told 429, may send
//     the request again: keep a client's idempotency key among the
//     Options.Headers so that the handler can serve such a pair once.
//     The limiter's fail mode does not apply: it is about the limiter's
//     store, which answered, and the limit rejected the request, so
//     passing it on would exceed the limit. The client keeps its 429 (503
//     when the store failed too under core.WithFailClosed), and nothing
//     is lost silently;
//   - the body is larger than Options.MaxBody: 413 Content Too Large (or
//     429, see Options.TooLarge), without reading more than MaxBody+1
//     bytes of it.
//
// Memory stays bounded: a queue holds at most its capacity of items, each
// of at most MaxBody bytes of body and 16 KiB of target and fields.
package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// ErrFull is returned by Push when the queue holds as many items as it
// may: the request is rejected as it would be without a queue.
var ErrFull = errors.New("queue: full")

// ErrKeyFull is returned by Push when the queue holds as many items of
// the item's Key as one key may (its per-key share): the client's request
// is rejected as it would be without a queue, and the other clients keep
// their room.
var ErrKeyFull = errors.New("queue: the client's share of the queue is full")

// HeaderID is the header field that carries an item's ID: on the 202
// answer to the client, and on the request that a Worker replays.
const HeaderID = "Queue-Id"

// An Item is a request kept for later.
type Item struct {
	// ID names the item for the client and the handler: 32 hex digits
	// made by the Offer, the same on every delivery.
	ID string

	// Key is the client key the item was queued under: the key the
	// rate limiter decided the request by (Offer.ForKey). The queue
	// bounds each key's share by it, and serves the keys in turn. Empty
	// when the offer had no key: then every such item is one client's.
	Key string

	// Method is the request's method, such as "POST".
	Method string

	// Target is the request's path and query, as in the request line
	// ("/orders?priority=low").
	Target string

	// Header holds the request's header fields of the Offer's allowlist
	// only.
	Header http.Header

	// Body is the request's body, at most the Offer's MaxBody bytes.
	Body []byte

	// Enqueued is when the item was pushed.
	Enqueued time.Time

	// Attempt counts the deliveries of the item, this one included: 1 the
	// first time, more when it was not acknowledged (the handler failed,
	// or its worker died first).
	Attempt int

	// Receipt is the queue's handle of this delivery, set by Receive and
	// read by Ack.
	Receipt string
}

// A Queue holds items between the Offer that pushes them and the Worker
// that serves them. Implementations are safe for concurrent use. Those of
// ratekit (NewMemory, redisstore.NewQueue) bound each key's share and
// serve the keys in turn; package queuetest checks a Queue for both.
type Queue interface {
	// Push adds it, whose ID is set, to the queue; it returns ErrKeyFull
	// when the queue holds its key's share of items, ErrFull when the
	// queue is full, or an error when the queue failed, and then the item
	// is not kept. It keeps no reference to it or its memory.
	Push(ctx context.Context, it *Item) error

	// Receive waits for an item and leases it to the caller until Ack, or
	// until the queue's visibility timeout passes, when it may be
	// delivered again. It takes the keys in turn: the next item of the
	// key whose turn it is. It returns ctx.Err() when ctx ends first.
	Receive(ctx context.Context) (*Item, error)

	// Ack removes a delivered item for good. Acknowledging an item
	// already acknowledged is not an error.
	Ack(ctx context.Context, it *Item) error
}

// newID returns a fresh random item ID: 32 hex digits.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

type itemKey struct{}

// ItemFrom returns the item that a Worker replays in the request whose
// context is ctx. Trust it, not the Queue-Id header field, which a live
// client could send too.
func ItemFrom(ctx context.Context) (*Item, bool) {
	it, ok := ctx.Value(itemKey{}).(*Item)
	return it, ok
}
