// Command echo5 is the demo of ratekit (examples/demo) on Echo v5 and
// ratekitecho5: the same routes, flags and answers as the default
// program, which serves them on net/http, with -metrics too. Only this
// program builds Echo v5 (examples/demo/echo is Echo v4):
//
//	go run ./examples/demo/echo5 -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"net/http"

	echo "github.com/labstack/echo/v5"

	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	"github.com/ratekit/ratekit/keyfuncs"
)

func main() { demo.Main(program) }

// program serves the demo's routes with Echo v5.
var program = demo.Program{Framework: "echo5", Router: "Echo v5", Server: demo.HTTPServer(handler), Metrics: prommetrics.New}

// handler serves the routes with Echo v5 and ratekitecho5.
func handler(rt *demo.Routes) (http.Handler, error) {
	ip, err := ratekitecho5.IP(rt.IPOptions...) // ratekitecho5.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitecho5.WithHeaders(rt.Headers)
	var limited echo.MiddlewareFunc
	login := []echo.MiddlewareFunc{ratekitecho5.New(rt.Login, ip, headers)}
	if rt.Rules != nil {
		limited = ratekitecho5.Rules(rt.Rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitecho5.New(rt.Main, demo.PickKey(rt.Key, ip, ratekitecho5.Header,
			func(name string) ratekitecho5.Key { return ratekitecho5.Adapt(keyfuncs.Query(name)) }), headers)
	}
	text := func(body string) echo.HandlerFunc {
		return func(c *echo.Context) error { return c.Blob(http.StatusOK, demo.TextPlain, []byte(body)) }
	}

	e := echo.New() // Echo v5 prints no banner: the demo's http.Server serves e
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		e.Use(ratekitecho5.Concurrency(rt.InFlight, ip))
	}
	e.Match(demo.GetHead, "/", text(demo.Hello), limited)
	e.Match(demo.GetHead, "/healthz", text(demo.OK))
	if rt.Metrics != nil {
		e.Match(demo.GetHead, "/metrics", echo.WrapHandler(rt.Metrics))
	}
	e.POST("/login", text(demo.LoggedIn), login...)
	// Authentication first: the limiter queues only a customer's orders.
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if !demo.Authenticate(c.Request()) {
				demo.Refuse(c.Response())
				return nil
			}
			return next(c)
		}
	}
	e.POST("/orders", echo.WrapHandler(rt.Orders.Place), auth, ratekitecho5.New(rt.Orders.Limiter, ip, headers, ratekitecho5.WithQueue(rt.Orders.Offer)))
	e.POST("/reports", echo.WrapHandler(rt.Reports.Build), ratekitecho5.New(rt.Reports.Limiter, ip, headers), ratekitecho5.Concurrency(rt.Reports.InFlight, ip))
	e.Match(demo.GetHead, "/upstream", echo.WrapHandler(rt.Upstream))
	// Other paths, and other methods on these paths (Echo's 405).
	for _, path := range demo.RoutePaths {
		e.RouteNotFound(path, echo.WrapHandler(http.HandlerFunc(http.NotFound)), limited)
	}
	return e, nil
}
