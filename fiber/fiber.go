// Package ratekitfiber is the Fiber v2 middleware of ratekit. All policy
// lives in package core; this package only translates a *fiber.Ctx into a
// call of [core.Limiter.Verdict] and the verdict into a response, so it
// answers exactly as the net/http middleware (package stdhttp) does.
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
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/ratekit/ratekit/core"
)

// A Key returns the rate-limit key of a request: a non-empty key, or an
// error (wrapping keyfuncs.ErrMissing when the request lacks the value the
// key is made of, which is answered 400). The key must not share memory
// with the request: copy values read from c (see the package doc).
type Key func(c *fiber.Ctx) (string, error)

// An Option configures the middleware returned by New or Rules.
type Option func(*config)

type config struct {
	skip    func(*fiber.Ctx) bool
	cost    func(*fiber.Ctx) int
	denied  func(*fiber.Ctx, core.Decision) error
	onError func(*fiber.Ctx, error) error
}

// WithSkipper exempts the requests for which skip returns true, such as
// health checks (the Next field of Fiber's own middleware): they are passed
// on without being counted and get no rate-limit headers.
func WithSkipper(skip func(c *fiber.Ctx) bool) Option { return func(c *config) { c.skip = skip } }

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1. A cost of 0 reports the state without counting;
// a negative cost, or one above a limit's capacity, goes to the error
// handler.
func WithCost(cost func(c *fiber.Ctx) int) Option { return func(c *config) { c.cost = cost } }

// WithDeniedHandler sets the handler that answers a rejected request
// instead of the default problem-details body; the rate-limit headers and
// Retry-After are already set. It also answers requests rejected because
// the store failed under core.FailClosed (their decision has Limit 0). An
// error it returns goes to the app's fiber.ErrorHandler.
func WithDeniedHandler(denied func(c *fiber.Ctx, d core.Decision) error) Option {
	return func(c *config) { c.denied = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions: an
// error of the key function, an empty key, a cost out of range. The
// default answers with core.Rejection's body: 400 when the error wraps
// core.ErrMissingKey, 500 otherwise. No rate-limit headers are set. To use
// the app's fiber.ErrorHandler instead, return the error.
func WithErrorHandler(onError func(c *fiber.Ctx, err error) error) Option {
	return func(c *config) { c.onError = onError }
}

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
// or a deadline set by an earlier middleware. When the store fails under
// core.FailOpen, requests pass.
//
// An option given a nil function leaves the default in place. New panics
// if lim or key is nil: that is a programming error, as for
// regexp.MustCompile.
func New(lim *core.Limiter, key Key, opts ...Option) fiber.Handler {
	if lim == nil || key == nil {
		panic("ratekitfiber: New needs a limiter and a key function")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return func(c *fiber.Ctx) error {
		if cfg.skip != nil && cfg.skip(c) {
			return c.Next()
		}
		k, err := key(c)
		cost := 1
		if cfg.cost != nil && err == nil {
			cost = cfg.cost(c)
		}
		var buf [8]core.Header
		v, fields := lim.Verdict(c.UserContext(), k, err, cost, buf[:0])
		return cfg.respond(c, v, fields)
	}
}

// respond sets the header fields of a verdict and carries it out: the
// part of the middleware that New and Rules share.
func (cfg *config) respond(c *fiber.Ctx, v core.Verdict, fields []core.Header) error {
	h := &c.Response().Header
	for _, f := range fields {
		// core's names are canonical in fasthttp's sense too, and
		// SetCanonical copies: it reads the strings, never keeps them.
		h.SetCanonical(utils.UnsafeBytes(f.Name), utils.UnsafeBytes(f.Value[0]))
	}
	switch {
	case v.Pass():
		if err := core.Hold(c.UserContext(), v.Decision); err != nil {
			return err // the context ended while held: the app's error handler answers
		}
		return c.Next()
	case v.Rejected() && cfg.denied != nil:
		return cfg.denied(c, v.Decision)
	case !v.Rejected() && cfg.onError != nil:
		return cfg.onError(c, v.Err)
	}
	status, body := core.Rejection(v.Decision, v.Err)
	h.Set(fiber.HeaderContentType, core.ProblemContentType)
	h.Set(fiber.HeaderCacheControl, core.ProblemCacheControl)
	return c.Status(status).Send(body)
}
