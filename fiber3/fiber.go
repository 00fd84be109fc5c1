// Package ratekitfiber3 is the Fiber v3 middleware of ratekit (Fiber v2
// users import github.com/ratekit/ratekit/fiber instead): Fiber's port to
// the request flow of package adapter, so it answers exactly as every
// other ratekit middleware does.
//
//	import ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
//
//	app.Use(ratekitfiber3.LimitByIP(100, time.Minute))
//
// [New] takes any *core.Limiter and a [Key], which says who is limited:
// [PeerIP], the TCP peer, is safe by default; behind a reverse proxy use
// [IP] with keyfuncs.TrustedProxies; [ClientIP] is Fiber's own c.IP(), for
// apps whose c.IP() no client can choose. Fiber reuses the memory of a
// request for the next one, so a [Key] must return a copy of what it reads
// (strings.Clone), as this package's do.
//
// The store is called with c.Context(), whose end also ends a shaping
// hold; the context's error then goes to the app's fiber.ErrorHandler.
// fasthttp does not end it when the client goes away: bound the hold with
// the limit's MaxDelay.
package ratekitfiber3

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/fastport"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Key returns the rate-limit key of a request, or an error: one wrapping
// keyfuncs.ErrMissing is answered 400, any other 500. The key must not
// share memory with the request (see the package doc).
type Key func(c fiber.Ctx) (string, error)

// New returns Fiber middleware that limits requests with lim, keyed by key
// (see adapter.Middleware.Limit). New panics if lim or key is nil.
func New(lim *core.Limiter, key Key, opts ...Option) fiber.Handler {
	if lim == nil || key == nil {
		panic("ratekitfiber3: New needs a limiter and a key function")
	}
	return adapter.New(port{}, opts...).Limit(lim, key)
}

// LimitByIP returns Fiber middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	app.Use(ratekitfiber3.LimitByIP(100, time.Minute))
//
// LimitByIP is shorthand for New(core.Must(core.NewLimiter(core.Limit{Rate:
// core.Rate{Count: count, Period: period}})), PeerIP, opts...); it panics
// if count or period is out of range, so use New for limits from
// configuration.
func LimitByIP(count int, period time.Duration, opts ...Option) fiber.Handler {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}

// Rules returns Fiber middleware that limits requests by the rules in
// force in e (see package rules and adapter.Middleware.Rules), which may
// be reloaded while it runs. The rules see copies of the request's
// strings. Descriptor key route is the method and Fiber route pattern
// ("GET /items/:id"), known only to middleware on the route itself
// (app.Get("/items/:id", ratekitfiber3.Rules(engine), h)); in app.Use and
// group middleware it is the path. The path is c.Path(), lower-cased
// unless fiber.Config.CaseSensitive is set, as Fiber compares paths: write
// the rules' paths in lower case. Key user finds the value of c.Locals,
// else of c.Context(); remote_address follows the engine's
// rules.WithClientIP, never Fiber's ProxyHeader. Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) fiber.Handler {
	if e == nil {
		panic("ratekitfiber3: Rules needs an engine")
	}
	return adapter.New(port{}, opts...).Rules(e)
}

// Concurrency returns Fiber middleware that lets at most lim.Max()
// requests of each key be in flight at once (see
// adapter.Middleware.Concurrency): an admitted request holds its slot
// until c.Next() returns, or panics. Put the rate limit first, so that a
// request over its rate never takes a slot. Concurrency panics if lim or
// key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) fiber.Handler {
	if lim == nil || key == nil {
		panic("ratekitfiber3: Concurrency needs a limiter and a key function")
	}
	return adapter.New(port{}, opts...).Concurrency(lim, key)
}

// An Option configures the middleware returned by New, LimitByIP, Rules
// or Concurrency; each sets the adapter.Config field of its name. An
// option given a nil function leaves the default in place.
type Option = adapter.Option[fiber.Ctx]

