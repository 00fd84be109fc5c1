package ratekitfiber

import (
	"bytes"
	"context"
	"reflect"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// Rules returns Fiber middleware that limits requests by the rules in
// force in e (see package rules), which may be reloaded while it runs:
// every rule that matches a request applies, with its own key, and the
// request must pass them all. A request that no rule matches is passed on
// without rate-limit headers. Otherwise it behaves as the middleware of
// New, with the same options; the failure of a descriptor key (other than
// a missing value, which matches no rule) goes to the error handler.
//
// The rules see the request as follows, every string copied out of the
// request, since the engine keeps values as keys. Descriptor key route is
// the method and Fiber route pattern, c.Route().Path ("GET /items/:id"),
// which only middleware registered on the route itself knows:
//
//	app.Get("/items/:id", ratekitfiber.Rules(engine), handler)
//
// Fiber runs the middleware of app.Use and of groups before it has found
// the route, so there a request's route is its cleaned path. The path is
// c.Path(), the one Fiber routes by, lower-cased unless
// fiber.Config.CaseSensitive is set, as Fiber compares paths (so that
// "/LOGIN" does not escape a rule on "/login"): write the paths of Match
// and of path values in lower case, since "/Login" would match nothing.
// Key user, and any key that reads
// rules.Request.Value, finds the value stored with c.Locals(key, v), else
// the value of c.UserContext(); a string is copied, a value of another
// type must not share memory with the request. Key remote_address is the
// TCP peer unless the engine's rules.WithClientIP trusts proxies; Fiber's
// ProxyHeader and c.IP() play no part. The context of the store calls and
// of the shaping hold is c.UserContext(), as for New.
//
// Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) fiber.Handler {
	if e == nil {
		panic("ratekitfiber: Rules needs an engine")
	}
	cfg := newConfig(opts)
	return func(c *fiber.Ctx) error {
		if cfg.skip != nil && cfg.skip(c) {
			return c.Next()
		}
		cost := 1
		if cfg.cost != nil {
			cost = cfg.cost(c)
		}
		var checks [8]core.Check
		var buf [8]answer.Field
		cs, err := e.Checks(request{c}, checks[:0])
		var v answer.Verdict
		fields := cfg.VerdictAll(c.UserContext(), &v, cs, err, cost, buf[:0])
		return cfg.respond(c, &v, fields)
	}
}

// request is the rules.Request of a Fiber request. It is pointer-shaped,
// so that converting it to rules.Request does not allocate. Fiber reuses
// the memory of a request for the next one, and the engine keeps the
// values it is given as keys, so every string it returns is a copy, or a
// constant.
type request struct{ c *fiber.Ctx }

func (r request) Context() context.Context    { return r.c.UserContext() }
func (r request) Values(name string) []string { return headers{&r.c.Request().Header}.Values(name) }
func (r request) Query(name string) string    { return strings.Clone(r.c.Query(name)) }
func (r request) RemoteAddr() string          { return remoteAddr(r.c) }

// Method returns the method as a constant, without copying, when it is
// one of the standard methods.
func (r request) Method() string {
	switch m := r.c.Method(); m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodOptions:
		return fiber.MethodOptions
	case fiber.MethodConnect:
		return fiber.MethodConnect
	case fiber.MethodTrace:
		return fiber.MethodTrace
	default:
		return strings.Clone(m)
	}
}

// Path returns c.Path(), lower-cased as Fiber routes unless the app is
// case-sensitive.
func (r request) Path() string {
	if !r.c.App().Config().CaseSensitive {
		return utils.ToLower(r.c.Path()) // a copy
	}
	return strings.Clone(r.c.Path())
}

// EscapedPath returns the path as sent, percent-encoded, lower-cased as
// Path is; "" if it has no escapes.
func (r request) EscapedPath() string {
	p := r.c.Request().URI().PathOriginal()
	if bytes.IndexByte(p, '%') < 0 {
		return ""
	}
	if !r.c.App().Config().CaseSensitive {
		return utils.ToLower(string(p))
	}
	return string(p)
}

// Route returns the pattern of the route whose handlers run, or "" in
// the middleware of app.Use or a group: Fiber registers those as routes
// too, with the method of the request and their prefix as the path, which
// would put every route below the prefix in one counter.
func (r request) Route() string {
	if rt := r.c.Route(); !isUse(rt) {
		return rt.Path // registered by the app: not request memory
	}
	return ""
}

// useField is the index of fiber.Route's unexported field use, which
// tells the routes of app.Use and groups from the routes proper (nothing
// exported does), or -1 if this version of Fiber has no such field.
var useField = func() int {
	f, ok := reflect.TypeOf(fiber.Route{}).FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}()

// isUse reports whether rt is the route of app.Use or a group, and, when
// useField is unknown, that it may be: the cleaned path is then the route,
// rather than risk one counter for many routes. Reading a field with
// reflect does not allocate.
func isUse(rt *fiber.Route) bool {
	return useField < 0 || reflect.ValueOf(rt).Elem().Field(useField).Bool()
}

// Value returns the value of c.Locals(key), else of c.UserContext(); a
// string value is copied, as a careless middleware may have stored one
// read from the request.
func (r request) Value(key any) any {
	v := r.c.Locals(key)
	if v == nil {
		v = r.c.UserContext().Value(key)
	}
	if s, ok := v.(string); ok {
		return strings.Clone(s)
	}
	return v
}
