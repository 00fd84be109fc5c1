// Package stdhttp is the net/http middleware of ratekit. It works with
// http.ServeMux and with every router that takes func(http.Handler)
// http.Handler middleware, such as Chi.
//
// All policy lives in package core, and the answer in package answer;
// this package only translates a request into a key and a cost, and the
// verdict into a response:
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	handler := stdhttp.New(lim, keyfuncs.PeerIP)(mux) // Chi: r.Use(stdhttp.New(lim, keyfuncs.PeerIP))
//
// An admitted request gets the rate-limit header fields of the
// middleware's style and is passed on, after the delay of a shaping leaky
// bucket. A rejected one gets the fields, Retry-After, and a
// problem-details body (RFC 9457) with status 429, or 503 when the store
// failed and the limiter fails closed.
package stdhttp

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// An Option configures the middleware returned by New or Rules.
type Option func(*config)

type config struct {
	answer.Responder
	skip    func(*http.Request) bool
	cost    func(*http.Request) int
	denied  func(http.ResponseWriter, *http.Request, core.Decision)
	onError func(http.ResponseWriter, *http.Request, error)
	expose  bool
}

// WithSkipper exempts the requests for which skip returns true, such as
// health checks: they are passed on without being counted and get no
// rate-limit headers.
func WithSkipper(skip func(*http.Request) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1. A cost of 0 reports the state without counting.
// A negative cost, or one larger than the capacity of a limit, is a
// programming error and is passed to the error handler.
func WithCost(cost func(*http.Request) int) Option {
	return func(c *config) { c.cost = cost }
}

// WithDeniedHandler sets the handler that writes the response to a
// rejected request, instead of the default problem-details body. The
// rate-limit headers and Retry-After are already set when it runs.
//
// It also answers requests rejected because the store failed under
// core.WithFailClosed; their decision has Quota 0.
func WithDeniedHandler(denied func(w http.ResponseWriter, r *http.Request, d core.Decision)) Option {
	return func(c *config) { c.denied = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions: an
// error of the key function, an empty key, or a cost out of range. The
// default answers 400 Bad Request when the error wraps core.ErrMissingKey
// (a missing or empty key), 500 otherwise, with a problem-details body in
// fixed words; the error itself goes to the logger (WithLogger). No
// rate-limit headers are set.
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) { c.onError = onError }
}

// WithHeaders selects the rate-limit header fields (default
// answer.XRateLimit; answer.IETF for draft-ietf-httpapi-ratelimit-headers,
// answer.Both, answer.NoHeaders).
func WithHeaders(s answer.Style) Option {
	return func(c *config) { c.Headers = s }
}

// WithLogger sets the logger of key-function and cost errors, logged once
// per episode (default slog.Default()). Store failures are logged by the
// limiter (core.WithLogger).
func WithLogger(log *slog.Logger) Option {
	return func(c *config) { c.Logger = log }
}

// WithDecisionInContext puts the decision of every request that is
// decided into the request's context, where the handler reads it with
// DecisionFrom. It costs two allocations per request (a context and a
// shallow copy of the request), so it is off by default.
func WithDecisionInContext() Option {
	return func(c *config) { c.expose = true }
}

type decisionKey struct{}

// DecisionFrom returns the decision that the middleware took for the
// request whose context is ctx, when it runs WithDecisionInContext.
func DecisionFrom(ctx context.Context) (core.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*core.Decision)
	if !ok {
		return core.Decision{}, false
	}
	return *d, true
}

func newConfig(opts []Option) *config {
	c := new(config)
	for _, o := range opts {
		o(c)
	}
	return c
}

// New returns middleware that limits requests with lim, keyed by key.
//
// For each request that is not skipped, it computes the key and cost,
// asks lim, and sets the headers of the decision. A rejected request is
// answered by the denied handler and not passed on. An admitted request is
// held for the delay of a shaping leaky bucket and then passed on; if its
// context ends first (the client went away), it is dropped without a
// response. When the store fails open (the default), requests pass
// (core has already logged and observed the failure).
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil.
func New(lim *core.Limiter, key func(*http.Request) (string, error), opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("stdhttp: New needs a limiter and a key function")
	}
	cfg := newConfig(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.skip != nil && cfg.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			k, err := key(r)
			cost := 1
			if cfg.cost != nil && err == nil {
				cost = cfg.cost(r)
			}
			var buf [8]answer.Field
			var v answer.Verdict
			fields := cfg.Verdict(r.Context(), &v, lim, k, err, cost, buf[:0])
			cfg.respond(w, r, next, &v, fields)
		})
	}
}

