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
// WithLimiter also paces requests through a ratekit limiter (package
// core) before each attempt: in a Redis store (package redisstore) shared
// by every instance of a service, it keeps the whole fleet within a
// provider's limit, each request waiting its turn within its context
// rather than being sent to collect a 429.
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
// A malformed value (negative, NaN, Inf, not a number) is ignored in favour
// of the next source. A well-formed number too large for a time.Duration is
// not malformed: it saturates to the longest Duration, which is longer than
// any maximum wait, so the response is returned at once. A 503 is retried
// only when its Retry-After is usable.
//
// Epoch or delta: GitHub and Discord send X-RateLimit-Reset as a Unix time,
// ratekit and others as seconds to wait. A value of at least 1e9 (a delta of
// more than 31 years, an instant after September 2001) is read as a Unix
// time, in seconds with an optional fraction, relative to the Clock's Now;
// a smaller one is a delta. Fractions such as "1.5" are accepted in both
// X-RateLimit fields; Retry-After takes whole seconds only, as RFC 9110
// says. A Unix time in milliseconds, as some APIs send, is read as seconds:
// an instant millennia away, a wait longer than any maximum, so the 429 is
// returned at once rather than retried.
//
// Denial is not an error: when the server asks for a wait longer than the
// maximum, when the retries are spent, when the wait would outlast the
// request context's deadline, or when the request cannot be replayed, the
// last 429 response is returned as it is, body unread, with a nil error.
// A request body that GetBody fails to re-obtain is such a request: GetBody
// is called before the wait, and when it fails the 429 is returned at once
// (the failure is logged by WithLogger). Errors are for transport failures,
// a context cancelled while waiting, and a request that the limiter of
// WithLimiter did not admit in time (ErrLimited): with no response to
// return, it was never sent.
package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Sources of a Wait.
const (
	SourceRetryAfter = "retry-after"       // the Retry-After field
	SourceRateLimit  = "ratelimit"         // the IETF RateLimit field
	SourceReset      = "x-ratelimit-reset" // X-RateLimit-Reset-After or X-RateLimit-Reset
	SourceBackoff    = "backoff"           // no usable field: exponential backoff
	SourcePacing     = "pacing"            // a quota the last response said was spent
	SourceLimiter    = "limiter"           // the limiter of WithLimiter
)

// A Wait describes one wait of the Transport, before a retry or, with
// pacing or a limiter, before a request.
type Wait struct {
	Host     string        // the request URL's host, with the port if any
	Duration time.Duration // how long the Transport waits
	Attempt  int           // the retry that follows: 1 for the first; 0 for pacing, or before the first attempt
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
		t.cfg.maxRetries = n
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
		t.cfg.maxWait = d
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
		t.cfg.base, t.cfg.max = base, max
		return nil
	}
}

// WithReplayNonIdempotent lets the Transport retry requests whose method is
// not idempotent, such as POST and PATCH. By default only GET, HEAD,
// OPTIONS, TRACE, PUT and DELETE are retried: a 429 usually means that the
// request was not processed, but not every server guarantees it.
func WithReplayNonIdempotent(replay bool) Option {
	return func(t *Transport) error { t.cfg.replayAll = replay; return nil }
}

// WithPacing turns on client-side pacing (default off): when a response
// says the quota is spent (X-RateLimit-Remaining is "0" after trimming
// spaces, an IETF RateLimit member has r=0, a 429 has a usable wait, or a
// 503 has a usable Retry-After), the next requests to that host wait until
// it resets. A pacing wait longer than the maximum wait, or past the
// request's deadline, is skipped: the request is sent and the server
// decides.
//
// A host is the request URL's host, lower-cased, without the scheme's
// default port (:443 for https, :80 for http). Its reset time is forgotten
// once it has passed, or when a response says that quota is left
// (X-RateLimit-Remaining above 0, or an IETF RateLimit member with r above
// 0, and none exhausted); a response that says nothing, such as a 404
// without rate-limit fields, leaves it as it is, and a later reset time
// never moves it earlier. At most 4096 hosts are remembered: beyond that,
// the one whose quota resets soonest is forgotten.
func WithPacing(pace bool) Option {
	return func(t *Transport) error { t.cfg.pacing = pace; return nil }
}

// WithClock sets the clock (default: the system clock); nil keeps it.
// Context deadlines are always compared with the system clock.
func WithClock(c Clock) Option {
	return func(t *Transport) error {
		if c != nil {
			t.cfg.clock = c
		}
		return nil
	}
}

