package ratekitfiber3

import (
	"log/slog"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// An Option configures the middleware returned by New, LimitByIP or Rules.
type Option func(*config)

type config struct {
	answer.Responder
	skip    func(fiber.Ctx) bool
	cost    func(fiber.Ctx) int
	denied  func(fiber.Ctx, core.Decision) error
	onError func(fiber.Ctx, error) error
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
// health checks (the Next field of Fiber's own middleware): they are passed
// on without being counted and get no rate-limit headers.
func WithSkipper(skip func(c fiber.Ctx) bool) Option { return func(c *config) { c.skip = skip } }

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1. A cost of 0 reports the state without counting;
// a negative cost, or one above a limit's capacity, goes to the error
// handler.
func WithCost(cost func(c fiber.Ctx) int) Option { return func(c *config) { c.cost = cost } }

// WithDeniedHandler sets the handler that answers a rejected request
// instead of the default problem-details body; the rate-limit headers and
// Retry-After are already set. It also answers requests rejected because
// the store failed under core.WithFailClosed (their decision has Quota 0).
// An error it returns goes to the app's fiber.ErrorHandler.
func WithDeniedHandler(denied func(c fiber.Ctx, d core.Decision) error) Option {
	return func(c *config) { c.denied = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions: an
// error of the key function, an empty key, a cost out of range. The
// default answers with a problem-details body in fixed words
// (answer.Problem): 400 when the error wraps core.ErrMissingKey, 500
// otherwise; the error itself goes to the logger (WithLogger). No
// rate-limit headers are set. To use the app's fiber.ErrorHandler
// instead, return the error.
func WithErrorHandler(onError func(c fiber.Ctx, err error) error) Option {
	return func(c *config) { c.onError = onError }
}

// WithHeaders selects the rate-limit header fields (default
// answer.XRateLimit; answer.IETF for draft-ietf-httpapi-ratelimit-headers,
// answer.Both, answer.NoHeaders).
func WithHeaders(s answer.Style) Option { return func(c *config) { c.Headers = s } }

// WithLogger sets the logger of key-function and cost errors, logged once
// per episode (default slog.Default()). Store failures are logged by the
// limiter (core.WithLogger).
func WithLogger(log *slog.Logger) Option { return func(c *config) { c.Logger = log } }

// WithDecisionInContext stores the decision of every request that is
// decided and passed on in the request's locals (c.Locals), where the
// handlers after the middleware read it with DecisionFrom. It costs an
// allocation or two per request, so it is off by default.
func WithDecisionInContext() Option { return func(c *config) { c.expose = true } }

// decisionKey is the c.Locals key of the decision: a value of an
// unexported type, which no other package can write.
var decisionKey = localsKey{}

type localsKey struct{}

// DecisionFrom returns the decision that the middleware took for the
// request of c, when it runs WithDecisionInContext and passed the request
// on (under Rules, a request that no rule matches has none). Under
// several ratekit middlewares that store it, it is the decision of the
// one that ran last.
func DecisionFrom(c fiber.Ctx) (core.Decision, bool) {
	d, ok := c.Locals(decisionKey).(*core.Decision)
	if !ok {
		return core.Decision{}, false
	}
	return *d, true
}
