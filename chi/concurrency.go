package ratekitchi

import (
	"net/http"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/stdhttp"
)

// Concurrency returns Chi middleware that lets at most lim.Max() requests
// of each key be in flight at once (see package concurrency): it is
// stdhttp.Concurrency, so a full key is answered 429 with Retry-After and
// the problem-details body of New's rejections, and an admitted request
// holds its slot until the next handler returns, or panics
// (middleware.Recoverer then answers). Of New's options, WithSkipper,
// WithDeniedHandler and WithErrorHandler apply.
//
// It stacks with New; put the rate limit first, so that a request over
// its rate never takes a slot:
//
//	r.With(ratekitchi.New(rate, ratekitchi.PeerIP), ratekitchi.Concurrency(inflight, ratekitchi.PeerIP)).Post("/reports", report)
//
// Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("ratekitchi: Concurrency needs a limiter and a key function")
	}
	return stdhttp.Concurrency(lim, key, opts...)
}
