// Command fiber3 is the demo of ratekit (examples/demo) on Fiber v3 and
// ratekitfiber3: the same routes, flags and answers as the default
// program, which serves them on net/http, with -metrics too. Only this
// program builds Fiber v3 and fasthttp (examples/demo/fiber is Fiber v2):
//
//	go run ./examples/demo/fiber3 -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"context"
	"net"
	"net/http"
	"net/url"

	fiber "github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	"github.com/ratekit/ratekit/keyfuncs"
)

func main() { demo.Main(program) }

// program serves the demo's routes with Fiber v3.
var program = demo.Program{Framework: "fiber3", Router: "Fiber v3", Server: server, Metrics: prommetrics.New}

// server returns the Fiber v3 app of the routes, which fiberServer runs:
// Fiber does not serve net/http.
func server(rt *demo.Routes) (demo.Server, error) {
	app, err := newApp(rt)
	if err != nil {
		return nil, err
	}
	return fiberServer{app}, nil
}

// newApp serves the routes with Fiber v3 and ratekitfiber3.
func newApp(rt *demo.Routes) (*fiber.App, error) {
	ip, err := ratekitfiber3.IP(rt.IPOptions...) // ratekitfiber3.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitfiber3.WithHeaders(rt.Headers)
	var limited fiber.Handler
	login := []any{ratekitfiber3.New(rt.Login, ip, headers)}
	if rt.Rules != nil {
		limited = ratekitfiber3.Rules(rt.Rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitfiber3.New(rt.Main, demo.PickKey(rt.Key, ip, ratekitfiber3.Header, query), headers)
	}
	text := func(status int, body string) fiber.Handler {
		return func(c fiber.Ctx) error {
			c.Set(fiber.HeaderContentType, demo.TextPlain)
			return c.Status(status).SendString(body)
		}
	}

	app := fiber.New(fiber.Config{
		StrictRouting: true,             // "/healthz/" is not "/healthz",
		CaseSensitive: true,             // nor is "/HEALTHZ", as in net/http
		ReadTimeout:   rt.Timeouts.Read, // fasthttp reads the header within it too
		WriteTimeout:  rt.Timeouts.Write,
		IdleTimeout:   rt.Timeouts.Idle,
	})
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		app.Use(ratekitfiber3.Concurrency(rt.InFlight, ip))
	}
	// HEAD explicitly: Fiber v3 adds the HEAD routes of GET routes when it
	// starts, after every route registered, so the app.Use below would
	// answer them first.
	app.Add(demo.GetHead, "/", limited, text(http.StatusOK, demo.Hello))
	app.Add(demo.GetHead, "/healthz", text(http.StatusOK, demo.OK))
	if rt.Metrics != nil {
		app.Add(demo.GetHead, "/metrics", rt.Metrics) // Fiber v3 adapts an http.Handler itself
	}
	app.Post("/login", login[0], append(login[1:], text(http.StatusOK, demo.LoggedIn))...)
	// Authentication first: the limiter queues only a customer's orders.
	auth := func(c fiber.Ctx) error {
		name, ok := demo.Customer(c.Get("Authorization"))
		if !ok {
			c.Set(demo.HeaderAuthWall, demo.OrdersRealm)
			c.Set(fiber.HeaderContentType, demo.TextPlain)
			return c.Status(http.StatusUnauthorized).SendString(demo.Unauthorized)
		}
		c.Request().Header.Set(demo.CustomerHeader, name)
		return c.Next()
	}
	app.Post("/orders", auth, ratekitfiber3.New(rt.Orders.Limiter, ip, headers, ratekitfiber3.WithQueue(rt.Orders.Offer)), rt.Orders.Place)
	app.Post("/reports", ratekitfiber3.New(rt.Reports.Limiter, ip, headers), ratekitfiber3.Concurrency(rt.Reports.InFlight, ip), rt.Reports.Build)
	app.Add(demo.GetHead, "/upstream", demo.Detached(rt.Upstream))
	other := text(http.StatusNotFound, demo.NotFound)
	app.Use(limited, func(c fiber.Ctx) error { // every other request
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff") // as http.NotFound
		return other(c)
	})
	return app, nil
}

// query is the key of the named query parameter under Fiber v3: as in
// the Fiber v2 program, keyfuncs.Query applied to a copy of the raw query.
func query(name string) ratekitfiber3.Key {
	q := keyfuncs.Query(name)
	return func(c fiber.Ctx) (string, error) {
		raw := string(c.Request().URI().QueryString())
		return q(&http.Request{URL: &url.URL{RawQuery: raw}})
	}
}

// fiberServer runs a Fiber v3 app on a listener.
type fiberServer struct{ app *fiber.App }

func (s fiberServer) Serve(ln net.Listener) error {
	return s.app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
}
func (s fiberServer) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
func (s fiberServer) Close() error                       { return s.app.ShutdownWithTimeout(0) }
