package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
)

// ErrLimited is wrapped by the error of a request that the limiter of
// WithLimiter would not admit in time: the wait it asked for was longer
// than the maximum wait, or would have outlasted the request context's
// deadline (the error then wraps context.DeadlineExceeded as well). The
// attempt it was for was not sent: the first, or a retry (whose earlier
// attempt's 429 was then drained and closed, as before any retry).
var ErrLimited = errors.New("ratekit/client: the limiter did not admit the request in time")

// WithLimiter paces requests through lim, a ratekit limiter, so that the
// instances of a service that share lim's store (a Redis store, package
// redisstore) together stay within a provider's limit; a limiter in
// memory paces the Transports of one process. Before every attempt,
// retries included, the Transport takes one request from lim for the key
// key(req); a nil key is the request URL's host, lower-cased and without
// the scheme's default port, as WithPacing keys it. While lim rejects the
// request, the Transport waits the decision's RetryAfter on its Clock and
// asks again; an admitted request with a Delay (a shaping leaky bucket)
// waits the Delay, then is sent. Every wait is reported to the observer
// with SourceLimiter. While one request of the Transport waits for a key,
// the others rejected for it queue behind it and ask the limiter in turn,
// so that a shared store is asked once per Transport, not once per
// waiting goroutine, each time quota comes back.
//
// A wait is bounded by the request's context: one longer than the
// maximum wait (WithMaxWait), or that would reach the context's deadline,
// is not begun, and RoundTrip returns an error wrapping ErrLimited at
// once; a context that ends during a wait, or in the queue, ends it with
// the context's error. The request is then not sent. (A shaping bucket
// has already counted it: bound its delay with core.Limit.MaxDelay.) The
// limiter's store call itself is bounded by the store's timeout, not by
// the context, so that a request cancelled during it does not count as a
// store failure.
//
// When lim's store fails, lim's fail mode decides: open (the default)
// admits, and the request is sent; closed rejects with a RetryAfter, which
// the Transport waits as any other. The limiter logs a failure once per
// episode (core.WithLogger). An error that is no decision, such as an
// empty key (core.ErrMissingKey), is returned and the request not sent.
//
// A nil lim is an error.
func WithLimiter(lim *core.Limiter, key func(*http.Request) string) Option {
	return func(t *Transport) error {
		if lim == nil {
			return errors.New("ratekit/client: WithLimiter(nil)")
		}
		t.cfg.limiter, t.cfg.keyFunc = lim, key
		return nil
	}
}

// admit takes one request from the limiter for key, waiting while it is
// rejected, and then the delay it is admitted with. The waits are reported
// with attempt, the retry that follows (0 before the first attempt).
//
// The requests of this Transport that the limiter rejects queue for their
// key, and only the first in the queue asks the limiter again, when its
// RetryAfter has passed: one request per Transport, not every waiting
// goroutine, asks a shared store each time a request's worth of quota
// comes back. A request that finds no queue asks at once.
func (t *Transport) admit(c *config, ctx context.Context, host, key string, attempt int) error {
	var wait time.Duration // the RetryAfter of a rejection, still to wait
	if !t.queued(key) {
		admitted, d, err := c.take(ctx, host, key)
		switch {
		case err != nil:
			return err
		case admitted:
			return c.pause(ctx, host, attempt, d)
		}
		wait = d
	}
	release, queued, err := t.queue(ctx, key)
	if err != nil {
		return err
	}
	if queued {
		wait = 0 // others went first: ask afresh
	}
	for {
		if err := c.pause(ctx, host, attempt, wait); err != nil {
			release()
			return err
		}
		admitted, d, err := c.take(ctx, host, key)
		if err != nil || admitted {
			release() // before a shaping delay: the next may take its slot meanwhile
			if err != nil {
				return err
			}
			return c.pause(ctx, host, attempt, d)
		}
		wait = d
	}
}

// take asks the limiter once and reports whether the request was
// admitted, and the wait before it is sent (the delay of a shaping bucket)
// or, when rejected, before asking again. A wait that could not end in
// time is an error.
func (c *config) take(ctx context.Context, host, key string) (bool, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return false, 0, err
	}
	// The store's call runs to its own timeout, not the request's: a
	// request that ends during it must not count as a store failure.
	tctx := ctx
	if ctx.Done() != nil {
		tctx = context.WithoutCancel(ctx)
	}
	d, err := c.limiter.Take(tctx, key, 1)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return false, 0, ctxErr
	}
	wait := d.RetryAfter
	switch {
	case d.Allowed && d.Delay <= 0:
		return true, 0, nil // an error with it is a store failing open: the limiter logged it
	case d.Allowed:
		wait = d.Delay
	case err != nil && wait <= 0:
		return false, 0, err // no decision: a bad key, an impossible cost
	case wait <= 0:
		wait = time.Millisecond // a rejection must wait for something
	}
	switch {
	case wait > c.maxWait:
		return false, 0, fmt.Errorf("%w: %s: a wait of %s, more than the maximum %s", ErrLimited, host, wait, c.maxWait)
	case beyondDeadline(ctx, wait):
		return false, 0, fmt.Errorf("%w: %s: a wait of %s would outlast the deadline: %w", ErrLimited, host, wait, context.DeadlineExceeded)
	}
	return d.Allowed, wait, nil
}

// pause reports a wait for the limiter, if any, and waits.
func (c *config) pause(ctx context.Context, host string, attempt int, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	c.notify(ctx, Wait{Host: host, Duration: wait, Attempt: attempt, Source: SourceLimiter})
	return c.clock.Sleep(ctx, wait)
}

// A turn is the queue of a Transport's requests rejected for one key.
type turn struct {
	ch    chan struct{} // holds a token while a request has the turn
	users int           // the requests holding or waiting for the turn
}

// queued reports whether requests of t wait for key.
func (t *Transport) queued(key string) bool {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	_, ok := t.turns[key]
	return ok
}

// queue waits for the turn of key, or until ctx is done, and returns the
// function that passes it on, and whether other requests had it first. A
// key is remembered only while requests hold or wait for its turn.
func (t *Transport) queue(ctx context.Context, key string) (release func(), queued bool, err error) {
	t.qmu.Lock()
	q := t.turns[key]
	if q == nil {
		if t.turns == nil {
			t.turns = map[string]*turn{}
		}
		q = &turn{ch: make(chan struct{}, 1)}
		t.turns[key] = q
	}
	q.users++
	t.qmu.Unlock()
	leave := func() {
		t.qmu.Lock()
		if q.users--; q.users == 0 {
			delete(t.turns, key)
		}
		t.qmu.Unlock()
	}
	release = func() { <-q.ch; leave() }
	select {
	case q.ch <- struct{}{}:
		return release, false, nil
	default:
	}
	select {
	case q.ch <- struct{}{}:
		return release, true, nil
	case <-ctx.Done():
		leave()
		return nil, true, ctx.Err()
	}
}
