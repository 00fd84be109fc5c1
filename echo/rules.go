package ratekitecho

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// Rules returns Echo middleware that limits requests by the rules in
// force in e (see package rules), which may be reloaded while it runs:
// every rule that matches a request applies, with its own key, and the
// request must pass them all. A request that no rule matches is passed on
// without rate-limit headers. Otherwise it behaves as the middleware of
// New, with the same options (Config's Limiter and Key play no part); the
// failure of a descriptor key (other than a missing value, which matches
// no rule) goes to the error handler.
//
// The rules see the request as follows. Descriptor key route is the
// method and Echo route pattern, c.Path() ("GET /items/:id"), which Echo
// sets before it runs the middleware of e.Use, a group or a route, though
// not that of e.Pre; a request that matches no route has none, and its
// route is its cleaned path. Key user, and any key that reads
// rules.Request.Value, finds the value stored with c.Set(key, v) when the
// key is a string, else the value of the request context. Key
// remote_address is the TCP peer (the request's RemoteAddr) unless the
// engine's rules.WithClientIP trusts proxies; e.IPExtractor and
// c.RealIP() play no part.
//
// Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) echo.MiddlewareFunc {
	if e == nil {
		panic("ratekitecho: Rules needs an engine")
	}
	var cfg Config
	for _, o := range opts {
		o(&cfg)
	}
	return newHandler(cfg, e).middleware()
}

// serveRules limits one request by the rules in force.
func (h *handler) serveRules(c echo.Context, next echo.HandlerFunc) error {
	if h.cfg.Skipper != nil && h.cfg.Skipper(c) {
		return next(c)
	}
	cost := 1
	if h.cfg.Cost != nil {
		cost = h.cfg.Cost(c)
	}
	var checks [8]core.Check
	var buf [8]answer.Field
	cs, err := h.engine.Checks(request{c}, checks[:0])
	var v answer.Verdict
	fields := h.VerdictAll(c.Request().Context(), &v, cs, err, cost, buf[:0])
	return h.respond(c, next, &v, fields)
}

// request is the rules.Request of an Echo request. What net/http knows it
// takes from rules.HTTPRequest(c.Request()).
type request struct{ c echo.Context }

func (r request) Context() context.Context    { return r.c.Request().Context() }
func (r request) Method() string              { return rules.HTTPRequest(r.c.Request()).Method() }
func (r request) Path() string                { return rules.HTTPRequest(r.c.Request()).Path() }
func (r request) EscapedPath() string         { return rules.HTTPRequest(r.c.Request()).EscapedPath() }
func (r request) Route() string               { return r.c.Path() }
func (r request) Values(name string) []string { return rules.HTTPRequest(r.c.Request()).Values(name) }
func (r request) Query(name string) string    { return rules.HTTPRequest(r.c.Request()).Query(name) }
func (r request) RemoteAddr() string          { return r.c.Request().RemoteAddr }

// Value returns the value stored with c.Set(key, v) if key is a string
// and there is one, else the value of the request context.
func (r request) Value(key any) any {
	if k, ok := key.(string); ok {
		if v := r.c.Get(k); v != nil {
			return v
		}
	}
	return r.c.Request().Context().Value(key)
}