// WithRandom sets the source of the backoff's jitter, a function returning
// a number in [0, 1) (default math/rand/v2.Float64); nil keeps it. A result
// outside [0, 1) is clamped: NaN or negative counts as 0, 1 or more as the
// largest number below 1.
func WithRandom(random func() float64) Option {
	return func(t *Transport) error {
		if random != nil {
			t.cfg.random = random
		}
		return nil
	}
}

// WithObserver sets a function called before every wait. It must be safe
// for concurrent use.
func WithObserver(observe func(Wait)) Option {
	return func(t *Transport) error { t.cfg.observe = observe; return nil }
}

// WithLogger logs every wait at level Info (default: no logging).
func WithLogger(log *slog.Logger) Option {
	return func(t *Transport) error { t.cfg.log = log; return nil }
}

// Transport is an http.RoundTripper that retries rate-limited requests. It
// is safe for concurrent use. Create it with New; the zero Transport is
// usable too and behaves as one from New(nil), with every default.
type Transport struct {
	cfg config

	mu      sync.Mutex
	until   map[string]time.Time // per host: when its spent quota resets
	sweepAt int                  // the size at which learn next sweeps until

	qmu   sync.Mutex
	turns map[string]*turn // per limiter key: the requests WithLimiter queues
}

// config is the settings of a Transport.
type config struct {
	next       http.RoundTripper // nil only in the zero Transport
	maxRetries int
	maxWait    time.Duration
	base, max  time.Duration
	replayAll  bool
	pacing     bool
	clock      Clock
	random     func() float64
	observe    func(Wait)
	log        *slog.Logger
	limiter    *core.Limiter              // WithLimiter's, or nil
	keyFunc    func(*http.Request) string // the limiter's key; nil: hostKey
}

// defaults is the settings of New(nil) without options.
var defaults = config{next: http.DefaultTransport, maxRetries: 3, maxWait: time.Minute,
	base: 500 * time.Millisecond, max: 30 * time.Second,
	clock: systemClock{}, random: rand.Float64}

// Bounds of the pacing map.
const (
	sweepFrom = 1024 // hosts from which learn sweeps expired entries
	maxHosts  = 4096 // hosts remembered at most
)

// New returns a Transport that sends requests with next
// (http.DefaultTransport if nil), or the error of the first invalid option.
func New(next http.RoundTripper, opts ...Option) (*Transport, error) {
	t := &Transport{cfg: defaults}
	if next != nil {
		t.cfg.next = next
	}
	for _, o := range opts {
		if err := o(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// settings returns the effective settings of t: the defaults for the zero
// Transport, whose next is nil (New always sets it).
func (t *Transport) settings() *config {
	if t.cfg.next == nil {
		return &defaults
	}
	return &t.cfg
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
	c := t.settings()
	ctx, host := req.Context(), req.URL.Host
	key := hostKey(req)
	if c.pacing {
		if err := t.pace(c, ctx, host, key); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper always closes the body
			}
			return nil, err
		}
	}
	limKey := key // the limiter's key: the host's, or WithKeyFunc's
	if c.limiter != nil && c.keyFunc != nil {
		limKey = c.keyFunc(req)
	}
	out := req
	for attempt := 1; ; attempt++ {
		if c.limiter != nil {
			if err := t.admit(c, ctx, host, limKey, attempt-1); err != nil {
				if out.Body != nil {
					_ = out.Body.Close()
				}
				return nil, err
			}
		}
		resp, err := c.next.RoundTrip(out)
		if err != nil {
			return nil, err
		}
		now := c.clock.Now()
		if c.pacing {
			t.learn(key, resp, now)
		}
		d, source, retry := c.retryWait(resp, attempt, now)
		if !retry || attempt > c.maxRetries || !c.replayable(req) || d > c.maxWait || beyondDeadline(ctx, d) {
			return resp, nil
		}
		// The next attempt's body first: if it cannot be had, the 429 is
		// the answer, and nobody waits in vain.
		next, err := rewind(req)
		if err != nil {
			if c.log != nil {
				c.log.LogAttrs(ctx, slog.LevelWarn, "ratekit/client: cannot replay, returning the response",
					slog.String("host", host), slog.Int("status", resp.StatusCode), slog.Any("error", err))
			}
			return resp, nil
		}
		c.notify(ctx, Wait{Host: host, Duration: d, Attempt: attempt, Source: source})
		drain(resp)
		if err := c.clock.Sleep(ctx, d); err != nil {
			if next.Body != nil && next.Body != req.Body {
				_ = next.Body.Close()
			}
			return nil, err
		}
		out = next
	}
}

// retryWait returns how long to wait before retrying after resp, and
// whether resp is to be retried at all.
func (c *config) retryWait(resp *http.Response, attempt int, now time.Time) (time.Duration, string, bool) {
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		d, ok := retryAfter(resp.Header, now)
		return d, SourceRetryAfter, ok
	case http.StatusTooManyRequests:
		if d, source, ok := serverWait(resp.Header, now); ok {
			return d, source, true
		}
		ceiling := c.base
		for i := 1; i < attempt && ceiling < c.max; i++ {
			if ceiling > c.max/2 {
				ceiling = c.max // doubling would pass max, or overflow
			} else {
				ceiling *= 2
			}
		}
		ceiling = min(ceiling, c.max, c.maxWait)
		return time.Duration(jitter(c.random()) * float64(ceiling)), SourceBackoff, true
	}
	return 0, "", false
}

