package ratekitgin

import (
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// An Option configures the middleware returned by New or Rules.
type Option func(*config)

type config struct {
	answer.Responder
	skip    func(*gin.Context) bool
	cost    func(*gin.Context) int
	denied  func(*gin.Context, core.Decision)
	onError func(*gin.Context, error)
	expose  bool
}

func newConfig(opts []Option) *config {
	cfg := new(config)
	for _, o := range opts {
		o(cfg)
	}
	return cfg
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
// core.WithFailClosed; their decision has Quota 0.
func WithDeniedHandler(denied func(c *gin.Context, d core.Decision)) Option {
	return func(cfg *config) { cfg.denied = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions: an
// error of the key function, an empty key, or a cost out of range. The
// request is already aborted when it runs. The default answers 400 Bad
// Request when the error wraps core.ErrMissingKey (a missing or empty
// key), 500 Internal Server Error otherwise, with a problem-details body in
// fixed words (answer.Problem); the error itself goes to the logger
// (WithLogger). No rate-limit headers are set. A handler that wants Gin's
// error-reporting middleware to see the error records it with c.Error(err)
// besides writing a response.
func WithErrorHandler(onError func(c *gin.Context, err error)) Option {
	return func(cfg *config) { cfg.onError = onError }
}

// WithHeaders selects the rate-limit header fields (default
// answer.XRateLimit; answer.IETF for draft-ietf-httpapi-ratelimit-headers,
// answer.Both, answer.NoHeaders).
func WithHeaders(s answer.Style) Option {
	return func(cfg *config) { cfg.Headers = s }
}

// WithLogger sets the logger of key-function and cost errors, logged once
// per episode (default slog.Default()). Store failures are logged by the
// limiter (core.WithLogger).
func WithLogger(log *slog.Logger) Option {
	return func(cfg *config) { cfg.Logger = log }
}

// WithDecisionInContext stores the decision of every request that is
// decided and passed on in the Gin context (c.Set), where the handlers
// after the middleware read it with DecisionFrom. It costs an allocation
// or two per request, so it is off by default.
func WithDecisionInContext() Option {
	return func(cfg *config) { cfg.expose = true }
}

// decisionKey is the Gin context key of the decision.
const decisionKey = "github.com/ratekit/ratekit/gin.decision"

// DecisionFrom returns the decision that the middleware took for the
// request of c, when it runs WithDecisionInContext and passed the request
// on (under Rules, a request that no rule matches has none). Under
// several ratekit middlewares that store it, it is the decision of the
// one that ran last.
func DecisionFrom(c *gin.Context) (core.Decision, bool) {
	v, _ := c.Get(decisionKey)
	d, ok := v.(*core.Decision)
	if !ok {
		return core.Decision{}, false
	}
	return *d, true
}
