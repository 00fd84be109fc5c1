package ratekitecho5

import (
	"log/slog"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// Config configures the middleware returned by NewWithConfig, in the style
// of the configurations of Echo's own middleware. Only Limiter is
// required; New with options builds the same Config.
type Config struct {
	// Skipper exempts the requests for which it returns true, such as
	// health checks: they are passed on without being counted and get no
	// rate-limit headers. Default: none is skipped.
	Skipper middleware.Skipper

	// Limiter decides the requests: limits, algorithm, store and fail
	// mode are its options (see package core). Required.
	Limiter *core.Limiter

	// Key returns the rate-limit key of a request. Default: PeerIP.
	Key Key

	// Cost returns the cost of a request, how many units of the limit it
	// takes. Default: 1. A cost of 0 reports the state without counting;
	// a negative cost, or one above a limit's capacity, goes to
	// ErrorHandler.
	Cost func(c *echo.Context) int

	// DeniedHandler answers a rejected request instead of the default
	// problem-details body; the rate-limit headers and Retry-After are
	// already set. It also answers requests rejected because the store
	// failed under core.WithFailClosed (their decision has Quota 0). An
	// error it returns goes to e.HTTPErrorHandler (return
	// echo.NewHTTPError(http.StatusTooManyRequests, msg) to answer in the
	// app's usual error format).
	DeniedHandler func(c *echo.Context, d core.Decision) error

	// ErrorHandler answers errors that are not decisions: an error of the
	// key function, an empty key, a cost out of range. No rate-limit
	// headers are set. An error it returns goes to e.HTTPErrorHandler.
	// Default: a problem-details body in fixed words (answer.Problem), 400
	// when the error wraps core.ErrMissingKey and 500 otherwise, written
	// directly; the error itself goes to Logger.
	ErrorHandler func(c *echo.Context, err error) error

	// Headers selects the rate-limit header fields. Default:
	// answer.XRateLimit.
	Headers answer.Style

	// Logger receives the errors of key functions and costs, once per
	// episode. Default: slog.Default(). Store failures are logged by the
	// limiter (core.WithLogger).
	Logger *slog.Logger

	// DecisionInContext stores the decision of every request that is
	// decided and passed on in the Echo context (c.Set), where the
	// handlers after the middleware read it with DecisionFrom. It costs
	// one allocation per request (Echo v5 keeps the map of c.Set values
	// across requests). Default: off.
	DecisionInContext bool
}

// An Option configures the middleware returned by New, LimitByIP or
// Rules, by setting a field of its Config.
type Option func(*Config)

// WithSkipper exempts the requests for which skip returns true, such as
// health checks (see Config.Skipper). It takes Echo's middleware.Skipper,
// so middleware.DefaultSkipper and the app's existing skippers fit.
func WithSkipper(skip middleware.Skipper) Option { return func(c *Config) { c.Skipper = skip } }

// WithCost sets the cost of a request, how many units of the limit it
// takes; the default is 1 (see Config.Cost).
func WithCost(cost func(c *echo.Context) int) Option { return func(c *Config) { c.Cost = cost } }

// WithDeniedHandler sets the handler that answers a rejected request
// instead of the default problem-details body (see Config.DeniedHandler).
// An error it returns goes to e.HTTPErrorHandler.
func WithDeniedHandler(denied func(c *echo.Context, d core.Decision) error) Option {
	return func(c *Config) { c.DeniedHandler = denied }
}

// WithErrorHandler sets the handler for errors that are not decisions (see
// Config.ErrorHandler). To answer them with e.HTTPErrorHandler instead of
// the default problem-details body, return the error (or an
// *echo.HTTPError that wraps it).
func WithErrorHandler(onError func(c *echo.Context, err error) error) Option {
	return func(c *Config) { c.ErrorHandler = onError }
}

// WithHeaders selects the rate-limit header fields (see Config.Headers):
// answer.XRateLimit, the default; answer.IETF for
// draft-ietf-httpapi-ratelimit-headers; answer.Both; answer.NoHeaders.
func WithHeaders(s answer.Style) Option { return func(c *Config) { c.Headers = s } }

// WithLogger sets the logger of key-function and cost errors (see
// Config.Logger).
func WithLogger(log *slog.Logger) Option { return func(c *Config) { c.Logger = log } }

// WithDecisionInContext stores the decision of every request passed on in
// the Echo context, for DecisionFrom (see Config.DecisionInContext).
func WithDecisionInContext() Option { return func(c *Config) { c.DecisionInContext = true } }

// decisionKey is the Echo context key of the decision.
const decisionKey = "github.com/ratekit/ratekit/echo5.decision"

// DecisionFrom returns the decision that the middleware took for the
// request of c, when it runs with DecisionInContext and passed the request
// on (under Rules, a request that no rule matches has none). Under
// several ratekit middlewares that store it, it is the decision of the
// one that ran last.
func DecisionFrom(c *echo.Context) (core.Decision, bool) {
	d, ok := c.Get(decisionKey).(*core.Decision)
	if !ok {
		return core.Decision{}, false
	}
	return *d, true
}
