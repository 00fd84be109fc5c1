// Package ratekitgin is the Gin middleware of ratekit: Gin's port to the
// request flow of package adapter, so it answers exactly as every other
// ratekit middleware does.
//
//	import ratekitgin "github.com/ratekit/ratekit/gin"
//
//	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
//	r.Use(ratekitgin.New(lim, ratekitgin.PeerIP))
//
// The key says who is limited. [PeerIP], the TCP peer, is safe by
// default; behind a reverse proxy use [IP] with keyfuncs.TrustedProxies.
// [ClientIP] uses Gin's own c.ClientIP(), which believes forwarding
// headers from every peer unless the engine's trusted proxies are set:
// read its documentation before using it. [Header], [User] and [Adapt]
// (any keyfuncs.Func) cover the rest.
//
// [Rules] decides instead by the rules of a rules.Engine, reloadable while
// the server runs, each with its own limit and key:
//
//	r.Use(ratekitgin.Rules(engine))
package ratekitgin

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Key returns the rate-limit key of a request, or an error: one wrapping
// keyfuncs.ErrMissing is answered 400, any other 500.
type Key func(c *gin.Context) (string, error)

// New returns Gin middleware that limits requests with lim, keyed by key
// (see adapter.Middleware.Limit). A request not passed on is aborted
// (c.Abort); one whose context ends during a shaping hold is aborted
// without a response, its error recorded with c.Error. New panics if lim
// or key is nil.
func New(lim *core.Limiter, key Key, opts ...Option) gin.HandlerFunc {
	if lim == nil || key == nil {
		panic("ratekitgin: New needs a limiter and a key function")
	}
	return handler(adapter.New(port{}, opts...).Limit(lim, key))
}

// LimitByIP returns Gin middleware that lets each client IP make count
// requests per period, the common case in one line:
//
//	r.Use(ratekitgin.LimitByIP(100, time.Minute))
//
// LimitByIP is shorthand for New(core.Must(core.NewLimiter(core.Limit{Rate:
// core.Rate{Count: count, Period: period}})), PeerIP, opts...); it panics
// if count or period is out of range, so use New for limits from
// configuration.
func LimitByIP(count int, period time.Duration, opts ...Option) gin.HandlerFunc {
	return New(core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}})), PeerIP, opts...)
}

// Rules returns Gin middleware that limits requests by the rules in force
// in e (see package rules and adapter.Middleware.Rules), which may be
// reloaded while it runs. Descriptor key route is the method and Gin
// route pattern, c.FullPath() ("GET /items/:id"), known to r.Use
// middleware too (the cleaned path when no route matches); key user finds
// values set with c.Set, else in the request's context; remote_address
// follows the engine's rules.WithClientIP, never Gin's proxy settings.
// Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) gin.HandlerFunc {
	if e == nil {
		panic("ratekitgin: Rules needs an engine")
	}
	return handler(adapter.New(port{}, opts...).Rules(e))
}

// Concurrency returns Gin middleware that lets at most lim.Max() requests
// of each key be in flight at once (see adapter.Middleware.Concurrency):
// an admitted request holds its slot until c.Next() returns, or panics.
// Put the rate limit first, so that a request over its rate never takes a
// slot. Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) gin.HandlerFunc {
	if lim == nil || key == nil {
		panic("ratekitgin: Concurrency needs a limiter and a key function")
	}
	return handler(adapter.New(port{}, opts...).Concurrency(lim, key))
}

func handler(flow func(*gin.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) { _ = flow(c) }
}

// An Option configures the middleware returned by New, LimitByIP, Rules
// or Concurrency; each sets the adapter.Config field of its name. An
// option given a nil function leaves the default in place.
type Option = adapter.Option[*gin.Context]

// WithSkipper exempts the requests for which skip returns true: see
// adapter.Config.Skip.
func WithSkipper(skip func(c *gin.Context) bool) Option { return adapter.WithSkipper(skip) }

// WithCost sets the cost of a request (default 1): see adapter.Config.Cost.
func WithCost(cost func(c *gin.Context) int) Option { return adapter.WithCost(cost) }

