// Package answer turns ratekit's decisions into HTTP answers: the
// rate-limit header fields, the status, the problem-details body, and
// the hold of a shaping leaky bucket. Every middleware (package stdhttp
// and the Gin, Echo, Fiber and Chi adapters) answers through it, so that
// all of them answer a request alike, byte for byte.
//
// Middleware keeps one Responder, asks it for a Verdict on each request,
// sets the header Fields it returns, and then passes the request on
// (Verdict.Pass, after Hold), or writes the Problem. Applications meet
// this package only for its Style constants, which select the header
// fields (WithHeaders in every adapter), and when they write their own
// rejection handler.
package answer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
)

// Style selects the rate-limit header fields of responses.
type Style uint8

const (
	// XRateLimit sends X-Ratelimit-Limit, X-Ratelimit-Remaining and
	// X-Ratelimit-Reset on every limited response, and Retry-After and
	// X-Ratelimit-Retry-After on rejections. The default.
	XRateLimit Style = iota
	// IETF sends the fields of draft-ietf-httpapi-ratelimit-headers-11,
	// RateLimit-Policy and RateLimit, and Retry-After on rejections.
	IETF
	// Both sends the fields of both styles.
	Both
	// NoHeaders sends only Retry-After, on rejections.
	NoHeaders
)

// ParseStyle parses "x-ratelimit", "ietf", "both" or "none".
func ParseStyle(s string) (Style, error) {
	switch s {
	case "x-ratelimit", "":
		return XRateLimit, nil
	case "ietf":
		return IETF, nil
	case "both":
		return Both, nil
	case "none":
		return NoHeaders, nil
	}
	return 0, errors.New(`answer: unknown header style "` + s + `" (valid: x-ratelimit, ietf, both, none)`)
}

// A Field is one response header field, in the canonical form of
// net/http. Value has exactly one element; it may be shared between
// responses and must not be modified, so that middleware can assign it,
// header[f.Name] = f.Value, without a copy.
type Field struct {
	Name  string
	Value []string
}

// A Verdict is what middleware does with one request: pass it on, answer
// it with a rejection, or answer it with an error.
type Verdict struct {
	// Decision is the limiter's decision; the zero Decision when none was
	// taken (a key error or a cost out of range).
	Decision core.Decision

	// Err is the error behind the verdict: the key function's, the
	// store's (then Decision follows the fail mode), or a cost out of
	// range. It is for logs and error handlers, never for the client.
	Err error

	// Status is the status of the response that answers the request in
	// place of the handler: 429, 503 (the store failed and the limiter
	// fails closed), 400 (no key) or 500 (a key or plan function failed, or the
	// cost is out of range); zero when the request passes.
	Status int
}

// Pass reports whether the request is to be passed on, after Hold.
func (v *Verdict) Pass() bool { return v.Status == 0 }

// Rejected reports whether the request is answered because a limit
// rejected it or because the store failed under core.WithFailClosed: the
// cases for a custom "denied" handler, which get the rate-limit header
// fields. Any other request that does not pass failed with an error, the
// case for a custom error handler, and gets no rate-limit fields.
func (v *Verdict) Rejected() bool {
	return v.Status == http.StatusTooManyRequests || v.Status == http.StatusServiceUnavailable
}

// A Responder answers the requests of one middleware. Its zero value
// sends XRateLimit fields and logs to slog.Default(); set its fields
// before the first request. It must not be copied after first use.
type Responder struct {
	// Headers selects the rate-limit header fields.
	Headers Style

	// Logger receives the errors of key functions, plans and costs, once
	// per episode of each kind: the first error is logged, the next ones
	// are counted, and the count is logged when a request is decided
	// again. Episodes that start within 10 seconds of the last one logged
	// are counted into the next line, so requests that alternate between
	// failing and passing log at most two lines per kind per 10 seconds.
	Logger *slog.Logger

	failures [failureKinds]episode.Log
	// troubled is set after a failure and cleared by the next request
	// decided, before it ends the episodes: a request finds it unset, and
	// skips the episodes, unless one may be under way.
	troubled atomic.Bool
}

// The kinds of failure a Responder logs, each with its own episodes.
const (
	noKey = iota
	keyFailing
	planFailing
	costFailing
	failureKinds
)

var failureLines = [failureKinds]struct {
	level slog.Level
	start string
}{
	noKey:       {slog.LevelInfo, "ratekit: requests without a rate-limit key (answered 400)"},
	keyFailing:  {slog.LevelWarn, "ratekit: rate-limit key function failing (answered 500)"},
	planFailing: {slog.LevelWarn, "ratekit: plan function failing (answered 500)"},
	costFailing: {slog.LevelWarn, "ratekit: request cost out of range (answered 500)"},
}

// Verdict decides a request by lim for middleware into v: key and keyErr
// are the results of the key function, cost the request's cost (1 unless
// the application weighs requests). It returns the header fields to set
// on the response, passed on or rejected alike (none after a key or cost
// error), appended to dst: a buffer the caller may keep on its stack
// ([8]Field is enough), as v, so that a request that passes allocates
// nothing and nothing large is copied.
func (r *Responder) Verdict(ctx context.Context, v *Verdict, lim *core.Limiter, key string, keyErr error, cost int, dst []Field) []Field {
	if keyErr != nil {
		r.failed(v, keyErr, true)
		return dst
	}
	var err error
	v.Decision, err = lim.Take(ctx, key, cost)
	return r.settle(v, err, dst)
}

