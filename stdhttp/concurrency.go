package stdhttp

import (
	"net/http"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
)

// Concurrency returns middleware that lets at most lim.Max() requests of
// each key be in flight at once (see package concurrency). A request that
// finds its key full is answered as New answers a rejection: 429 with
// Retry-After and the problem-details body, its limit lim's name, or the
// denied handler (whose decision has Quota lim.Max()); 503 when the store
// failed under concurrency.WithFailClosed. A missing key is 400, a failing
// key function 500, or the error handler's. An admitted request holds its
// slot until the next handler returns, or panics.
//
// Of New's options, WithSkipper, WithDeniedHandler, WithErrorHandler and
// WithLogger (key errors, once per episode) apply; a refusal carries
// Retry-After and no rate-limit fields; store failures are logged by lim
// (concurrency.WithLogger).
//
// It stacks with New on the same handler; put the rate limit outside, so
// that a request over its rate never takes a slot:
//
//	handler := stdhttp.New(rate, keyfuncs.PeerIP)(stdhttp.Concurrency(inflight, keyfuncs.PeerIP)(mux))
//
// Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key func(*http.Request) (string, error), opts ...Option) func(http.Handler) http.Handler {
	if lim == nil || key == nil {
		panic("stdhttp: Concurrency needs a limiter and a key function")
	}
	cfg := newConfig(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.skip != nil && cfg.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			k, err := key(r)
			var v answer.Verdict
			lease, fields := lim.Verdict(r.Context(), &cfg.Responder, &v, k, err)
			defer lease.Release() // panics included
			cfg.respond(w, r, next, &v, fields)
		})
	}
}
