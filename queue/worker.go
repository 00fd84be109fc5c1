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
// and a failing acknowledgement once per episode, and every item given up
// after WithMaxAttempts (default slog.Default()).
func WithLogger(log *slog.Logger) WorkerOption {
	return func(w *Worker) error {
		if log == nil {
			return errors.New("queue: WithLogger(nil)")
		}
		w.log = log
		return nil
	}
}

// WithMaxAttempts makes the worker give up an item delivered n times
// without success (a panic, a 5xx answer, a worker that died): it is
// acknowledged without being served again, and logged with its ID. The
// default, 0, never gives up. n from 0 to 1000.
func WithMaxAttempts(n int) WorkerOption {
	return func(w *Worker) error {
		if n < 0 || n > 1000 {
			return fmt.Errorf("queue: max attempts %d must be from 0 to 1000", n)
		}
		w.maxAttempts = n
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
	sleep       func(context.Context, time.Duration) error

	failing, acking, limiting episode.Log
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
// Host. What h writes is dropped; its status decides: below 500 the item
// is acknowledged, but 429 and 408, which ask for the request later, as
// 500 and above (or a panic) do, leave it for another delivery. A target
// that is not a path (it did not come from a request line) is dropped
// with a log line.
func NewWorker(q Queue, lim *core.Limiter, key string, h http.Handler, opts ...WorkerOption) (*Worker, error) {
	if q == nil || lim == nil || h == nil {
		return nil, errors.New("queue: NewWorker needs a queue, a limiter and a handler")
	}
	if key == "" {
		return nil, errors.New("queue: NewWorker needs a limiter key")
	}
	w := &Worker{q: q, lim: lim, key: key, h: h, log: slog.Default(), sleep: sleep}
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

// handle serves it, and acknowledges it if the handler succeeded.
func (w *Worker) handle(ctx context.Context, it *Item) {
	if w.maxAttempts > 0 && it.Attempt > w.maxAttempts {
		w.log.Error("ratekit: queued request given up", "id", it.ID, "attempts", it.Attempt-1)
		w.ack(ctx, it)
		return
	}
	status, ok := w.serve(ctx, it)
	if !ok || !done(status) || ctx.Err() != nil {
		return // delivered again after the visibility timeout
	}
	w.ack(ctx, it)
}

// done reports whether a handler's status ends an item: any status below
// 500 but 429 and 408, which ask for the request later, as a 5xx does.
func done(status int) bool {
	return status < 500 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout
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
		w.log.Error("ratekit: queued request unreadable; dropped", "id", it.ID, "error", err)
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