// VerdictAll is Verdict for a request that must pass several limiters,
// each with its own key (core.TakeAll), such as the rules of a rules file
// that match it: keyErr is the error of computing the keys. A request
// that no check applies to passes with no header fields.
func (r *Responder) VerdictAll(ctx context.Context, v *Verdict, checks []core.Check, keyErr error, cost int, dst []Field) []Field {
	if keyErr != nil {
		r.failed(v, keyErr, true)
		return dst
	}
	if len(checks) == 0 {
		*v = Verdict{}
		return dst
	}
	var err error
	v.Decision, err = core.TakeAll(ctx, checks, cost)
	return r.settle(v, err, dst)
}

// Keyed settles the key of a request that middleware decides by other
// means than a limiter, such as a concurrency limit: when keyErr is not
// nil or key is empty, it sets v to the verdict of the failure (400 when
// there is no key, 500 when the key function failed), logged once per
// episode as Verdict logs it, and returns false; otherwise it ends the
// failure episodes under way and returns true.
func (r *Responder) Keyed(v *Verdict, key string, keyErr error) bool {
	if keyErr == nil && key == "" {
		keyErr = errEmptyKey
	}
	if keyErr != nil {
		r.failed(v, keyErr, true)
		return false
	}
	r.recovered()
	return true
}

var errEmptyKey = fmt.Errorf("%w: empty key", core.ErrMissingKey)

// settle completes v, whose decision was taken with the error err.
func (r *Responder) settle(v *Verdict, err error, dst []Field) []Field {
	if err != nil && (errors.Is(err, core.ErrMissingKey) || errors.Is(err, core.ErrCostExceedsLimit) || errors.Is(err, core.ErrPlan)) {
		r.failed(v, err, false)
		return dst
	}
	r.recovered()
	v.Err, v.Status = err, 0
	if !v.Decision.Allowed {
		v.Status = http.StatusTooManyRequests
		if err != nil {
			v.Status = http.StatusServiceUnavailable
		}
	}
	return r.Headers.fields(dst, &v.Decision)
}

// failed sets v to the verdict of a request whose key or cost is
// unusable, logged once per episode.
func (r *Responder) failed(v *Verdict, err error, keyFunc bool) {
	status, kind := http.StatusInternalServerError, costFailing
	switch {
	case errors.Is(err, core.ErrMissingKey):
		status, kind = http.StatusBadRequest, noKey
	case keyFunc:
		kind = keyFailing
	case errors.Is(err, core.ErrPlan):
		kind = planFailing
	}
	start, _ := r.failures[kind].Fail()
	r.troubled.Store(true)
	if start {
		line := failureLines[kind]
		r.logger().Log(context.Background(), line.level, line.start, "error", err)
	}
	*v = Verdict{Err: err, Status: status}
}

// recovered ends the failure episodes under way: a request was decided.
// A failure that happens while it runs either is ended by it or sets
// troubled again after it cleared it, so no episode is left unended.
func (r *Responder) recovered() {
	if !r.troubled.Load() {
		return
	}
	r.troubled.Store(false)
	for kind := range r.failures {
		if end, n := r.failures[kind].Recover(); end {
			r.logger().Info("ratekit: requests decided again", "failure", failureLines[kind].start, "failed_requests", n)
		}
	}
}

func (r *Responder) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// Hold waits for d.Delay, the slot of a request admitted by a shaping
// leaky bucket, and returns nil; it returns ctx.Err() as soon as ctx is
// done. Middleware calls it before passing an admitted request on.
func Hold(ctx context.Context, d *core.Decision) error {
	if d.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Problem content: the media type and cache control of every answer that
// carries a Problem body (RFC 9457). It must not be stored: RFC 6585
// forbids caching a 429, and the other statuses describe the moment too.
const (
	ProblemContentType  = "application/problem+json"
	ProblemCacheControl = "no-store"
)

// Problem types of rejections, from the IETF rate-limit headers draft.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

type problem struct {
	Type       string `json:"type,omitempty"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// Problem returns the problem-details body (RFC 9457) of a verdict that
// does not pass the request on. Its words are fixed for each kind of
// answer; it never contains the client's key or an error's text, which
// goes to the Responder's logger instead:
//
//   - 429: problem type quota-exceeded, with the limit's name and the
//     retry delay;
//   - 503: problem type temporary-reduced-capacity (the store failed);
//   - 400: the request has no value to be limited by;
//   - 500: the key could not be computed, or the limit is misconfigured.
func Problem(v *Verdict) []byte {
	p := problem{Status: v.Status, Title: http.StatusText(v.Status)}
	switch v.Status {
	case http.StatusTooManyRequests:
		s := retrySeconds(&v.Decision)
		p.Type, p.Limit, p.RetryAfter = problemQuotaExceeded, v.Decision.Name, s
		p.Detail = "rate limit exceeded; retry in " + strconv.FormatInt(s, 10) + " s"
	case http.StatusServiceUnavailable:
		p.Type, p.RetryAfter = problemReducedCapacity, retrySeconds(&v.Decision)
		p.Detail = "rate limiter unavailable"
	case http.StatusBadRequest:
		p.Detail = "the request has no value to be rate limited by"
	default:
		p.Detail = "rate limit unavailable for this request"
		if errors.Is(v.Err, core.ErrCostExceedsLimit) {
			p.Detail = "rate limit misconfigured"
		}
	}
	body, _ := json.Marshal(p)
	return append(body, '\n')
}
