package main

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"time"

	fiber "github.com/gofiber/fiber/v3"
	echo "github.com/labstack/echo/v5"

	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	"github.com/ratekit/ratekit/keyfuncs"
)

// This file wires the routes into the current majors of Echo (v5) and
// Fiber (v3), beside their previous majors in frameworks.go: the same
// routes and answers, through the modules echo5 and fiber3.

// echo5Handler serves the routes with Echo v5 and ratekitecho5.
func echo5Handler(rt *routes) (http.Handler, error) {
	ip, err := ratekitecho5.IP(rt.ipOptions...) // ratekitecho5.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitecho5.WithHeaders(rt.headers)
	var limited echo.MiddlewareFunc
	login := []echo.MiddlewareFunc{ratekitecho5.New(rt.login, ip, headers)}
	if rt.rules != nil {
		limited = ratekitecho5.Rules(rt.rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitecho5.New(rt.main, pickKey(rt.key, ip, ratekitecho5.Header,
			func(name string) ratekitecho5.Key { return ratekitecho5.Adapt(keyfuncs.Query(name)) }), headers)
	}
	text := func(body string) echo.HandlerFunc {
		return func(c *echo.Context) error { return c.Blob(http.StatusOK, textPlain, []byte(body)) }
	}

	e := echo.New() // Echo v5 prints no banner: the demo's http.Server serves e
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		e.Use(ratekitecho5.Concurrency(rt.inFlight, ip))
	}
	e.Match(getHead, "/", text(hello), limited)
	e.Match(getHead, "/healthz", text(ok))
	if rt.metrics != nil {
		e.Match(getHead, "/metrics", echo.WrapHandler(rt.metrics))
	}
	e.POST("/login", text(loggedIn), login...)
	e.POST("/orders", echo.WrapHandler(rt.orders.place), ratekitecho5.New(rt.orders.limiter, ip, headers, ratekitecho5.WithQueue(rt.orders.offer)))
	e.POST("/reports", echo.WrapHandler(rt.reports.build), ratekitecho5.New(rt.reports.limiter, ip, headers), ratekitecho5.Concurrency(rt.reports.inFlight, ip))
	e.Match(getHead, "/upstream", echo.WrapHandler(rt.upstream))
	// Other paths, and other methods on these paths (Echo's 405).
	for _, path := range routePaths {
		e.RouteNotFound(path, echo.WrapHandler(http.HandlerFunc(http.NotFound)), limited)
	}
	return e, nil
}

// fiber3App serves the routes with Fiber v3 and ratekitfiber3. Fiber does
// not serve net/http: fiber3Server runs the app.
func fiber3App(rt *routes) (*fiber.App, error) {
	ip, err := ratekitfiber3.IP(rt.ipOptions...) // ratekitfiber3.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitfiber3.WithHeaders(rt.headers)
	var limited fiber.Handler
	login := []any{ratekitfiber3.New(rt.login, ip, headers)}
	if rt.rules != nil {
		limited = ratekitfiber3.Rules(rt.rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitfiber3.New(rt.main, pickKey(rt.key, ip, ratekitfiber3.Header, fiber3Query), headers)
	}
	text := func(status int, body string) fiber.Handler {
		return func(c fiber.Ctx) error {
			c.Set(fiber.HeaderContentType, textPlain)
			return c.Status(status).SendString(body)
		}
	}

	app := fiber.New(fiber.Config{
		StrictRouting: true, // "/healthz/" is not "/healthz",
		CaseSensitive: true, // nor is "/HEALTHZ", as in net/http
		ReadTimeout:   10 * time.Second,
	})
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		app.Use(ratekitfiber3.Concurrency(rt.inFlight, ip))
	}
	// HEAD explicitly: Fiber v3 adds the HEAD routes of GET routes when it
	// starts, after every route registered, so the app.Use below would
	// answer them first.
	app.Add(getHead, "/", limited, text(http.StatusOK, hello))
	app.Add(getHead, "/healthz", text(http.StatusOK, ok))
	if rt.metrics != nil {
		app.Add(getHead, "/metrics", rt.metrics) // Fiber v3 adapts an http.Handler itself
	}
	app.Post("/login", login[0], append(login[1:], text(http.StatusOK, loggedIn))...)
	app.Post("/orders", ratekitfiber3.New(rt.orders.limiter, ip, headers, ratekitfiber3.WithQueue(rt.orders.offer)), rt.orders.place)
	app.Post("/reports", ratekitfiber3.New(rt.reports.limiter, ip, headers), ratekitfiber3.Concurrency(rt.reports.inFlight, ip), rt.reports.build)
	app.Add(getHead, "/upstream", detached(rt.upstream))
	other := text(http.StatusNotFound, notFound)
	app.Use(limited, func(c fiber.Ctx) error { // every other request
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff") // as http.NotFound
		return other(c)
	})
	return app, nil
}

// fiber3Query is the key of the named query parameter under Fiber v3: as
// fiberQuery, keyfuncs.Query applied to a copy of the raw query.
func fiber3Query(name string) ratekitfiber3.Key {
	query := keyfuncs.Query(name)
	return func(c fiber.Ctx) (string, error) {
		raw := string(c.Request().URI().QueryString())
		return query(&http.Request{URL: &url.URL{RawQuery: raw}})
	}
}

// fiber3Server runs a Fiber v3 app on a listener.
type fiber3Server struct{ app *fiber.App }

func (s fiber3Server) Serve(ln net.Listener) error {
	return s.app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
}
func (s fiber3Server) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
func (s fiber3Server) Close() error                       { return s.app.ShutdownWithTimeout(0) }
