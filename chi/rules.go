package ratekitchi

import (
	"net/http"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// Rules returns Chi middleware that limits requests by the rules in force
// in e (see package rules), which may be reloaded while it runs: every
// rule that matches a request applies, with its own key, and the request
// must pass them all. A request that no rule matches is passed on without
// rate-limit headers. Otherwise it behaves as the middleware of New, with
// the same options. It is stdhttp.Rules: Chi's requests are net/http
// requests, and Chi tells the route as net/http does.
//
// Descriptor key route is the method and Chi route pattern ("GET
// /items/{id}"): Chi sets r.Pattern when it has matched a route, before it
// calls the route's handler, and so before the middleware mounted on the
// route with r.With or inside r.Group. Middleware added with r.Use on the
// router runs before routing, when no pattern is known yet: there the
// route of a request is its cleaned path, one counter per path rather
// than per route. Inside r.Route or a mounted sub-router, r.Use sees the
// pattern of the mount ("/api/*"), which every route below it shares;
// mount the middleware with r.With or in r.Group there too. The other
// keys need no routing and work anywhere: see rules.HTTPRequest for how
// the request is read (key user is the request context's value, as
// stored by the app's middleware with context.WithValue).
//
// Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) func(http.Handler) http.Handler {
	if e == nil {
		panic("ratekitchi: Rules needs an engine")
	}
	return stdhttp.Rules(e, opts...)
}