// jitter clamps r into [0, 1): NaN and negatives to 0, 1 and more to the
// largest float64 below 1.
func jitter(r float64) float64 {
	switch {
	case !(r >= 0): // NaN or negative
		return 0
	case r >= 1:
		return math.Nextafter(1, 0)
	}
	return r
}

func (c *config) replayable(req *http.Request) bool {
	if hasBody(req) && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return c.replayAll
}

// hasBody reports whether req has a body: neither nil nor http.NoBody.
func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

// rewind returns a copy of req with a fresh body for the next attempt. A
// request without a body keeps none, whatever its GetBody.
func rewind(req *http.Request) (*http.Request, error) {
	out := req.Clone(req.Context())
	if hasBody(req) && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("ratekit/client: replaying %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		out.Body = body
	}
	return out, nil
}

// hostKey returns the pacing key of req: its URL's host, lower-cased,
// without the scheme's default port.
func hostKey(req *http.Request) string {
	host := strings.ToLower(req.URL.Host)
	switch {
	case strings.EqualFold(req.URL.Scheme, "https"):
		return strings.TrimSuffix(host, ":443")
	case strings.EqualFold(req.URL.Scheme, "http"):
		return strings.TrimSuffix(host, ":80")
	}
	return host
}

// pace waits until the spent quota of the host with the given key resets,
// if it is known, and forgets it once it has passed.
func (t *Transport) pace(c *config, ctx context.Context, host, key string) error {
	t.mu.Lock()
	until, ok := t.until[key]
	now := c.clock.Now()
	if ok && !until.After(now) {
		delete(t.until, key)
		ok = false
	}
	t.mu.Unlock()
	if !ok {
		return nil
	}
	d := until.Sub(now)
	if d > c.maxWait || beyondDeadline(ctx, d) {
		return nil
	}
	c.notify(ctx, Wait{Host: host, Duration: d, Source: SourcePacing})
	return c.clock.Sleep(ctx, d)
}

// learn records from resp when the quota of the host with the given key
// resets, if it is spent; it forgets the host if resp says quota is left,
// and otherwise leaves it be. A reset time never moves earlier.
func (t *Transport) learn(key string, resp *http.Response, now time.Time) {
	d, spent := quotaWait(resp, now)
	left := !spent && quotaLeft(resp)
	t.mu.Lock()
	defer t.mu.Unlock()
	if left {
		delete(t.until, key)
		return
	}
	if !spent || d <= 0 {
		return
	}
	until := now.Add(d)
	old, known := t.until[key]
	if known {
		if until.After(old) {
			t.until[key] = until
		}
		return
	}
	if t.until == nil {
		t.until = map[string]time.Time{} // the zero Transport
	}
	if len(t.until) >= min(max(t.sweepAt, sweepFrom), maxHosts) {
		for k, u := range t.until {
			if !u.After(now) {
				delete(t.until, k)
			}
		}
		if len(t.until) >= maxHosts {
			// Forget the host that resets soonest, unless it is this one.
			soonest, first := "", true
			for k, u := range t.until {
				if first || u.Before(t.until[soonest]) {
					soonest, first = k, false
				}
			}
			if !until.After(t.until[soonest]) {
				return
			}
			delete(t.until, soonest)
		}
		// Sweep again only when the map has doubled: amortized O(1).
		t.sweepAt = 2 * (len(t.until) + 1)
	}
	t.until[key] = until
}

func (c *config) notify(ctx context.Context, w Wait) {
	if c.observe != nil {
		c.observe(w)
	}
	if c.log != nil {
		c.log.LogAttrs(ctx, slog.LevelInfo, "ratekit/client: rate limited, waiting",
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
