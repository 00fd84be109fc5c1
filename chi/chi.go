// Package ratekitchi is the Chi (v5) middleware of ratekit. Chi
// middleware is net/http middleware, so this package is package stdhttp
// under Chi's names: Key is keyfuncs.Func, Option is stdhttp.Option, and
// it answers exactly as stdhttp does. What it adds is Chi's own: keys of
// Chi's route pattern ([Route]) and of Chi's ClientIPFrom* middlewares
// ([ClientIP]).
//
//	import ratekitchi "github.com/ratekit/ratekit/chi"
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP))
//
// A route group with its own, stricter limit is one more limiter with its
// own counters, mounted with r.With or with Use inside r.Group:
//
//	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
//	r.With(ratekitchi.New(login, ratekitchi.PeerIP)).Post("/api/login", handleLogin)
//
// A request that passes both counts in both, and carries the header
// fields of the limiter that ran last (the group's).
//
// The key says who is limited. [PeerIP], the TCP peer, is safe by
// default; behind a reverse proxy use [IP] with keyfuncs.TrustedProxies,
// or [ClientIP] after Chi's middleware.ClientIPFromXFF with your proxies.
// Never key after Chi's middleware.RealIP (deprecated since Chi v5.3),
// which rewrites r.RemoteAddr from headers any client can send: every
// client-IP key refuses such a request (500, and a log line that says
// so) rather than count it by a forged address. Drop RealIP, or mount
// ratekit's middleware before it.
//
// The request flow, and the full documentation of every option, is
// package adapter's; this package is Chi's names for stdhttp's port.
package ratekitchi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// A Key returns the rate-limit key of a request, or an error wrapping
// keyfuncs.ErrMissing (400) when the request lacks what the key needs. It
// is keyfuncs.Func, so every key function of package keyfuncs is a Key.
type Key = keyfuncs.Func

// New returns Chi middleware that limits requests with lim, keyed by key:
// stdhttp.New (see adapter.Middleware.Limit). Pass it to r.Use for every
// route, to r.With for one, or to Use inside r.Group for a group. The key
// function sees the request as the middleware before it left it.
//
// New panics if lim or key is nil.
func New(lim *core.Limiter, key Key, opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("ratekitchi: New needs a limiter and a key function")
	}
	return stdhttp.New(lim, key, opts...)
}

// LimitByIP returns Chi middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	r.Use(ratekitchi.LimitByIP(100, time.Minute))
//
// LimitByIP is shorthand for New(core.Must(core.NewLimiter(core.Limit{Rate:
// core.Rate{Count: count, Period: period}})), PeerIP, opts...); it panics
// if count or period is out of range, so use New for limits from
// configuration.
func LimitByIP(count int, period time.Duration, opts ...Option) func(http.Handler) http.Handler {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}

// Rules returns Chi middleware that limits requests by the rules in force
// in e (see package rules and adapter.Middleware.Rules), which may be
// reloaded while it runs: stdhttp.Rules. It takes New's options.
//
// Descriptor key route is the method and Chi route pattern ("GET
// /items/{id}"), which Chi sets in r.Pattern once it has matched a route:
// mount the middleware with r.With or inside r.Group. On the router's
// r.Use nothing is routed yet, and the route is the cleaned path, one
// counter per path; inside r.Route or a mounted sub-router, r.Use sees the
// mount's pattern ("/api/*"). Key user reads the request context, as the
// app's middleware stored it with context.WithValue.
//
// Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) func(http.Handler) http.Handler {
	if e == nil {
		panic("ratekitchi: Rules needs an engine")
	}
	return stdhttp.Rules(e, opts...)
}

// Concurrency returns Chi middleware that lets at most lim.Max() requests
// of each key be in flight at once (see package concurrency and
// adapter.Middleware.Concurrency): stdhttp.Concurrency. An admitted
// request holds its slot until the next handler returns, or panics. Put
// the rate limit first, so that a request over its rate never takes a
// slot:
//
//	r.With(ratekitchi.New(rate, ratekitchi.PeerIP), ratekitchi.Concurrency(inflight, ratekitchi.PeerIP)).Post("/reports", report)
//
// Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("ratekitchi: Concurrency needs a limiter and a key function")
	}
	return stdhttp.Concurrency(lim, key, opts...)
}

// An Option configures the middleware returned by New, LimitByIP, Rules
// or Concurrency; each sets the adapter.Config field of its name. It is
// stdhttp.Option, so the options of either package may be passed.
type Option = stdhttp.Option

// WithSkipper exempts the requests for which skip returns true: see
// adapter.Config.Skip.
func WithSkipper(skip func(*http.Request) bool) Option { return stdhttp.WithSkipper(skip) }

// WithCost sets the cost of a request (default 1): see adapter.Config.Cost.
func WithCost(cost func(*http.Request) int) Option { return stdhttp.WithCost(cost) }

// WithDeniedHandler sets the handler that writes the answer to a rejected
// request, whose rate-limit header fields are set: see
// adapter.Config.Denied. It replaces WithQueue.
func WithDeniedHandler(denied func(w http.ResponseWriter, r *http.Request, d core.Decision)) Option {
	return stdhttp.WithDeniedHandler(denied)
}

// WithQueue answers rejected requests by queueing them for later: see
// adapter.Config.Queue. It replaces WithDeniedHandler.
func WithQueue(offer *queue.Offer) Option { return stdhttp.WithQueue(offer) }

// WithErrorHandler sets the handler of a failing key function, an empty
// key or a cost out of range: see adapter.Config.OnError.
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return stdhttp.WithErrorHandler(onError)
}

// WithHeaders selects the rate-limit header fields: see
// adapter.Config.Headers.
func WithHeaders(s answer.Style) Option { return stdhttp.WithHeaders(s) }

// WithLogger sets the logger of key, plan and cost failures: see
// adapter.Config.Logger.
func WithLogger(log *slog.Logger) Option { return stdhttp.WithLogger(log) }

// WithDecisionInContext puts the decision of every request decided and
// passed on into the request's context, where DecisionFrom reads it: see
// adapter.Config.DecisionInContext. It costs two allocations per request.
func WithDecisionInContext() Option { return stdhttp.WithDecisionInContext() }

// DecisionFrom returns the decision that the middleware took for the
// request whose context is ctx, when it runs WithDecisionInContext and
// passed the request on (under Rules, a request that no rule matches has
// none): stdhttp.DecisionFrom. Under several ratekit middlewares that
// store it, it is the decision of the one that ran last.
func DecisionFrom(ctx context.Context) (core.Decision, bool) { return stdhttp.DecisionFrom(ctx) }
