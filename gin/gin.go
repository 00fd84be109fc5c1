// Package ratekitgin is the Gin middleware of ratekit. All policy lives in
// package core and the answer in package answer; this package only
// translates a *gin.Context into a key and a cost, and the verdict of an
// [answer.Responder] into a response, so it answers exactly as the
// net/http middleware (package stdhttp) does.
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
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/stdhttp"
)

// A Key returns the rate-limit key of a request: a non-empty key, or an
// error (wrapping keyfuncs.ErrMissing when the request lacks the value the
// key is made of, which is answered 400 Bad Request; any other error is
// answered 500).
type Key func(c *gin.Context) (string, error)

// New returns Gin middleware that limits requests with lim, keyed by key.
//
// For each request that is not skipped, it computes the key and cost,
// asks lim (with the context of c.Request), and sets the headers of the
// decision. A rejected request is aborted (c.Abort) and answered by the
// denied handler. An admitted request is held for the delay of a shaping
// leaky bucket and then passed on with c.Next(); if the request's context
// ends first (the client went away), it is aborted without a response and
// the context's error is recorded with c.Error. When the store fails and the
// limiter fails open (the default), requests pass (core has already logged and observed the
// failure).
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil: that is a programming error, as for
// regexp.MustCompile.
func New(lim *core.Limiter, key Key, opts ...Option) gin.HandlerFunc {
	if lim == nil || key == nil {
		panic("ratekitgin: New needs a limiter and a key function")
	}
	cfg := newConfig(opts)
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
		var buf [8]answer.Field
		var v answer.Verdict
		fields := cfg.Verdict(c.Request.Context(), &v, lim, k, err, cost, buf[:0])
		cfg.respond(c, &v, fields)
	}
}

// LimitByIP returns Gin middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	r.Use(ratekitgin.LimitByIP(100, time.Minute))
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
func LimitByIP(count int, period time.Duration, opts ...Option) gin.HandlerFunc {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}

// respond sets the header fields of a verdict and carries it out: the
// part of the middleware that New and Rules share.
func (cfg *config) respond(c *gin.Context, v *answer.Verdict, fields []answer.Field) {
	h := c.Writer.Header()
	for _, f := range fields {
		h[f.Name] = f.Value
	}
	if v.Pass() {
		if err := answer.Hold(c.Request.Context(), &v.Decision); err != nil {
			c.Abort()
			_ = c.Error(err)
			return
		}
		if cfg.expose && v.Decision.Name != "" {
			d := v.Decision
			c.Set(decisionKey, &d)
		}
		c.Next()
		return
	}
	c.Abort()
	switch {
	case v.Rejected() && cfg.denied != nil:
		cfg.denied(c, v.Decision)
	case !v.Rejected() && cfg.onError != nil:
		cfg.onError(c, v.Err)
	default:
		stdhttp.WriteProblem(c.Writer, v)
	}
}
