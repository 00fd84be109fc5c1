package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
)

// HeaderAttempt is the header field of a replayed request that carries
// the item's Attempt.
const HeaderAttempt = "Queue-Attempt"

// A WorkerOption configures a Worker.
type WorkerOption func(*Worker) error

// WithLogger sets the logger of the worker's failures: a failing queue
// and a failing acknowledgement once per episode, and every item it gives
// up or the handler refused, each with its ID and the reason (default
// slog.Default()).
func WithLogger(log *slog.Logger) WorkerOption {
	return func(w *Worker) error {
		if log == nil {
			return errors.New("queue: WithLogger(nil)")
		}
		w.log = log
		return nil
	}
}

// DefaultMaxAttempts is how many deliveries of an item a worker makes
// unless WithMaxAttempts says otherwise.
const DefaultMaxAttempts = 5

// MaxMaxAttempts bounds WithMaxAttempts.
const MaxMaxAttempts = 1000

// WithMaxAttempts sets how many times an item is delivered without
// success (a panic, an answer of 5xx, 429 or 408, a worker that stopped or
// died) before the worker gives it up: it logs the item's ID and the
// reason, hands the item to the dead-letter handler (WithDeadLetter), and
// acknowledges it, so that it no longer takes a place in the queue. n
// from 1 to MaxMaxAttempts; default DefaultMaxAttempts. There is no
// "never give up": an item that can never be served would hold its place
// for good; a dead-letter handler that pushes the item to a queue of its
// own keeps it instead.
func WithMaxAttempts(n int) WorkerOption {
	return func(w *Worker) error {
		if n < 1 || n > MaxMaxAttempts {
			return fmt.Errorf("queue: max attempts %d must be from 1 to %d", n, MaxMaxAttempts)
		}
		w.maxAttempts = n
		return nil
	}
}

// A Reason tells why a worker gave an item up, for the dead-letter
// handler and the log.
type Reason struct {
	// Status is the handler's answer to the last delivery: 0 when it
	// panicked, or when the worker stopped or died before it answered.
	Status int

	// Attempts counts the deliveries that ended with that answer, or
	// without one.
	Attempts int

	// Refused reports an answer of 4xx other than 408 and 429: the
	// application refused the request (it lacked credentials, was
	// invalid, ...), and serving it again would not help. When false,
	// the item's attempts ran out (WithMaxAttempts).
	Refused bool
}

// String tells the reason in a few words, as the log does.
func (r Reason) String() string {
	switch {
	case r.Refused:
		return "refused with status " + strconv.Itoa(r.Status)
	case r.Status == 0:
		return "attempts exhausted (" + strconv.Itoa(r.Attempts) + "), the last without an answer"
	}
	return "attempts exhausted (" + strconv.Itoa(r.Attempts) + "), the last answered " + strconv.Itoa(r.Status)
}

// WithDeadLetter sets the handler of the items the worker gives up: an
// item whose attempts ran out (WithMaxAttempts), or whose replay the
// handler refused with a 4xx other than 408 and 429. dead runs before the
// item is acknowledged, in the worker's goroutine, with the worker's
// context: it may keep the item elsewhere (a table, a queue of its own),
// but must not block for long, since the worker serves no other item
// meanwhile. An item whose acknowledgement then fails is delivered again,
// and given up again: dead may see an item more than once (same ID). A
// panic in dead is logged. Without a dead-letter handler, the log line is
// all that is left of such an item.
func WithDeadLetter(dead func(ctx context.Context, it *Item, why Reason)) WorkerOption {
	return func(w *Worker) error {
		if dead == nil {
			return errors.New("queue: WithDeadLetter(nil)")
		}
		w.dead = dead
		return nil
	}
}

// WithSleep replaces the timer the worker waits with (for the limiter's
// Retry-After, and after a queue failure): sleep returns after d, or
// ctx.Err() when ctx ends first. For tests with a manual clock.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) WorkerOption {
	return func(w *Worker) error {
		if sleep == nil {
			return errors.New("queue: WithSleep(nil)")
		}
		w.sleep = sleep
		return nil
	}
}

// A Worker drains a Queue at the pace of a limiter and replays each item
// into a handler. Run serves one item at a time; run several workers (on
// one queue, in one process or many) to serve several at once: the
// limiter, shared, still sets the pace.
type Worker struct {
	q           Queue
	lim         *core.Limiter
	key         string
	h           http.Handler
	log         *slog.Logger
	maxAttempts int
	dead        func(context.Context, *Item, Reason)
	sleep       func(context.Context, time.Duration) error

	served, refused, givenUp, retried atomic.Uint64

	failing, acking, limiting episode.Log
}

