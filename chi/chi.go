// Package ratekitchi is the Chi (v5) middleware of ratekit.
//
// Chi middleware is net/http middleware, so this package is a thin layer
// over package stdhttp: New is stdhttp.New, Rules is stdhttp.Rules, Key
// is keyfuncs.Func and the options are stdhttp's, so every key function
// of package keyfuncs works as it is. What it adds is what is
// Chi-specific: keys from Chi's route pattern (Route) and from Chi's
// client-IP middleware (ClientIP), and the replacement for
// middleware.RealIP (TrustedIP).
//
//	import ratekitchi "github.com/ratekit/ratekit/chi"
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP))
//
// A route group with its own, stricter limit (and its own counters) is one
// more limiter mounted on the group, with r.With, or with Use inside
// r.Group or r.Route:
//
//	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
//	r.With(ratekitchi.New(login, ratekitchi.PeerIP)).Post("/api/login", handleLogin)
//
// A request that passes both counts in both: the global limit still sees
// it, and the header fields the group's limiter sets replace the global
// one's, so they describe the stricter limit. A request the global limiter
// rejects never reaches the group's and does not use its counter.
//
// Without a reverse proxy, PeerIP (the TCP peer, no header read) is the
// safe key. Behind proxies, use TrustedIP with their addresses, or
// ClientIP after Chi's middleware.ClientIPFromXFF; never a key after
// middleware.RealIP, which lets every client choose its own address.
//
// A request answered by the middleware gets the same status, rate-limit
// headers and problem-details body as from stdhttp (package answer writes
// them for both): 429 when a limit rejects it, 503 when the store failed
// under core.WithFailClosed, 400 when the key is missing (an error wrapping
// keyfuncs.ErrMissing), 500 for other key errors. The bodies of 400 and
// 500 are fixed words; the key function's error goes to the logger
// (WithLogger), never to the client.
//
// The handler can read the decision that the middleware took with
// DecisionFrom, when the middleware runs WithDecisionInContext:
//
//	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP, ratekitchi.WithDecisionInContext()))
//	r.Get("/quota", func(w http.ResponseWriter, r *http.Request) {
//		d, _ := ratekitchi.DecisionFrom(r.Context())
//		fmt.Fprintf(w, "%d of %d left\n", d.Remaining, d.Quota)
//	})
package ratekitchi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// A Key returns the rate-limit key of a request, or an error wrapping
// keyfuncs.ErrMissing (400) when the request lacks what the key needs. It
// is keyfuncs.Func: Chi hands middleware the *http.Request, so every key
// function of package keyfuncs, and any of your own, is a Key.
type Key = keyfuncs.Func

// An Option configures the middleware returned by New or Rules. It is
// stdhttp.Option: options of either package may be passed to New and
// Rules.
type Option = stdhttp.Option

// WithSkipper exempts the requests for which skip returns true, such as
// health checks: they are passed on without being counted and get no
// rate-limit headers. It is stdhttp.WithSkipper.
func WithSkipper(skip func(*http.Request) bool) Option { return stdhttp.WithSkipper(skip) }

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1. A cost of 0 reports the state without counting;
// a negative cost, or one above the capacity of a limit, goes to the error
// handler. It is stdhttp.WithCost.
func WithCost(cost func(*http.Request) int) Option { return stdhttp.WithCost(cost) }

// WithDeniedHandler sets the handler that answers a rejected request (429,
// or 503 under core.WithFailClosed, whose decision has Quota 0) instead of the
// default problem-details body. The rate-limit headers and Retry-After are
// already set when it runs. It is stdhttp.WithDeniedHandler.
func WithDeniedHandler(denied func(w http.ResponseWriter, r *http.Request, d core.Decision)) Option {
	return stdhttp.WithDeniedHandler(denied)
}

// WithErrorHandler sets the handler for errors that are not decisions: an
// error of the key function, an empty key, or a cost out of range. The
// default answers 400 for errors wrapping keyfuncs.ErrMissing and 500
// otherwise, with a problem-details body in fixed words and no rate-limit
// headers; the error goes to the logger (WithLogger). It is
// stdhttp.WithErrorHandler.
func WithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return stdhttp.WithErrorHandler(onError)
}

// WithHeaders selects the rate-limit header fields of responses: the
// default answer.XRateLimit, answer.IETF (draft-ietf-httpapi-ratelimit-headers),
// answer.Both or answer.NoHeaders. It is stdhttp.WithHeaders.
func WithHeaders(s answer.Style) Option { return stdhttp.WithHeaders(s) }

// WithLogger sets the logger of key-function and cost errors, logged once
// per episode: the first error, then the count of failed requests when
// requests are decided again (default slog.Default()). Store failures are
// logged by the limiter (core.WithLogger). It is stdhttp.WithLogger.
func WithLogger(log *slog.Logger) Option { return stdhttp.WithLogger(log) }

// WithDecisionInContext puts the decision of every request that is
// decided into the request's context, where the handler reads it with
// DecisionFrom. It costs two allocations per request, so it is off by
// default. It is stdhttp.WithDecisionInContext.
func WithDecisionInContext() Option { return stdhttp.WithDecisionInContext() }

// DecisionFrom returns the decision that the middleware took for the
// request whose context is ctx, when it runs WithDecisionInContext; false
// when there is none (the option is off, the request was skipped, or no
// rule of a rules engine matched it). It is stdhttp.DecisionFrom.
func DecisionFrom(ctx context.Context) (core.Decision, bool) { return stdhttp.DecisionFrom(ctx) }

// New returns Chi middleware that limits requests with lim, keyed by key.
// Pass it to r.Use for every route of a router, to r.With for one route,
// or to Use inside r.Group or r.Route for a group of routes.
//
// An admitted request gets the rate-limit headers of the middleware's
// header style (WithHeaders) and is passed on, after the delay of a shaping leaky bucket (if
// the client goes away first, it is dropped without a response). A
// rejected one gets the headers, Retry-After and a problem-details body
// and is not passed on. Each limiter has its own counters: a group
// limiter and a global one count separately.
//
// The key function runs when the middleware runs, so it sees the request
// as the middleware before it left it (see Route and TrustedIP).
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil, a programming error found at start-up.
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
// The client IP is PeerIP: the TCP peer, never a header a client
// could forge, with IPv6 clients grouped by /64. The limit counts with the
// default algorithm, the sliding window counter, in a memory store of its
// own; opts are New's. It is New with a limiter of that limit and
// PeerIP, and answers alike (429 with Retry-After and the rate-limit
// header fields once a client's budget is spent).
//
// LimitByIP panics, as core.Must does, if count or period is out of range
// (count from 0 to core.MaxCount, period from 1ns to core.MaxPeriod): it is
// for limits written as constants. With limits from flags or
// configuration, or for another key, algorithm or store, build the
// limiter with core.NewLimiter, which returns the error, and use New.
func LimitByIP(count int, period time.Duration, opts ...Option) func(http.Handler) http.Handler {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}