// WithDeniedHandler sets the handler that writes the answer to a rejected
// request, already aborted, whose rate-limit header fields are set: see
// adapter.Config.Denied. It replaces WithQueue.
func WithDeniedHandler(denied func(c *gin.Context, d core.Decision)) Option {
	return adapter.WithDeniedHandler(adapter.NoError(denied))
}

// WithQueue answers rejected requests by queueing them for later: see
// adapter.Config.Queue. It replaces WithDeniedHandler.
func WithQueue(offer *queue.Offer) Option { return adapter.WithQueue[*gin.Context](offer) }

// WithErrorHandler sets the handler of a failing key function, an empty
// key or a cost out of range, for a request already aborted: see
// adapter.Config.OnError.
func WithErrorHandler(onError func(c *gin.Context, err error)) Option {
	return adapter.WithErrorHandler(adapter.NoError(onError))
}

// WithHeaders selects the rate-limit header fields (adapter.Config.Headers).
func WithHeaders(s answer.Style) Option { return adapter.WithHeaders[*gin.Context](s) }

// WithLogger sets the logger of key failures (adapter.Config.Logger).
func WithLogger(log *slog.Logger) Option { return adapter.WithLogger[*gin.Context](log) }

// WithDecisionInContext stores the decision of every request decided and
// passed on in the Gin context (c.Set), where DecisionFrom reads it. It
// costs an allocation or two per request, so it is off by default.
func WithDecisionInContext() Option { return adapter.WithDecisionInContext[*gin.Context]() }

// decisionKey is the Gin context key of the decision.
const decisionKey = "github.com/ratekit/ratekit/gin.decision"

// DecisionFrom returns the decision that the middleware took for the
// request of c, when it runs WithDecisionInContext and passed the request
// on; under several such middlewares, the one that ran last.
func DecisionFrom(c *gin.Context) (core.Decision, bool) {
	v, _ := c.Get(decisionKey)
	return adapter.Kept(v)
}

// port is Gin's adapter.Port.
type port struct{}

func (port) Context(c *gin.Context) context.Context { return c.Request.Context() }
func (port) Request(c *gin.Context) rules.Request   { return request{c} }
func (port) Next(c *gin.Context) error              { c.Next(); return nil }

func (port) HeaderMap(c *gin.Context) http.Header { return c.Writer.Header() }
func (p port) Header(c *gin.Context, name string, v []string) {
	adapter.SetField(p.HeaderMap(c), name, v)
}

func (port) Keep(c *gin.Context, d core.Decision) *gin.Context {
	c.Set(decisionKey, &d)
	return c
}

func (port) Stop(c *gin.Context, err error) error {
	c.Abort()
	if err != nil {
		_ = c.Error(err)
	}
	return nil
}

func (port) Write(c *gin.Context, status int, body []byte) error {
	return adapter.WriteBody(c.Writer, status, body)
}

func (port) Offer(c *gin.Context, o *queue.Offer, d core.Decision) queue.Reply {
	return o.ReplyTo(c.Request, d)
}

// request is the rules.Request of a Gin request. It is pointer-shaped, so
// that converting it to rules.Request does not allocate. What net/http
// knows it takes from rules.HTTPRequest(c.Request).
type request struct{ c *gin.Context }

func (r request) Context() context.Context    { return r.c.Request.Context() }
func (r request) Method() string              { return rules.HTTPRequest(r.c.Request).Method() }
func (r request) Path() string                { return rules.HTTPRequest(r.c.Request).Path() }
func (r request) EscapedPath() string         { return rules.HTTPRequest(r.c.Request).EscapedPath() }
func (r request) Route() string               { return r.c.FullPath() }
func (r request) Values(name string) []string { return rules.HTTPRequest(r.c.Request).Values(name) }
func (r request) Query(name string) string    { return rules.HTTPRequest(r.c.Request).Query(name) }
func (r request) RemoteAddr() string          { return r.c.Request.RemoteAddr }

// Value returns the value stored with c.Set(key, v) (Gin's keys may be of
// any comparable type, as for ContextValue), else the value of the request
// context.
func (r request) Value(key any) any {
	if v, ok := r.c.Get(key); ok {
		return v
	}
	return r.c.Request.Context().Value(key)
}
