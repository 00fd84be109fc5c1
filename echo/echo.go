// Package ratekitecho is the Echo (v4) middleware of ratekit. All policy
// lives in package core; this package only translates an echo.Context into
// a call of [core.Limiter.Verdict] and the verdict into a response, so it
// answers exactly as the net/http middleware (package stdhttp) does.
//
//	import ratekitecho "github.com/ratekit/ratekit/echo"
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	e.Use(ratekitecho.New(lim, ratekitecho.PeerIP))
//
// A route group with its own, stricter limit and algorithm is one more
// limiter with its own counters:
//
//	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
//	e.Group("/api/login", ratekitecho.New(login, ratekitecho.PeerIP))
//
// The same middleware in the configuration style of Echo's own middleware:
//
//	e.Use(ratekitecho.NewWithConfig(ratekitecho.Config{
//		Skipper: func(c echo.Context) bool { return c.Path() == "/health" },
//		Limiter: lim,
//		Key:     ratekitecho.PeerIP,
//	}))
//
// Choose the key with care: Echo's c.RealIP() believes any client's
// X-Forwarded-For unless e.IPExtractor is set, which is how Echo's own
// RateLimiter came to be bypassed. [PeerIP], the TCP peer, is the safe
// default; behind reverse proxies use [IP] with keyfuncs.TrustedProxies
// (see [RealIP] for Echo's own resolution).
//
// [Rules] decides instead by the rules of a rules.Engine, reloadable while
// the server runs, each with its own limit and key:
//
//	e.Use(ratekitecho.Rules(engine))
package ratekitecho

import (
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/stdhttp"
)

// A Key returns the rate-limit key of a request: a non-empty key, or an
// error (wrapping keyfuncs.ErrMissing when the request lacks the value the
// key is made of, which is answered 400).
type Key func(c echo.Context) (string, error)

// Config configures the middleware returned by NewWithConfig, in the style
// of the configurations of Echo's own middleware. Only Limiter is
// required; New with options builds the same Config.
type Config struct {
	// Skipper exempts the requests for which it returns true, such as
	// health checks: they are passed on without being counted and get no
	// rate-limit headers. Default: none is skipped.
	Skipper middleware.Skipper

	// Limiter decides the requests: limits, algorithm, store, fail mode
	// and header style are its options (see package core). Required.
	Limiter *core.Limiter

	// Key returns the rate-limit key of a request. Default: PeerIP.
	Key Key

	// Cost returns the cost of a request, how many units of the limit it
	// takes. Default: 1. A cost of 0 reports the state without counting;
	// a negative cost, or one above a limit's capacity, goes to
	// ErrorHandler.
	Cost func(c echo.Context) int

	// DeniedHandler answers a rejected request instead of the default
	// problem-details body; the rate-limit headers and Retry-After are
	// already set. It also answers requests rejected because the store
	// failed under core.FailClosed (their decision has Limit 0). An error
	// it returns goes to e.HTTPErrorHandler (return an *echo.HTTPError
	// with status 429 to answer in the app's usual error format).
	DeniedHandler func(c echo.Context, d core.Decision) error

	// ErrorHandler answers errors that are not decisions: an error of the
	// key function, an empty key, a cost out of range. No rate-limit
	// headers are set. An error it returns goes to e.HTTPErrorHandler.
	// Default: the problem-details body of core.Rejection, 400 when the
	// error wraps core.ErrMissingKey and 500 otherwise, written directly.
	ErrorHandler func(c echo.Context, err error) error
}

// An Option configures the middleware returned by New or Rules, by setting
// a field of its Config.
type Option func(*Config)

// WithSkipper exempts the requests for which skip returns true, such as
// health checks (see Config.Skipper). It takes Echo's middleware.Skipper,
// so middleware.DefaultSkipper and the app's existing skippers fit.
func WithSkipper(skip middleware.Skipper) Option { return func(c *Config) { c.Skipper = skip } }

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1 (see Config.Cost).
func WithCost(cost func(c echo.Context) int) Option { return func(c *Config) { c.Cost = cost } }

// WithDeniedHandler sets the handler that answers a rejected request
// instead of the default problem-details body (see Config.DeniedHandler).
// An error it returns goes to e.HTTPErrorHandler.
func WithDeniedHandler(denied func(c echo.Context, d core.Decision) error) Option {
	return func(c *Config) { c.DeniedHandler = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions (see
// Config.ErrorHandler). To answer them with e.HTTPErrorHandler instead of
// the default problem-details body, return the error (or an
// *echo.HTTPError wrapping it).
func WithErrorHandler(onError func(c echo.Context, err error) error) Option {
	return func(c *Config) { c.ErrorHandler = onError }
}

// New returns Echo middleware that limits requests with lim, keyed by key.
// It is NewWithConfig with the Config that opts build.
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil: that is a programming error, as for
// regexp.MustCompile.
func New(lim *core.Limiter, key Key, opts ...Option) echo.MiddlewareFunc {
	if lim == nil || key == nil {
		panic("ratekitecho: New needs a limiter and a key function")
	}
	cfg := Config{Limiter: lim, Key: key}
	for _, o := range opts {
		o(&cfg)
	}
	return NewWithConfig(cfg)
}

// NewWithConfig returns Echo middleware configured by cfg.
//
// For each request that is not skipped, it computes the key and cost, asks
// the limiter, and sets the headers of the decision. A rejected request is
// answered by the denied handler and not passed on. An admitted request is
// held for the delay of a shaping leaky bucket and then passed on. If the
// request's context ends while it is held (the client went away, or a
// deadline such as that of middleware.ContextTimeout passed), it is not
// passed on and the context's error is returned to e.HTTPErrorHandler.
// When the store fails under core.FailOpen, requests pass (core has
// already logged and observed the failure).
//
// NewWithConfig panics if cfg.Limiter is nil.
func NewWithConfig(cfg Config) echo.MiddlewareFunc {
	if cfg.Limiter == nil {
		panic("ratekitecho: NewWithConfig needs a limiter")
	}
	if cfg.Key == nil {
		cfg.Key = PeerIP
	}
	m := &cfg // one copy on the heap, shared by every request
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		// Echo calls this for every request (it applies middleware while
		// serving), so the closure holds as little as it can: one small
		// allocation, which Echo forces on every middleware.
		return func(c echo.Context) error { return m.serve(c, next) }
	}
}

// serve limits one request.
func (m *Config) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.Skipper != nil && m.Skipper(c) {
		return next(c)
	}
	k, err := m.Key(c)
	cost := 1
	if m.Cost != nil && err == nil {
		cost = m.Cost(c)
	}
	var buf [8]core.Header
	v, fields := m.Limiter.Verdict(c.Request().Context(), k, err, cost, buf[:0])
	return m.respond(c, next, v, fields)
}

// respond sets the header fields of a verdict and carries it out: the
// part of the middleware that NewWithConfig and Rules share.
func (m *Config) respond(c echo.Context, next echo.HandlerFunc, v core.Verdict, fields []core.Header) error {
	res := c.Response()
	h := res.Header()
	for _, f := range fields {
		h[f.Name] = f.Value
	}
	switch {
	case v.Pass():
		if err := core.Hold(c.Request().Context(), v.Decision); err != nil {
			return err
		}
		return next(c)
	case v.Rejected() && m.DeniedHandler != nil:
		return m.DeniedHandler(c, v.Decision)
	case !v.Rejected() && m.ErrorHandler != nil:
		return m.ErrorHandler(c, v.Err)
	}
	stdhttp.WriteRejection(res, v.Decision, v.Err)
	return nil
}
