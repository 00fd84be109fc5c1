// Command fiber is the demo of ratekit (examples/demo) on Fiber v2 and
// ratekitfiber: the same routes, flags and answers as the default
// program, which serves them on net/http, with -metrics too. Only this
// program builds Fiber v2 and fasthttp (examples/demo/fiber3 is Fiber v3):
//
//	go run ./examples/demo/fiber -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"context"
	"net"
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	"github.com/ratekit/ratekit/keyfuncs"
)

func main() { demo.Main(program) }

// program serves the demo's routes with Fiber v2.
var program = demo.Program{Framework: "fiber", Router: "Fiber v2", Server: server, Metrics: prommetrics.New}

// server returns the Fiber app of the routes, which fiberServer runs:
// Fiber does not serve net/http.
func server(rt *demo.Routes) (demo.Server, error) {
	app, err := newApp(rt)
	if err != nil {
		return nil, err
	}
	return fiberServer{app}, nil
}

// newApp serves the routes with Fiber and ratekitfiber.
func newApp(rt *demo.Routes) (*fiber.App, error) {
	ip, err := ratekitfiber.IP(rt.IPOptions...) // ratekitfiber.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitfiber.WithHeaders(rt.Headers)
	var limited fiber.Handler
	login := []fiber.Handler{ratekitfiber.New(rt.Login, ip, headers)}
	if rt.Rules != nil {
		limited = ratekitfiber.Rules(rt.Rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitfiber.New(rt.Main, demo.PickKey(rt.Key, ip, ratekitfiber.Header, query), headers)
	}
	text := func(status int, body string) fiber.Handler {
		return func(c *fiber.Ctx) error {
			c.Set(fiber.HeaderContentType, demo.TextPlain)
			return c.Status(status).SendString(body)
		}
	}

	app := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		StrictRouting:         true,             // "/healthz/" is not "/healthz",
		CaseSensitive:         true,             // nor is "/HEALTHZ", as in net/http
		ReadTimeout:           rt.Timeouts.Read, // fasthttp reads the header within it too
		WriteTimeout:          rt.Timeouts.Write,
		IdleTimeout:           rt.Timeouts.Idle,
	})
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		app.Use(ratekitfiber.Concurrency(rt.InFlight, ip))
	}
	app.Get("/", limited, text(http.StatusOK, demo.Hello)) // Get routes HEAD too
	app.Get("/healthz", text(http.StatusOK, demo.OK))
	if rt.Metrics != nil {
		app.Get("/metrics", adaptor.HTTPHandler(rt.Metrics))
	}
	app.Post("/login", append(login, text(http.StatusOK, demo.LoggedIn))...)
	// Authentication first: the limiter queues only a customer's orders.
	auth := func(c *fiber.Ctx) error {
		name, ok := demo.Customer(c.Get("Authorization"))
		if !ok {
			c.Set(demo.HeaderAuthWall, demo.OrdersRealm)
			c.Set(fiber.HeaderContentType, demo.TextPlain)
			return c.Status(http.StatusUnauthorized).SendString(demo.Unauthorized)
		}
		c.Request().Header.Set(demo.CustomerHeader, name)
		return c.Next()
	}
	app.Post("/orders", auth, ratekitfiber.New(rt.Orders.Limiter, ip, headers, ratekitfiber.WithQueue(rt.Orders.Offer)), adaptor.HTTPHandler(rt.Orders.Place))
	app.Post("/reports", ratekitfiber.New(rt.Reports.Limiter, ip, headers), ratekitfiber.Concurrency(rt.Reports.InFlight, ip), adaptor.HTTPHandler(rt.Reports.Build))
	app.Get("/upstream", adaptor.HTTPHandler(demo.Detached(rt.Upstream)))
	other := text(http.StatusNotFound, demo.NotFound)
	app.Use(limited, func(c *fiber.Ctx) error { // every other request
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff") // as http.NotFound
		return other(c)
	})
	return app, nil
}

// query is the key of the named query parameter under Fiber, which has
// no helper for it: keyfuncs.Query applied to a copy of the raw query (a
// key must not share Fiber's memory), so that the parameter is read, and
// its absence reported, exactly as under net/http.
func query(name string) ratekitfiber.Key {
	q := keyfuncs.Query(name)
	return func(c *fiber.Ctx) (string, error) {
		raw := string(c.Request().URI().QueryString())
		return q(&http.Request{URL: &url.URL{RawQuery: raw}})
	}
}

// fiberServer runs a Fiber app on a listener.
type fiberServer struct{ app *fiber.App }

func (s fiberServer) Serve(ln net.Listener) error        { return s.app.Listener(ln) }
func (s fiberServer) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
func (s fiberServer) Close() error                       { return s.app.ShutdownWithTimeout(0) }
