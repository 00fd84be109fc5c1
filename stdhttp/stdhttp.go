// Package stdhttp is the net/http middleware of ratekit. It works with
// http.ServeMux and with every router that takes func(http.Handler)
// http.Handler middleware, such as Chi.
//
// All policy lives in package core, and the request flow in package
// adapter; this package is the port of net/http to it:
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

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// An Option configures the middleware returned by New, LimitByIP, Rules or
// Concurrency. An option given a nil function leaves the default in place.
type Option = adapter.Option[call]

// WithSkipper exempts the requests for which skip returns true, such as
// health checks: see adapter.Config.Skip.
func WithSkipper(skip func(*http.Request) bool) Option {
	if skip == nil {
		return adapter.WithSkipper[call](nil)
	}
	return adapter.WithSkipper(func(x call) bool { return skip(x.r) })
}

// WithCost sets the cost of a request (default 1): see adapter.Config.Cost.
func WithCost(cost func(*http.Request) int) Option {
	if cost == nil {
		return adapter.WithCost[call](nil)
	}
	return adapter.WithCost(func(x call) int { return cost(x.r) })
}

// WithDeniedHandler sets the handler that writes the answer to a rejected
// request, whose rate-limit header fields and Retry-After are already set:
// see adapter.Config.Denied. It replaces WithQueue.
func WithDeniedHandler(denied func(w http.ResponseWriter, r *http.Request, d core.Decision)) Option {
	if denied == nil {
		return adapter.WithDeniedHandler[call](nil)
	}
	return adapter.WithDeniedHandler(func(x call, d core.Decision) error { denied(x.w, x.r, d); return nil })
}

// WithQueue answers rejected requests by queueing them for later (see
// package queue and adapter.Config.Queue). It replaces WithDeniedHandler.
func WithQueue(offer *queue.Offer) Option { return adapter.WithQueue[call](offer) }

// WithErrorHandler sets the handler of a failing key function, an empty
// key or a cost out of range: see adapter.Config.OnError.
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	if onError == nil {
		return adapter.WithErrorHandler[call](nil)
	}
	return adapter.WithErrorHandler(func(x call, err error) error { onError(x.w, x.r, err); return nil })
}

// WithHeaders selects the rate-limit header fields (default
// answer.XRateLimit; answer.IETF, answer.Both, answer.NoHeaders).
func WithHeaders(s answer.Style) Option { return adapter.WithHeaders[call](s) }

// WithLogger sets the logger of key-function, plan and cost failures,
// once per episode (default slog.Default()); store failures are the
// limiter's (core.WithLogger).
func WithLogger(log *slog.Logger) Option { return adapter.WithLogger[call](log) }

// WithDecisionInContext puts the decision of every request decided and
// passed on into the request's context, where the handler reads it with
// DecisionFrom. It costs two allocations per request (a context and a
// shallow copy of the request), so it is off by default.
func WithDecisionInContext() Option { return adapter.WithDecisionInContext[call]() }

// DecisionFrom returns the decision that the middleware took for the
// request whose context is ctx, when it runs WithDecisionInContext.
func DecisionFrom(ctx context.Context) (core.Decision, bool) {
	return adapter.DecisionFromContext(ctx)
}

// New returns middleware that limits requests with lim, keyed by key.
//
// For each request that is not skipped, it computes the key and cost,
// asks lim, and sets the headers of the decision. A rejected request is
// answered by the denied handler and not passed on. An admitted request is
// held for the delay of a shaping leaky bucket and then passed on; if its
// context ends first (the client went away), it is dropped without a
// response. When the store fails open (the default), requests pass
// (core has already logged and observed the failure). See
// adapter.Middleware.Limit.
//
// New panics if lim or key is nil.
func New(lim *core.Limiter, key func(*http.Request) (string, error), opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("stdhttp: New needs a limiter and a key function")
	}
	return wrap(adapter.New(port{}, opts...).Limit(lim, func(x call) (string, error) { return key(x.r) }))
}

// LimitByIP returns middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	handler := stdhttp.LimitByIP(100, time.Minute)(mux)
//
// LimitByIP is shorthand for New(core.Must(core.NewLimiter(core.Limit{Rate:
// core.Rate{Count: count, Period: period}})), keyfuncs.PeerIP, opts...):
// the TCP peer, never a header a client could forge, IPv6 clients grouped
// by /64, in a memory store of its own, with the default algorithm. It
// panics, as core.Must does, if count or period is out of range: it is for
// limits written as constants; with limits from configuration use New.
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
	return wrap(adapter.New(port{}, opts...).Rules(e))
}

// Concurrency returns middleware that lets at most lim.Max() requests of
// each key be in flight at once (see package concurrency and
// adapter.Middleware.Concurrency): a request that finds its key full is
// answered 429 with Retry-After and the problem body naming lim, or by the
// denied handler; 503 when the store failed under
// concurrency.WithFailClosed. An admitted request holds its slot until
// the next handler returns, or panics. Of New's options, WithSkipper,
// WithDeniedHandler, WithQueue, WithErrorHandler and WithLogger apply. Put
// the rate limit first, so that a request over its rate never takes a
// slot. Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key func(*http.Request) (string, error), opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("stdhttp: Concurrency needs a limiter and a key function")
	}
	return wrap(adapter.New(port{}, opts...).Concurrency(lim, func(x call) (string, error) { return key(x.r) }))
}

// wrap turns a flow into net/http middleware.
func wrap(flow func(call) error) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = flow(call{w, r, next})
		})
	}
}

// A call is a request through the middleware: the port's request type.
type call struct {
	w    http.ResponseWriter
	r    *http.Request
	next http.Handler
}

// port is net/http's adapter.Port.
type port struct{}

func (port) Context(x call) context.Context         { return x.r.Context() }
func (port) Request(x call) rules.Request           { return rules.HTTPRequest(x.r) }
func (port) Next(x call) error                      { x.next.ServeHTTP(x.w, x.r); return nil }
func (port) Stop(call, error) error                 { return nil } // a context that ended: nobody listens
func (port) Header(x call, name string, v []string) { adapter.SetField(x.w.Header(), name, v) }
func (port) HeaderMap(x call) http.Header           { return x.w.Header() }

func (port) Keep(x call, d core.Decision) call {
	x.r = x.r.WithContext(adapter.ContextWithDecision(x.r.Context(), d))
	return x
}

func (port) Write(x call, status int, body []byte) error { return adapter.WriteBody(x.w, status, body) }

func (port) Offer(x call, o *queue.Offer, d core.Decision) queue.Reply { return o.ReplyTo(x.r, d) }
