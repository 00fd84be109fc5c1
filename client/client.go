// Package client is the client half of ratekit: an http.RoundTripper that
// waits and retries when a server answers 429 Too Many Requests (or 503
// Service Unavailable with Retry-After), and can pace requests so that a
// well-behaved client rarely sees a 429 at all.
//
//	rt, err := client.New(http.DefaultTransport, client.WithPacing(true))
//	if err != nil {
//		return err
//	}
//	hc := &http.Client{Transport: rt}
//
// The wait before a retry is the first usable of:
//
//  1. Retry-After: delay-seconds, or an HTTP-date (a date in the past means
//     no wait);
//  2. the IETF RateLimit field (draft-ietf-httpapi-ratelimit-headers-11):
//     the t of the exhausted policy, the member with r=0 (the longest t if
//     several are exhausted);
//  3. X-RateLimit-Reset-After (Discord) in seconds, else X-RateLimit-Reset:
//     seconds, or a Unix time when the value is at least 1e9 (see below);
//  4. exponential backoff with full jitter: a random wait between 0 and
//     base×2^(retry−1), capped.
//
// A malformed value (negative, NaN, not a number, too large for a
// time.Duration) is ignored in favour of the next source. A 503 is retried
// only when its Retry-After is usable.
//
// Epoch or delta: GitHub and Discord send X-RateLimit-Reset as a Unix time,
// ratekit and others as seconds to wait. A value of at least 1e9 (a delta of
// more than 31 years, an instant after September 2001) is read as a Unix
// time, in seconds with an optional fraction, relative to the Clock's Now;
// a smaller one is a delta. Fractions such as "1.5" are accepted in both
// X-RateLimit fields; Retry-After takes whole seconds only, as RFC 9110
// says.
//
// Denial is not an error: when the server asks for a wait longer than the
// maximum, when the retries are spent, when the wait would outlast the
// request context's deadline, or when the request cannot be replayed, the
// last 429 response is returned as it is, body unread, with a nil error.
// Errors are for transport failures, a context cancelled while waiting, and
// a request body that GetBody fails to re-obtain.
package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Sources of a Wait.
const (
	SourceRetryAfter = "retry-after"       // the Retry-After field
	SourceRateLimit  = "ratelimit"         // the IETF RateLimit field
	SourceReset      = "x-ratelimit-reset" // X-RateLimit-Reset-After or X-RateLimit-Reset
	SourceBackoff    = "backoff"           // no usable field: exponential backoff
	SourcePacing     = "pacing"            // a quota the last response said was spent
)

// A Wait describes one wait of the Transport, before a retry or, with
// pacing, before a request.
type Wait struct {
	Host     string        // the request URL's host, with the port if any
	Duration time.Duration // how long the Transport waits
	Attempt  int           // the retry that follows: 1 for the first; 0 for pacing
	Source   string        // where Duration came from: one of the Source constants
}

// A Clock tells the time and waits. WithClock injects one, so that tests
// never sleep.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// An Option configures a Transport.
type Option func(*Transport) error

// WithMaxRetries sets how many times a request is retried (default 3); 0
// never retries.
func WithMaxRetries(n int) Option {
	return func(t *Transport) error {
		if n < 0 {
			return fmt.Errorf("ratekit/client: max retries %d is negative", n)
		}
		t.maxRetries = n
		return nil
	}
}

// WithMaxWait sets the longest wait (default 60s). When the server asks
// for longer, the Transport returns its response at once; a backoff or
// pacing wait is never longer.
func WithMaxWait(d time.Duration) Option {
	return func(t *Transport) error {
		if d < 0 {
			return fmt.Errorf("ratekit/client: max wait %s is negative", d)
		}
		t.maxWait = d
		return nil
	}
}

// WithBackoff sets the exponential backoff used when a 429 says nothing
// about when to retry (default base 500ms, max 30s): retry n waits a random
// time between 0 and min(max, base×2^(n−1)).
func WithBackoff(base, max time.Duration) Option {
	return func(t *Transport) error {
		if base <= 0 || max < base {
			return fmt.Errorf("ratekit/client: backoff base %s, max %s: need 0 < base <= max", base, max)
		}
		t.base, t.max = base, max
		return nil
	}
}

// WithReplayNonIdempotent lets the Transport retry requests whose method is
// not idempotent, such as POST and PATCH. By default only GET, HEAD,
// OPTIONS, TRACE, PUT and DELETE are retried: a 429 usually means that the
// request was not processed, but not every server guarantees it.
func WithReplayNonIdempotent(replay bool) Option {
	return func(t *Transport) error { t.replayAll = replay; return nil }
}

// WithPacing turns on client-side pacing (default off): when a response
// says the quota is spent (X-RateLimit-Remaining: 0, an IETF RateLimit
// member with r=0, or a 429 with a usable wait), the next requests to that
// host wait until it resets. A pacing wait longer than the maximum wait, or
// past the request's deadline, is skipped: the request is sent and the
// server decides.
func WithPacing(pace bool) Option {
	return func(t *Transport) error { t.pacing = pace; return nil }
}

// WithClock sets the clock (default: the system clock); nil keeps it.
// Context deadlines are always compared with the system clock.
func WithClock(c Clock) Option {
	return func(t *Transport) error {
		if c != nil {
			t.clock = c
		}
		return nil
	}
}

// WithRandom sets the source of the backoff's jitter, a function returning
// a number in [0, 1) (default math/rand/v2.Float64); nil keeps it.
func WithRandom(random func() float64) Option {
	return func(t *Transport) error {
		if random != nil {
			t.random = random
		}
		return nil
	}
}