// WithSkipper exempts requests from the limit: see adapter.Config.Skip.
func WithSkipper(skip func(c fiber.Ctx) bool) Option { return adapter.WithSkipper(skip) }

// WithCost sets the cost of a request (default 1): see adapter.Config.Cost.
func WithCost(cost func(c fiber.Ctx) int) Option { return adapter.WithCost(cost) }

// WithDeniedHandler sets the answer to a rejected request (an error goes to
// the app's fiber.ErrorHandler): see adapter.Config.Denied.
func WithDeniedHandler(denied func(c fiber.Ctx, d core.Decision) error) Option {
	return adapter.WithDeniedHandler(denied)
}

// WithQueue queues rejected requests for later: see adapter.Config.Queue.
func WithQueue(offer *queue.Offer) Option { return adapter.WithQueue[fiber.Ctx](offer) }

// WithErrorHandler sets the answer to a key or cost failure (an error goes
// to the app's fiber.ErrorHandler): see adapter.Config.OnError.
func WithErrorHandler(onError func(c fiber.Ctx, err error) error) Option {
	return adapter.WithErrorHandler(onError)
}

// WithHeaders selects the header fields: see adapter.Config.Headers.
func WithHeaders(s answer.Style) Option { return adapter.WithHeaders[fiber.Ctx](s) }

// WithLogger sets the logger of failures: see adapter.Config.Logger.
func WithLogger(log *slog.Logger) Option { return adapter.WithLogger[fiber.Ctx](log) }

// WithDecisionInContext keeps decisions in c.Locals for DecisionFrom: see
// adapter.Config.DecisionInContext.
func WithDecisionInContext() Option { return adapter.WithDecisionInContext[fiber.Ctx]() }

// DecisionFrom returns the decision that the middleware took for the
// request of c, when it runs WithDecisionInContext and passed the request
// on; under several such middlewares, the one that ran last.
func DecisionFrom(c fiber.Ctx) (core.Decision, bool) { return fastport.Decision(c) }

// port is Fiber's adapter.Port: package fastport's, over framework, with
// a Request of its own.
type port struct {
	fastport.Port[fiber.Ctx, framework[fiber.Ctx], *fasthttp.RequestHeader]
}

// Request returns the rules.Request of c: for Fiber's own context, a
// pointer, one that converts to rules.Request without allocating (a
// fiber.Ctx, an interface, would be boxed on every request).
func (port) Request(c fiber.Ctx) rules.Request {
	if dc, ok := c.(*fiber.DefaultCtx); ok {
		return fastport.ViewOf[framework[*fiber.DefaultCtx]](dc)
	}
	return fastport.ViewOf[framework[fiber.Ctx]](c) // an app's custom context (fiber.NewWithCustomCtx)
}

// framework is what package fastport reads of a Fiber v3 request context
// C where Fiber v2 differs, or fasthttp keeps a field.
type framework[C fiber.Ctx] struct{}

func (framework[C]) Context(c C) context.Context          { return c.Context() }
func (framework[C]) Peer(c C) net.Addr                    { return c.RequestCtx().RemoteAddr() }
func (framework[C]) Header(c C) *fasthttp.RequestHeader   { return &c.Request().Header }
func (framework[C]) Response(c C) fastport.ResponseHeader { return &c.Response().Header }
func (framework[C]) Request(c C) fastport.Request         { return c.Request() }
func (framework[C]) PathOriginal(c C) []byte              { return c.Request().URI().PathOriginal() }
func (framework[C]) CaseSensitive(c C) bool               { return c.App().Config().CaseSensitive }
func (framework[C]) Route(c C) string                     { return routes.Pattern(c.Route()) }

// routes reads fiber.Route's unexported field use, which alone tells the
// routes of app.Use and groups from the routes proper (c.IsMiddleware() is
// true on a route's own middleware too).
var routes = fastport.NewRoutes[fiber.Route]()
