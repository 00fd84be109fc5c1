// Command echo is the demo of ratekit (examples/demo) on Echo v4 and
// ratekitecho: the same routes, flags and answers as the default program,
// which serves them on net/http, with -metrics too. Only this program
// builds Echo v4 (examples/demo/echo5 is Echo v5):
//
//	go run ./examples/demo/echo -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"net/http"

	"github.com/labstack/echo/v4"

	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	"github.com/ratekit/ratekit/keyfuncs"
)

func main() { demo.Main(program) }

// program serves the demo's routes with Echo v4.
var program = demo.Program{Framework: "echo", Router: "Echo v4", Server: demo.HTTPServer(handler), Metrics: prommetrics.New}

// handler serves the routes with Echo and ratekitecho.
func handler(rt *demo.Routes) (http.Handler, error) {
	ip, err := ratekitecho.IP(rt.IPOptions...) // ratekitecho.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitecho.WithHeaders(rt.Headers)
	var limited echo.MiddlewareFunc
	login := []echo.MiddlewareFunc{ratekitecho.New(rt.Login, ip, headers)}
	if rt.Rules != nil {
		limited = ratekitecho.Rules(rt.Rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitecho.New(rt.Main, demo.PickKey(rt.Key, ip, ratekitecho.Header,
			func(name string) ratekitecho.Key { return ratekitecho.Adapt(keyfuncs.Query(name)) }), headers)
	}
	text := func(body string) echo.HandlerFunc {
		return func(c echo.Context) error { return c.Blob(http.StatusOK, demo.TextPlain, []byte(body)) }
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true // (printed by e.Start only)
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		e.Use(ratekitecho.Concurrency(rt.InFlight, ip))
	}
	e.Match(demo.GetHead, "/", text(demo.Hello), limited)
	e.Match(demo.GetHead, "/healthz", text(demo.OK))
	if rt.Metrics != nil {
		e.Match(demo.GetHead, "/metrics", echo.WrapHandler(rt.Metrics))
	}
	e.POST("/login", text(demo.LoggedIn), login...)
	// Authentication first: the limiter queues only a customer's orders.
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !demo.Authenticate(c.Request()) {
				demo.Refuse(c.Response())
				return nil
			}
			return next(c)
		}
	}
	e.POST("/orders", echo.WrapHandler(rt.Orders.Place), auth, ratekitecho.New(rt.Orders.Limiter, ip, headers, ratekitecho.WithQueue(rt.Orders.Offer)))
	e.POST("/reports", echo.WrapHandler(rt.Reports.Build), ratekitecho.New(rt.Reports.Limiter, ip, headers), ratekitecho.Concurrency(rt.Reports.InFlight, ip))
	e.Match(demo.GetHead, "/upstream", echo.WrapHandler(rt.Upstream))
	// Other paths, and other methods on these paths (Echo's 405).
	for _, path := range demo.RoutePaths {
		e.RouteNotFound(path, echo.WrapHandler(http.HandlerFunc(http.NotFound)), limited)
	}
	return e, nil
}
