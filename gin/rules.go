package ratekitgin

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// Rules returns Gin middleware that limits requests by the rules in force
// in e (see package rules), which may be reloaded while it runs: every
// rule that matches a request applies, with its own key, and the request
// must pass them all. A request that no rule matches is passed on without
// rate-limit headers. Otherwise it behaves as the middleware of New, with
// the same options; the failure of a descriptor key (other than a missing
// value, which matches no rule) goes to the error handler.
//
// The rules see the request as follows. Descriptor key route is the
// method and Gin route pattern, c.FullPath() ("GET /items/:id"); Gin
// routes before it runs any handler, so the pattern is known to
// middleware added with r.Use too. A request that matches no route has
// none, and its route is its cleaned path. Key user, and any key that
// reads rules.Request.Value, finds the value stored with c.Set(key, v),
// else the value of the context of c.Request. Key remote_address reads
// c.Request.RemoteAddr and headers as the engine's rules.WithClientIP
// says; Gin's own proxy settings and c.ClientIP() play no part.
//
// Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) gin.HandlerFunc {
	if e == nil {
		panic("ratekitgin: Rules needs an engine")
	}
	cfg := newConfig(opts)
	return func(c *gin.Context) {
		if cfg.skip != nil && cfg.skip(c) {
			c.Next()
			return
		}
		cost := 1
		if cfg.cost != nil {
			cost = cfg.cost(c)
		}
		var checks [8]core.Check
		var buf [8]answer.Field
		cs, err := e.Checks(request{c}, checks[:0])
		var v answer.Verdict
		fields := cfg.VerdictAll(c.Request.Context(), &v, cs, err, cost, buf[:0])
		cfg.respond(c, &v, fields)
	}
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
// any comparable type, as for ContextKey), else the value of the request
// context.
func (r request) Value(key any) any {
	if v, ok := r.c.Get(key); ok {
		return v
	}
	return r.c.Request.Context().Value(key)
}
