// Package ratekitecho is the Echo (v4) middleware of ratekit. All policy
// lives in package core and the answer in package answer; this package
// only translates an echo.Context into a key and a cost, and the verdict
// of an [answer.Responder] into a response, so it answers exactly as the
// net/http middleware (package stdhttp) does.
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
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// A Key returns the rate-limit key of a request: a non-empty key, or an
// error (wrapping keyfuncs.ErrMissing when the request lacks the value the
// key is made of, which is answered 400).
type Key func(c echo.Context) (string, error)

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

// LimitByIP returns Echo middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	e.Use(ratekitecho.LimitByIP(100, time.Minute))
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
func LimitByIP(count int, period time.Duration, opts ...Option) echo.MiddlewareFunc {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
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
// When the store fails open (the default), requests pass (core has
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
	return newHandler(cfg, nil).middleware()
}

// handler is the middleware of NewWithConfig, or of Rules when engine is
// set: one on the heap, shared by every request.
type handler struct {
	answer.Responder
	cfg    Config
	engine *rules.Engine
	chains chains
}

func newHandler(cfg Config, e *rules.Engine) *handler {
	h := &handler{cfg: cfg, engine: e}
	h.Headers, h.Logger = cfg.Headers, cfg.Logger
	h.chains.serve = h.serve
	if e != nil {
		h.chains.serve = h.serveRules
	}
	return h
}

func (h *handler) middleware() echo.MiddlewareFunc {
	// Echo calls this for every request (it applies middleware while
	// serving): chains returns the handler kept for a route's handler.
	return func(next echo.HandlerFunc) echo.HandlerFunc { return h.chains.handler(next) }
}

// serve limits one request by the limiter and key of the Config.
func (h *handler) serve(c echo.Context, next echo.HandlerFunc) error {
	if h.cfg.Skipper != nil && h.cfg.Skipper(c) {
		return next(c)
	}
	k, err := h.cfg.Key(c)
	cost := 1
	if h.cfg.Cost != nil && err == nil {
		cost = h.cfg.Cost(c)
	}
	var buf [8]answer.Field
	var v answer.Verdict
	fields := h.Verdict(c.Request().Context(), &v, h.cfg.Limiter, k, err, cost, buf[:0])
	return h.respond(c, next, &v, fields)
}

// respond sets the header fields of a verdict and carries it out.
func (h *handler) respond(c echo.Context, next echo.HandlerFunc, v *answer.Verdict, fields []answer.Field) error {
	res := c.Response()
	header := res.Header()
	for _, f := range fields {
		header[f.Name] = f.Value
	}
	switch {
	case v.Pass():
		if v.Decision.Delay > 0 { // a shaping leaky bucket's slot
			if err := answer.Hold(c.Request().Context(), &v.Decision); err != nil {
				return err
			}
		}
		if h.cfg.DecisionInContext && v.Decision.Name != "" {
			d := v.Decision
			c.Set(decisionKey, &d)
		}
		return next(c)
	case v.Rejected() && h.cfg.DeniedHandler != nil:
		return h.cfg.DeniedHandler(c, v.Decision)
	case !v.Rejected() && h.cfg.ErrorHandler != nil:
		return h.cfg.ErrorHandler(c, v.Err)
	}
	stdhttp.WriteProblem(res, v) // *echo.Response is an http.ResponseWriter
	return nil
}