// Stats are a worker's counts of the items it served, since it was made.
type Stats struct {
	// Served counts the items acknowledged after an answer below 400.
	Served uint64
	// Refused counts the items the handler refused, with a 4xx other
	// than 408 and 429: each logged, handed to the dead-letter handler
	// and acknowledged.
	Refused uint64
	// GivenUp counts the items whose attempts ran out (WithMaxAttempts):
	// each logged, handed to the dead-letter handler and acknowledged.
	GivenUp uint64
	// Retried counts the deliveries left for another one: a panic, an
	// answer of 5xx, 429 or 408, or a stop while the handler ran.
	Retried uint64
}

// Stats returns the worker's counts so far. Several workers on one queue
// count apart: add theirs up.
func (w *Worker) Stats() Stats {
	return Stats{Served: w.served.Load(), Refused: w.refused.Load(), GivenUp: w.givenUp.Load(), Retried: w.retried.Load()}
}

// retryFailed is how long the worker waits after the queue failed.
const retryFailed = time.Second

// NewWorker returns a worker that takes items from q, each admitted first
// by lim under key (one request of cost 1; the worker waits the decision's
// RetryAfter, and the hold of a shaping bucket), and serves them with h.
//
// h is the application's handler without the rate-limit middleware: the
// worker's limiter sets the pace. The request it gets has the item's
// method, target, header fields and body, the fields Queue-Id and
// Queue-Attempt, the item in its context (ItemFrom), and no RemoteAddr or
// Host. What h writes is dropped; its status decides:
//
//   - below 400, the item is served and acknowledged;
//   - 429 and 408, which ask for the request later, as 500 and above (or
//     a panic) do, leave it for another delivery, up to WithMaxAttempts
//     deliveries (default DefaultMaxAttempts); then it is given up;
//   - any other 4xx is a refusal of the application's, which serving
//     again would not help: the item is given up at once.
//
// An item given up is logged with its ID and the Reason, counted
// (Stats), handed to the dead-letter handler (WithDeadLetter), and
// acknowledged. None is acknowledged silently. A target that is not a
// path (it did not come from a request line) is answered 400 without
// reaching h, and so given up.
func NewWorker(q Queue, lim *core.Limiter, key string, h http.Handler, opts ...WorkerOption) (*Worker, error) {
	if q == nil || lim == nil || h == nil {
		return nil, errors.New("queue: NewWorker needs a queue, a limiter and a handler")
	}
	if key == "" {
		return nil, errors.New("queue: NewWorker needs a limiter key")
	}
	w := &Worker{q: q, lim: lim, key: key, h: h, log: slog.Default(), maxAttempts: DefaultMaxAttempts, sleep: sleep}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// sleep waits d within ctx.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run serves items until ctx ends, then returns nil. The item being
// served when ctx ends is not acknowledged, and so is delivered again
// after the queue's visibility timeout: the handler's request has ctx's
// values and cancellation, to stop early.
//
// For each item, Run first waits until the limiter admits one request,
// then receives the next item (waiting for one to arrive), so an item is
// leased only when it is served at once.
func (w *Worker) Run(ctx context.Context) error {
	for {
		if err := w.pace(ctx); err != nil {
			return nil
		}
		it, err := w.q.Receive(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if start, _ := w.failing.Fail(); start {
				w.log.Warn("ratekit: queue failing; the worker retries every second", "error", err)
			}
			if w.sleep(ctx, retryFailed) != nil {
				return nil
			}
			continue
		}
		if end, n := w.failing.Recover(); end {
			w.log.Info("ratekit: queue answers the worker again", "failures", n)
		}
		w.handle(ctx, it)
	}
}

// pace waits until the limiter admits one request, or ctx ends. While
// the limiter's store fails closed it waits its RetryAfter; a key it
// cannot decide (a plan function failing) is logged once per episode and
// tried again every second.
func (w *Worker) pace(ctx context.Context) error {
	for {
		d, err := w.lim.Take(ctx, w.key, 1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Allowed {
			if d.Delay > 0 { // a shaping bucket's slot
				return w.sleep(ctx, d.Delay)
			}
			return nil // the store failing open admits too: core logs it
		}
		wait := d.RetryAfter
		if err != nil && wait == 0 {
			if start, _ := w.limiting.Fail(); start {
				w.log.Warn("ratekit: the worker's limiter cannot decide; retrying every second", "error", err)
			}
			wait = retryFailed
		} else if end, n := w.limiting.Recover(); end {
			w.log.Info("ratekit: the worker's limiter decides again", "failures", n)
		}
		if err := w.sleep(ctx, max(wait, time.Millisecond)); err != nil {
			return err
		}
	}
}

// handle serves it, and acknowledges it if the handler succeeded, or
// refused it, or its attempts ran out.
func (w *Worker) handle(ctx context.Context, it *Item) {
	if it.Attempt > w.maxAttempts {
		// Its last delivery's worker stopped or died without an answer.
		w.giveUp(ctx, it, Reason{Attempts: it.Attempt - 1})
		return
	}
	status, ok := w.serve(ctx, it)
	switch {
	case ctx.Err() != nil:
		w.retried.Add(1) // the worker stops: delivered again after the visibility timeout
	case ok && status < 400:
		w.served.Add(1)
		w.ack(ctx, it)
	case ok && status < 500 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout:
		w.giveUp(ctx, it, Reason{Status: status, Attempts: it.Attempt, Refused: true})
	case it.Attempt >= w.maxAttempts:
		if !ok {
			status = 0
		}
		w.giveUp(ctx, it, Reason{Status: status, Attempts: it.Attempt})
	default:
		w.retried.Add(1) // delivered again after the visibility timeout
	}
}

// giveUp logs it with why, counts it, hands it to the dead-letter
// handler, and acknowledges it.
func (w *Worker) giveUp(ctx context.Context, it *Item, why Reason) {
	if why.Refused {
		w.refused.Add(1)
		w.log.Warn("ratekit: queued request refused by the handler; given up", "id", it.ID, "status", why.Status,
			"attempts", why.Attempts, "reason", why.String())
	} else {
		w.givenUp.Add(1)
		w.log.Error("ratekit: queued request given up", "id", it.ID, "status", why.Status,
			"attempts", why.Attempts, "reason", why.String())
	}
	if w.dead != nil {
		w.deadLetter(ctx, it, why)
	}
	w.ack(ctx, it)
}

// deadLetter calls the dead-letter handler, and logs its panic.
func (w *Worker) deadLetter(ctx context.Context, it *Item, why Reason) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("ratekit: queue dead-letter handler panicked", "id", it.ID, "panic", p)
		}
	}()
	w.dead(ctx, it, why)
}

