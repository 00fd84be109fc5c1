package ratekitecho

import (
	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
)

// Concurrency returns Echo middleware that lets at most lim.Max() requests
// of each key be in flight at once (see package concurrency). A request
// that finds its key full is answered as New answers a rejection: 429
// with Retry-After and the problem-details body, its limit lim's name, or
// the denied handler (whose decision has Quota lim.Max()); 503 when the
// store failed under concurrency.WithFailClosed. A missing key is 400, a
// failing key function 500, or the error handler's. An admitted request
// holds its slot until the next handler returns, or panics
// (middleware.Recover then answers).
//
// Of New's options, WithSkipper, WithDeniedHandler, WithErrorHandler and
// WithLogger (key errors, once per episode) apply; a refusal carries
// Retry-After and no rate-limit fields; store failures are logged by lim
// (concurrency.WithLogger). It stacks with New;
// put the rate limit first, so that a request over its rate never takes a
// slot:
//
//	e.POST("/reports", report, ratekitecho.New(rate, ratekitecho.PeerIP), ratekitecho.Concurrency(inflight, ratekitecho.PeerIP))
//
// Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) echo.MiddlewareFunc {
	if lim == nil || key == nil {
		panic("ratekitecho: Concurrency needs a limiter and a key function")
	}
	var cfg Config
	for _, o := range opts {
		o(&cfg)
	}
	h := newHandler(cfg, nil)
	h.chains.serve = func(c echo.Context, next echo.HandlerFunc) error {
		if cfg.Skipper != nil && cfg.Skipper(c) {
			return next(c)
		}
		k, err := key(c)
		var v answer.Verdict
		lease, fields := lim.Verdict(c.Request().Context(), &h.Responder, &v, k, err)
		defer lease.Release() // panics included
		return h.respond(c, next, &v, fields)
	}
	return h.middleware()
}
