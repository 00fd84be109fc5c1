// Package ratekitfiber is the Fiber v2 middleware of ratekit. All policy
// lives in package core and the answer in package answer; this package
// only translates a *fiber.Ctx into a key and a cost, and the verdict of
// an [answer.Responder] into a response, so it answers exactly as the
// net/http middleware (package stdhttp) does.
//
//	import ratekitfiber "github.com/ratekit/ratekit/fiber"
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	app.Use(ratekitfiber.New(lim, ratekitfiber.PeerIP))
//
// A route group with its own, stricter limit and algorithm is one more
// limiter with its own counters:
//
//	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
//	app.Group("/api/login", ratekitfiber.New(login, ratekitfiber.PeerIP))
//
// Pick the client-IP key with care. [PeerIP], the TCP peer, is the safe
// default: it reads no header. Behind reverse proxies, use [IP] with
// keyfuncs.TrustedProxies, which reads X-Forwarded-For only from those
// proxies and walks it from the right. [FiberIP] keys by c.IP(), which is
// safe only while fiber.Config.ProxyHeader is unset, or with
// EnableTrustedProxyCheck and TrustedProxies: ProxyHeader alone lets any
// client choose its bucket.
//
// Fiber reuses the memory of a request (headers, parameters, the values of
// c.Get) for the next one. The key handed to the limiter must therefore be
// a copy: the key functions of this package always return keys that stay
// valid after the handler returns, and a [Key] you write must do the same
// (utils.CopyString or strings.Clone), unless the app runs with
// fiber.Config{Immutable: true}.
//
// [Rules] decides instead by the rules of a rules.Engine, reloadable while
// the server runs, each with its own limit and key:
//
//	app.Use(ratekitfiber.Rules(engine))
package ratekitfiber

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// A Key returns the rate-limit key of a request: a non-empty key, or an
// error (wrapping keyfuncs.ErrMissing when the request lacks the value the
// key is made of, which is answered 400). The key must not share memory
// with the request: copy values read from c (see the package doc).
type Key func(c *fiber.Ctx) (string, error)

// New returns Fiber middleware that limits requests with lim, keyed by key.
//
// For each request that is not skipped, it computes the key and cost, asks
// lim, and sets the headers of the decision. A rejected request is answered
// by the denied handler and not passed on. An admitted request is held for
// the delay of a shaping leaky bucket and then passed on with c.Next().
// The hold ends early when c.UserContext() ends (the context the store is
// called with too); the request is then not passed on and the context's
// error goes to the app's fiber.ErrorHandler. Fiber's user context is
// context.Background unless the app sets one (fasthttp does not cancel it
// when the client goes away), so bound the hold with the limit's MaxDelay
// or a deadline set by an earlier middleware. When the store fails and the
// limiter fails open (the default), requests pass.
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil: that is a programming error, as for
// regexp.MustCompile.
func New(lim *core.Limiter, key Key, opts ...Option) fiber.Handler {
	if lim == nil || key == nil {
		panic("ratekitfiber: New needs a limiter and a key function")
	}
	cfg := newConfig(opts)
	return func(c *fiber.Ctx) error {
		if cfg.skip != nil && cfg.skip(c) {
			return c.Next()
		}
		k, err := key(c)
		cost := 1
		if cfg.cost != nil && err == nil {
			cost = cfg.cost(c)
		}
		var buf [8]answer.Field
		var v answer.Verdict
		fields := cfg.Verdict(c.UserContext(), &v, lim, k, err, cost, buf[:0])
		return cfg.respond(c, &v, fields)
	}
}

// LimitByIP returns Fiber middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	app.Use(ratekitfiber.LimitByIP(100, time.Minute))
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
func LimitByIP(count int, period time.Duration, opts ...Option) fiber.Handler {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}

// respond sets the header fields of a verdict and carries it out: the
// part of the middleware that New and Rules share.
func (cfg *config) respond(c *fiber.Ctx, v *answer.Verdict, fields []answer.Field) error {
	h := &c.Response().Header
	for _, f := range fields {
		// answer's names are canonical in fasthttp's sense too, and
		// SetCanonical copies: it reads the strings, never keeps them.
		h.SetCanonical(utils.UnsafeBytes(f.Name), utils.UnsafeBytes(f.Value[0]))
	}
	switch {
	case v.Pass():
		if err := answer.Hold(c.UserContext(), &v.Decision); err != nil {
			return err // the context ended while held: the app's error handler answers
		}
		if cfg.expose && v.Decision.Name != "" {
			d := v.Decision
			c.Locals(decisionKey, &d)
		}
		return c.Next()
	case v.Rejected() && cfg.denied != nil:
		return cfg.denied(c, v.Decision)
	case !v.Rejected() && cfg.onError != nil:
		return cfg.onError(c, v.Err)
	}
	// As stdhttp.WriteProblem does.
	h.Set(fiber.HeaderContentType, answer.ProblemContentType)
	h.Set(fiber.HeaderCacheControl, answer.ProblemCacheControl)
	return c.Status(v.Status).Send(answer.Problem(v))
}