func (w *Worker) ack(ctx context.Context, it *Item) {
	if err := w.q.Ack(ctx, it); err != nil {
		if start, _ := w.acking.Fail(); start {
			w.log.Warn("ratekit: queue acknowledgements failing; the items will be delivered again", "error", err)
		}
		return
	}
	if end, n := w.acking.Recover(); end {
		w.log.Info("ratekit: queue acknowledgements succeed again", "failures", n)
	}
}

// serve replays it into the handler, and returns the status it answered;
// ok is false when it panicked (the panic is logged, with the item's ID).
func (w *Worker) serve(ctx context.Context, it *Item) (status int, ok bool) {
	// The target is read as a server reads a request line's (origin
	// form), so that "//host/path" stays a path and is not taken for a
	// host, and the handler routes the replay as it routed the request.
	u, err := url.ParseRequestURI(it.Target)
	if err == nil && (u.Host != "" || !strings.HasPrefix(it.Target, "/")) {
		err = errors.New("target is not a path")
	}
	var r *http.Request
	if err == nil {
		r, err = http.NewRequestWithContext(context.WithValue(ctx, itemKey{}, it), it.Method, "/", bytes.NewReader(it.Body))
	}
	if err != nil {
		// Not a request any more (a queue written by something else):
		// serving it again will not help.
		w.log.Error("ratekit: queued request unreadable; answered 400", "id", it.ID, "error", err)
		return http.StatusBadRequest, true
	}
	r.URL, r.RequestURI = u, it.Target
	r.Header = it.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header[HeaderID] = []string{it.ID}
	r.Header[HeaderAttempt] = []string{strconv.Itoa(it.Attempt)}
	rw := &reply{header: http.Header{}}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				return
			}
			w.log.Error("ratekit: queued request handler panicked; the item will be delivered again", "id", it.ID, "panic", p)
			ok = false
		}
	}()
	w.h.ServeHTTP(rw, r)
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return rw.status, true
}

// reply is the response writer of a replayed request: it keeps the
// status and drops the body.
type reply struct {
	header http.Header
	status int
}

func (r *reply) Header() http.Header { return r.header }

func (r *reply) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *reply) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(b), nil
}
