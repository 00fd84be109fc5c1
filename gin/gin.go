// Package ratekitgin is the Gin middleware of ratekit. All policy lives in
// package core; this package only translates a *gin.Context into a call of
// [core.Limiter.Verdict] and the verdict into a response, so it answers
// exactly as the net/http middleware (package stdhttp) does.
//
//	import ratekitgin "github.com/ratekit/ratekit/gin"
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	r.Use(ratekitgin.New(lim, ratekitgin.PeerIP))
//
// A route group with its own, stricter limit and algorithm is one more
// limiter with its own counters:
//
//	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
//	r.Group("/api/login", ratekitgin.New(login, ratekitgin.PeerIP)).POST("", handleLogin)
//
// A request that passes both limits carries the headers of the limiter
// that ran last (the group's).
//
// The key says who is limited. [PeerIP], the TCP peer, is safe by
// default; behind a reverse proxy use [IP] with keyfuncs.TrustedProxies.
// [GinClientIP] uses Gin's own c.ClientIP(), which believes forwarding
// headers from every peer unless the engine's trusted proxies are set:
// read its documentation before using it. [Header], [User] and [Adapt]
// (any keyfuncs.Func) cover the rest.
//
// [Rules] decides instead by the rules of a rules.Engine, reloadable while
// the server runs, each with its own limit and key:
//
//	r.Use(ratekitgin.Rules(engine))
package ratekitgin

import (
	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/stdhttp"
)

// A Key returns the rate-limit key of a request: a non-empty key, or an
// error (wrapping keyfuncs.ErrMissing when the request lacks the value the
// key is made of, which is answered 400 Bad Request; any other error is
// answered 500).
type Key func(c *gin.Context) (string, error)

// An Option configures the middleware returned by New or Rules.
type Option func(*config)

type config struct {
	skip    func(*gin.Context) bool
	cost    func(*gin.Context) int
	denied  func(*gin.Context, core.Decision)
	onError func(*gin.Context, error)
}

// WithSkipper exempts the requests for which skip returns true, such as
// health checks: they are passed on with c.Next() without being counted and
// get no rate-limit headers.
func WithSkipper(skip func(c *gin.Context) bool) Option {
	return func(cfg *config) { cfg.skip = skip }
}

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1. A cost of 0 reports the state without counting.
// A negative cost, or one larger than the capacity of a limit, is a
// programming error and is passed to the error handler.
func WithCost(cost func(c *gin.Context) int) Option {
	return func(cfg *config) { cfg.cost = cost }
}

// WithDeniedHandler sets the handler that writes the response to a
// rejected request, instead of the default problem-details body. The
// rate-limit headers and Retry-After are already set, and the request is
// already aborted (c.Abort), so the handlers after this middleware do not
// run: the handler only writes, for example with c.JSON.
//
// It also answers requests rejected because the store failed under
// core.FailClosed; their decision has Limit 0.
func WithDeniedHandler(denied func(c *gin.Context, d core.Decision)) Option {
	return func(cfg *config) { cfg.denied = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions: an
// error of the key function, an empty key, or a cost out of range. The
// request is already aborted when it runs. The default answers with the
// problem-details body of core.Rejection: 400 Bad Request when the error
// wraps core.ErrMissingKey (a missing or empty key), 500 Internal Server
// Error otherwise. No rate-limit headers are set. A handler that wants
// Gin's error-reporting middleware to see the error records it with
// c.Error(err) besides writing a response.
func WithErrorHandler(onError func(c *gin.Context, err error)) Option {
	return func(cfg *config) { cfg.onError = onError }
}

// New returns Gin middleware that limits requests with lim, keyed by key.
//
// For each request that is not skipped, it computes the key and cost,
// asks lim (with the context of c.Request), and sets the headers of the
// decision. A rejected request is aborted (c.Abort) and answered by the
// denied handler. An admitted request is held for the delay of a shaping
// leaky bucket and then passed on with c.Next(); if the request's context
// ends first (the client went away), it is aborted without a response and
// the context's error is recorded with c.Error. When the store fails under
// core.FailOpen, requests pass (core has already logged and observed the
// failure).
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil: that is a programming error, as for
// regexp.MustCompile.
func New(lim *core.Limiter, key Key, opts ...Option) gin.HandlerFunc {
	if lim == nil || key == nil {
		panic("ratekitgin: New needs a limiter and a key function")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return func(c *gin.Context) {
		if cfg.skip != nil && cfg.skip(c) {
			c.Next()
			return
		}
		k, err := key(c)
		cost := 1
		if cfg.cost != nil && err == nil {
			cost = cfg.cost(c)
		}
		var buf [8]core.Header
		v, fields := lim.Verdict(c.Request.Context(), k, err, cost, buf[:0])
		cfg.respond(c, v, fields)
	}
}

// respond sets the header fields of a verdict and carries it out: the
// part of the middleware that New and Rules share.
func (cfg *config) respond(c *gin.Context, v core.Verdict, fields []core.Header) {
	h := c.Writer.Header()
	for _, f := range fields {
		h[f.Name] = f.Value
	}
	switch {
	case v.Pass():
		if err := core.Hold(c.Request.Context(), v.Decision); err != nil {
			c.Abort()
			_ = c.Error(err)
			return
		}
		c.Next()
	case v.Rejected() && cfg.denied != nil:
		c.Abort()
		cfg.denied(c, v.Decision)
	case !v.Rejected() && cfg.onError != nil:
		c.Abort()
		cfg.onError(c, v.Err)
	default:
		c.Abort()
		stdhttp.WriteRejection(c.Writer, v.Decision, v.Err)
	}
}
