// Package ratekitecho is the Echo (v4) middleware of ratekit, Echo's port
// to package adapter, which holds the request flow and the full
// documentation of every option:
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	e.Use(ratekitecho.New(lim, ratekitecho.PeerIP))
//
// Choose the key with care: Echo's c.RealIP() believes any client's
// X-Forwarded-For unless e.IPExtractor is set. [PeerIP], the TCP peer, is
// the safe default; behind reverse proxies use [IP] with
// keyfuncs.TrustedProxies (see [ClientIP] for Echo's own resolution).
package ratekitecho

import (
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/echoport"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Key returns the rate-limit key of a request, or an error: one wrapping
// keyfuncs.ErrMissing is answered 400, any other 500.
type Key func(c echo.Context) (string, error)

// New returns Echo middleware that limits requests with lim, keyed by key:
// NewWithConfig of the Config that opts build. It panics if either is nil.
func New(lim *core.Limiter, key Key, opts ...Option) echo.MiddlewareFunc {
	if lim == nil || key == nil {
		panic("ratekitecho: New needs a limiter and a key function")
	}
	return NewWithConfig(build(Config{Limiter: lim, Key: key}, opts))
}

// LimitByIP lets each client IP make count requests per period, as in
// e.Use(ratekitecho.LimitByIP(100, time.Minute)). It is shorthand for
// New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count,
// Period: period}})), PeerIP, opts...), and panics as core.Must does.
func LimitByIP(count int, period time.Duration, opts ...Option) echo.MiddlewareFunc {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}

// NewWithConfig returns Echo middleware that limits requests by cfg (see
// adapter.Middleware.Limit); a context that ends in a shaping hold returns
// its error to e.HTTPErrorHandler. It panics if cfg.Limiter is nil.
func NewWithConfig(cfg Config) echo.MiddlewareFunc {
	if cfg.Limiter == nil {
		panic("ratekitecho: NewWithConfig needs a limiter")
	}
	if cfg.Key == nil {
		cfg.Key = PeerIP
	}
	return mount(cfg.kit().Limit(cfg.Limiter, cfg.Key.of)).handler
}

// Rules returns Echo middleware that limits requests by the rules in force
// in e (see package rules and adapter.Middleware.Rules), with New's
// options. A rule's route is c.Path(), set before the middleware of e.Use,
// a group or a route runs (not e.Pre's); rules.Request.Value reads c.Get
// for a string key, else the request's context. Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) echo.MiddlewareFunc {
	if e == nil {
		panic("ratekitecho: Rules needs an engine")
	}
	return mount(build(Config{}, opts).kit().Rules(e)).handler
}

// Concurrency returns Echo middleware that lets at most lim.Max() requests
// of each key be in flight at once: see adapter.Middleware.Concurrency. Put
// the rate limit first, so that a request over its rate takes no slot. It
// panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) echo.MiddlewareFunc {
	if lim == nil || key == nil {
		panic("ratekitecho: Concurrency needs a limiter and a key function")
	}
	return mount(build(Config{}, opts).kit().Concurrency(lim, key.of)).handler
}

// Config configures NewWithConfig in the style of Echo's own middleware;
// its fields but Limiter and Key are adapter.Config's (New, Rules and
// Concurrency build it from options). A handler's error goes to e.HTTPErrorHandler.
type Config struct {
	// Skipper exempts requests: adapter.Config.Skip.
	Skipper middleware.Skipper
	// Limiter decides the requests of NewWithConfig. Required.
	Limiter *core.Limiter
	// Key is the rate-limit key of NewWithConfig (PeerIP when nil).
	Key Key
	// Cost is the cost of a request: adapter.Config.Cost.
	Cost func(c echo.Context) int
	// DeniedHandler answers rejected requests: adapter.Config.Denied.
	DeniedHandler func(c echo.Context, d core.Decision) error
	// Queue queues rejected requests, in DeniedHandler's place: adapter.Config.Queue.
	Queue *queue.Offer
	// ErrorHandler answers key and cost failures: adapter.Config.OnError.
	ErrorHandler func(c echo.Context, err error) error
	// Headers selects the rate-limit header fields: adapter.Config.Headers.
	Headers answer.Style
	// Logger logs key, plan and cost failures: adapter.Config.Logger.
	Logger *slog.Logger
	// DecisionInContext keeps decisions for DecisionFrom: adapter.Config.DecisionInContext.
	DecisionInContext bool
}

// An Option sets the Config field of its name for New, LimitByIP, Rules or
// Concurrency; an option given nil leaves the default in place.
type Option func(*Config)

func build(cfg Config, opts []Option) Config {
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// WithSkipper sets Config.Skipper: see adapter.Config.Skip.
func WithSkipper(skip middleware.Skipper) Option { return func(c *Config) { c.Skipper = skip } }

// WithCost sets Config.Cost: see adapter.Config.Cost.
func WithCost(cost func(c echo.Context) int) Option { return func(c *Config) { c.Cost = cost } }

// WithDeniedHandler sets Config.DeniedHandler (adapter.Config.Denied), replacing WithQueue.
func WithDeniedHandler(denied func(c echo.Context, d core.Decision) error) Option {
	return func(c *Config) { c.DeniedHandler, c.Queue = denied, nil }
}

// WithQueue sets Config.Queue (adapter.Config.Queue), replacing WithDeniedHandler.
func WithQueue(offer *queue.Offer) Option {
	return func(c *Config) { c.DeniedHandler, c.Queue = nil, offer }
}

// WithErrorHandler sets Config.ErrorHandler: see adapter.Config.OnError.
func WithErrorHandler(onError func(c echo.Context, err error) error) Option {
	return func(c *Config) { c.ErrorHandler = onError }
}

// WithHeaders sets Config.Headers: see adapter.Config.Headers.
func WithHeaders(s answer.Style) Option { return func(c *Config) { c.Headers = s } }

// WithLogger sets Config.Logger: see adapter.Config.Logger.
func WithLogger(log *slog.Logger) Option { return func(c *Config) { c.Logger = log } }

// WithDecisionInContext sets Config.DecisionInContext: adapter.Config.DecisionInContext.
func WithDecisionInContext() Option { return func(c *Config) { c.DecisionInContext = true } }

const decisionKey = "github.com/ratekit/ratekit/echo.decision"

// DecisionFrom returns the decision that the middleware took for the
// request of c, when it runs with DecisionInContext and passed the request
// on; under several ratekit middlewares, that of the one that ran last.
func DecisionFrom(c echo.Context) (core.Decision, bool) { return port.Decision(c) }

// call is the port's request type: an Echo context and the next handler.
type call = echoport.Call[echo.Context]

// port is Echo's adapter.Port, in package echoport with Echo v5's.
var port = echoport.Port[echo.Context, *echo.Response]{DecisionKey: decisionKey}

func (k Key) of(x call) (string, error) { return k(x.C) }

// mount returns the chains of a flow, whose handler method is its Echo
// middleware.
func mount(flow func(call) error) *chains {
	return &chains{serve: func(c echo.Context, next echo.HandlerFunc) error { return flow(call{C: c, Next: next}) }}
}

// kit returns the kit's middleware configured by cfg.
func (cfg Config) kit() *adapter.Middleware[call] {
	return port.Middleware(adapter.Config[echo.Context]{Skip: cfg.Skipper, Cost: cfg.Cost, Denied: cfg.DeniedHandler,
		OnError: cfg.ErrorHandler, Queue: cfg.Queue, Headers: cfg.Headers, Logger: cfg.Logger, DecisionInContext: cfg.DecisionInContext})
}
