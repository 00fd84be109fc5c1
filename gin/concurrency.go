package ratekitgin

import (
	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
)

// Concurrency returns Gin middleware that lets at most lim.Max() requests
// of each key be in flight at once (see package concurrency). A request
// that finds its key full is aborted and answered as New answers a
// rejection: 429 with Retry-After and the problem-details body, its limit
// lim's name, or the denied handler (whose decision has Quota lim.Max());
// 503 when the store failed under concurrency.WithFailClosed. A missing
// key is 400, a failing key function 500, or the error handler's. An
// admitted request holds its slot until c.Next() returns, or panics
// (gin.Recovery then answers).
//
// Of New's options, WithSkipper, WithDeniedHandler, WithErrorHandler and
// WithLogger (key errors, once per episode) apply; a refusal carries
// Retry-After and no rate-limit fields; store failures are logged by lim
// (concurrency.WithLogger). It stacks with New;
// put the rate limit first, so that a request over its rate never takes a
// slot:
//
//	r.POST("/reports", ratekitgin.New(rate, ratekitgin.PeerIP), ratekitgin.Concurrency(inflight, ratekitgin.PeerIP), report)
//
// Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) gin.HandlerFunc {
	if lim == nil || key == nil {
		panic("ratekitgin: Concurrency needs a limiter and a key function")
	}
	cfg := newConfig(opts)
	return func(c *gin.Context) {
		if cfg.skip != nil && cfg.skip(c) {
			c.Next()
			return
		}
		k, err := key(c)
		var v answer.Verdict
		lease, fields := lim.Verdict(c.Request.Context(), &cfg.Responder, &v, k, err)
		defer lease.Release() // panics included
		cfg.respond(c, &v, fields)
	}
}
