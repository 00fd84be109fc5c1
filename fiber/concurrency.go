package ratekitfiber

import (
	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
)

// Concurrency returns Fiber middleware that lets at most lim.Max()
// requests of each key be in flight at once (see package concurrency). A
// request that finds its key full is answered as New answers a rejection:
// 429 with Retry-After and the problem-details body, its limit lim's name,
// or the denied handler (whose decision has Quota lim.Max()); 503 when the
// store failed under concurrency.WithFailClosed. A missing key is 400, a
// failing key function 500, or the error handler's. An admitted request
// holds its slot until c.Next() returns, or panics (the recover middleware
// then answers). The store is called with c.UserContext().
//
// Of New's options, WithSkipper, WithDeniedHandler, WithErrorHandler and
// WithLogger (key errors, once per episode) apply; a refusal carries
// Retry-After and no rate-limit fields; store failures are logged by lim
// (concurrency.WithLogger). It stacks with New;
// put the rate limit first, so that a request over its rate never takes a
// slot:
//
//	app.Post("/reports", ratekitfiber.New(rate, ratekitfiber.PeerIP), ratekitfiber.Concurrency(inflight, ratekitfiber.PeerIP), report)
//
// Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) fiber.Handler {
	if lim == nil || key == nil {
		panic("ratekitfiber: Concurrency needs a limiter and a key function")
	}
	cfg := newConfig(opts)
	return func(c *fiber.Ctx) error {
		if cfg.skip != nil && cfg.skip(c) {
			return c.Next()
		}
		k, err := key(c)
		var v answer.Verdict
		lease, fields := lim.Verdict(c.UserContext(), &cfg.Responder, &v, k, err)
		defer lease.Release() // panics included
		return cfg.respond(c, &v, fields)
	}
}