// LimitByIP returns middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	handler := stdhttp.LimitByIP(100, time.Minute)(mux)
//
// The client IP is keyfuncs.PeerIP: the TCP peer, never a header a client
// could forge, with IPv6 clients grouped by /64. The limit counts with the
// default algorithm, the sliding window counter, in a memory store of its
// own; opts are New's. It is New with a limiter of that limit and
// keyfuncs.PeerIP, and answers alike (429 with Retry-After and the rate-limit
// header fields once a client's budget is spent).
//
// LimitByIP panics, as core.Must does, if count or period is out of range
// (count from 0 to core.MaxCount, period from 1ns to core.MaxPeriod): it is
// for limits written as constants. With limits from flags or
// configuration, or for another key, algorithm or store, build the
// limiter with core.NewLimiter, which returns the error, and use New.
func LimitByIP(count int, period time.Duration, opts ...Option) func(http.Handler) http.Handler {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), keyfuncs.PeerIP, opts...)
}

// Rules returns middleware that limits requests by the rules in force in
// e (see package rules), which can be reloaded while it runs: every rule
// that matches a request applies, with its own key. A request that no
// rule matches passes without rate-limit headers. Otherwise it behaves as
// the middleware of New, with the same options; a descriptor key function's
// failure goes to the error handler.
//
// The route of descriptor key "route" is the http.ServeMux pattern when
// the middleware wraps a handler registered on a mux; Chi users get the
// Chi route pattern from ratekitchi.Rules. Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) func(http.Handler) http.Handler {
	if e == nil {
		panic("stdhttp: Rules needs an engine")
	}
	cfg := newConfig(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.skip != nil && cfg.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			cost := 1
			if cfg.cost != nil {
				cost = cfg.cost(r)
			}
			var checks [8]core.Check
			var buf [8]answer.Field
			cs, err := e.Checks(rules.HTTPRequest(r), checks[:0])
			var v answer.Verdict
			fields := cfg.VerdictAll(r.Context(), &v, cs, err, cost, buf[:0])
			cfg.respond(w, r, next, &v, fields)
		})
	}
}

// respond sets the header fields of a verdict and carries it out.
func (cfg *config) respond(w http.ResponseWriter, r *http.Request, next http.Handler, v *answer.Verdict, fields []answer.Field) {
	h := w.Header()
	for _, f := range fields {
		h[f.Name] = f.Value
	}
	switch {
	case v.Pass():
		if answer.Hold(r.Context(), &v.Decision) != nil {
			return
		}
		if cfg.expose && v.Decision.Name != "" {
			d := v.Decision
			r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, &d))
		}
		next.ServeHTTP(w, r)
	case v.Rejected() && cfg.denied != nil:
		cfg.denied(w, r, v.Decision)
	case !v.Rejected() && cfg.onError != nil:
		cfg.onError(w, r, v.Err)
	default:
		WriteProblem(w, v)
	}
}

var (
	problemType = []string{answer.ProblemContentType}
	noStore     = []string{answer.ProblemCacheControl}
)

// WriteProblem writes the default answer to a request that is not passed
// on: the verdict's status and answer.Problem body, with Content-Type
// answer.ProblemContentType and Cache-Control no-store, replacing any such
// fields already set; other header fields, such as the rate-limit fields,
// are kept. Adapters to frameworks whose response is an
// http.ResponseWriter write their rejections with it, so that all of them
// answer alike.
func WriteProblem(w http.ResponseWriter, v *answer.Verdict) {
	h := w.Header()
	h["Content-Type"] = problemType
	h["Cache-Control"] = noStore
	w.WriteHeader(v.Status)
	_, _ = w.Write(answer.Problem(v))
}