// WithObserver sets a function called before every wait. It must be safe
// for concurrent use.
func WithObserver(observe func(Wait)) Option {
	return func(t *Transport) error { t.observe = observe; return nil }
}

// WithLogger logs every wait at level Info (default: no logging).
func WithLogger(log *slog.Logger) Option {
	return func(t *Transport) error { t.log = log; return nil }
}

// Transport is an http.RoundTripper that retries rate-limited requests. It
// is safe for concurrent use; create it with New.
type Transport struct {
	next       http.RoundTripper
	maxRetries int
	maxWait    time.Duration
	base, max  time.Duration
	replayAll  bool
	pacing     bool
	clock      Clock
	random     func() float64
	observe    func(Wait)
	log        *slog.Logger

	mu    sync.Mutex
	until map[string]time.Time // per host: when its spent quota resets
}

// New returns a Transport that sends requests with next
// (http.DefaultTransport if nil), or the error of the first invalid option.
func New(next http.RoundTripper, opts ...Option) (*Transport, error) {
	if next == nil {
		next = http.DefaultTransport
	}
	t := &Transport{next: next, maxRetries: 3, maxWait: time.Minute,
		base: 500 * time.Millisecond, max: 30 * time.Second,
		clock: systemClock{}, random: rand.Float64, until: map[string]time.Time{}}
	for _, o := range opts {
		if err := o(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// RoundTrip sends req, and while the response is a 429 (or a 503 with
// Retry-After) and the request may be replayed, drains and closes the
// response, waits and sends req again, at most the maximum number of
// retries.
//
// A request is replayed only when both hold: its method is idempotent (GET,
// HEAD, OPTIONS, TRACE, PUT, DELETE) or WithReplayNonIdempotent is on; and
// it has no body, or a GetBody that re-obtains the body for each attempt. A
// body without GetBody is never sent twice: its 429 is returned instead.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, host := req.Context(), req.URL.Host
	if t.pacing {
		if err := t.pace(ctx, host); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper always closes the body
			}
			return nil, err
		}
	}
	out := req
	for attempt := 1; ; attempt++ {
		resp, err := t.next.RoundTrip(out)
		if err != nil {
			return nil, err
		}
		now := t.clock.Now()
		if t.pacing {
			t.learn(host, resp, now)
		}
		d, source, retry := t.retryWait(resp, attempt, now)
		if !retry || attempt > t.maxRetries || !t.replayable(req) || d > t.maxWait || beyondDeadline(ctx, d) {
			return resp, nil
		}
		t.notify(ctx, Wait{Host: host, Duration: d, Attempt: attempt, Source: source})
		drain(resp)
		if err := t.clock.Sleep(ctx, d); err != nil {
			return nil, err
		}
		if out, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

// retryWait returns how long to wait before retrying after resp, and
// whether resp is to be retried at all.
func (t *Transport) retryWait(resp *http.Response, attempt int, now time.Time) (time.Duration, string, bool) {
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		d, ok := retryAfter(resp.Header, now)
		return d, SourceRetryAfter, ok
	case http.StatusTooManyRequests:
		if d, source, ok := serverWait(resp.Header, now); ok {
			return d, source, true
		}
		ceiling := t.base
		for i := 1; i < attempt && ceiling < t.max; i++ {
			ceiling *= 2
		}
		ceiling = min(ceiling, t.max, t.maxWait)
		return time.Duration(t.random() * float64(ceiling)), SourceBackoff, true
	}
	return 0, "", false
}

func (t *Transport) replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return t.replayAll
}

// rewind returns a copy of req with a fresh body for the next attempt.
func rewind(req *http.Request) (*http.Request, error) {
	out := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("ratekit/client: replaying %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		out.Body = body
	}
	return out, nil
}

// pace waits until the spent quota of host resets, if it is known.
func (t *Transport) pace(ctx context.Context, host string) error {
	t.mu.Lock()
	until, ok := t.until[host]
	t.mu.Unlock()
	if !ok {
		return nil
	}
	d := until.Sub(t.clock.Now())
	if d <= 0 || d > t.maxWait || beyondDeadline(ctx, d) {
		return nil
	}
	t.notify(ctx, Wait{Host: host, Duration: d, Source: SourcePacing})
	return t.clock.Sleep(ctx, d)
}

// learn records from resp when the quota of host resets, if it is spent.
func (t *Transport) learn(host string, resp *http.Response, now time.Time) {
	d, ok := quotaWait(resp, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok && d > 0 {
		t.until[host] = now.Add(d)
	} else {
		delete(t.until, host)
	}
}

func (t *Transport) notify(ctx context.Context, w Wait) {
	if t.observe != nil {
		t.observe(w)
	}
	if t.log != nil {
		t.log.LogAttrs(ctx, slog.LevelInfo, "ratekit/client: rate limited, waiting",
			slog.String("host", w.Host), slog.Duration("wait", w.Duration),
			slog.Int("attempt", w.Attempt), slog.String("source", w.Source))
	}
}

// beyondDeadline reports whether a wait of d would reach the deadline of
// ctx. Deadlines are on the system clock, whatever the Transport's Clock.
func beyondDeadline(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) <= d
}

// drainLimit bounds the bytes read from a response before it is closed so
// that its connection can be reused.
const drainLimit = 64 << 10

func drain(resp *http.Response) {
	if resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ http.RoundTripper = (*Transport)(nil)
