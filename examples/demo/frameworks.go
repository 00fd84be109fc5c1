package main

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/labstack/echo/v4"

	ratekitchi "github.com/ratekit/ratekit/chi"
	ratekitecho "github.com/ratekit/ratekit/echo"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// This file wires the routes into each framework: one function per
// framework, each with that framework's router and ratekit middleware. The
// limiters come built (see config.routes); only the wiring differs.
//
// Every framework answers alike: the bodies below, the headers and
// problem-details body of the middleware (the same in every adapter), and
// for every other request net/http's 404, after the limit of GET /. Each
// serves HEAD where it serves GET, as net/http does.

// The content type and bodies of the answers.
const (
	textPlain = "text/plain; charset=utf-8"
	hello     = "hello\n"
	ok        = "ok\n"
	loggedIn  = "logged in\n"
	notFound  = "404 page not found\n" // what http.NotFound writes
)

// server is what serve needs of a framework's server: *http.Server, or
// fiberServer.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// server returns the server of the named framework.
func (rt *routes) server(framework string) (server, error) {
	switch framework {
	case "fiber":
		app, err := fiberApp(rt)
		if err != nil {
			return nil, err
		}
		return fiberServer{app}, nil
	case "fiber3":
		app, err := fiber3App(rt)
		if err != nil {
			return nil, err
		}
		return fiber3Server{app}, nil
	}
	handler := stdhttpHandler
	switch framework {
	case "gin":
		handler = ginHandler
	case "echo":
		handler = echoHandler
	case "echo5":
		handler = echo5Handler
	case "chi":
		handler = chiHandler
	}
	h, err := handler(rt)
	if err != nil {
		return nil, err
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, nil
}

// textHandler is the net/http handler that answers body.
func textHandler(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", textPlain)
		_, _ = w.Write([]byte(body))
	}
}

// stdhttpHandler serves the routes with net/http's ServeMux and package
// stdhttp.
func stdhttpHandler(rt *routes) (http.Handler, error) {
	ip, err := keyfuncs.IP(rt.ipOptions...) // keyfuncs.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	key := pickKey(rt.key, ip, keyfuncs.Header, keyfuncs.Query)

	app := http.NewServeMux() // what GET / limits
	app.HandleFunc("GET /{$}", textHandler(hello))
	app.HandleFunc("/", http.NotFound) // POST / too: 404, not 405

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", textHandler(ok))
	if rt.metrics != nil {
		mux.Handle("GET /metrics", rt.metrics)
	}
	headers := stdhttp.WithHeaders(rt.headers)
	var login http.Handler = textHandler(loggedIn)
	var limited func(http.Handler) http.Handler
	if rt.rules != nil {
		limited = stdhttp.Rules(rt.rules, headers)
		login = limited(login)
	} else {
		limited = stdhttp.New(rt.main, key, headers)
	}
	mux.Handle("POST /login", stdhttp.New(rt.login, ip, headers)(login))
	mux.Handle("POST /orders", stdhttp.New(rt.orders.limiter, ip, headers, stdhttp.WithQueue(rt.orders.offer))(rt.orders.place))
	mux.Handle("POST /reports", stdhttp.New(rt.reports.limiter, ip, headers)(stdhttp.Concurrency(rt.reports.inFlight, ip)(rt.reports.build)))
	mux.Handle("GET /upstream", rt.upstream)
	mux.Handle("/", limited(app))
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		return stdhttp.Concurrency(rt.inFlight, ip)(mux), nil
	}
	return mux, nil
}

// chiHandler serves the routes with Chi and ratekitchi, whose keys are
// keyfuncs.Func.
func chiHandler(rt *routes) (http.Handler, error) {
	ip, err := ratekitchi.IP(rt.ipOptions...)
	if err != nil {
		return nil, err
	}
	headers := ratekitchi.WithHeaders(rt.headers)
	var limited func(http.Handler) http.Handler
	login := []func(http.Handler) http.Handler{ratekitchi.New(rt.login, ip, headers)}
	if rt.rules != nil {
		limited = ratekitchi.Rules(rt.rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitchi.New(rt.main, pickKey(rt.key, ip, ratekitchi.Header, keyfuncs.Query), headers)
	}

	r := chi.NewRouter()
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		r.Use(ratekitchi.Concurrency(rt.inFlight, ip))
	}
	r.Use(middleware.GetHead) // HEAD where GET is routed
	r.With(limited).Get("/", textHandler(hello))
	r.Get("/healthz", textHandler(ok))
	if rt.metrics != nil {
		r.Method(http.MethodGet, "/metrics", rt.metrics)
	}
	r.With(login...).Post("/login", textHandler(loggedIn))
	r.With(ratekitchi.New(rt.orders.limiter, ip, headers, ratekitchi.WithQueue(rt.orders.offer))).Method(http.MethodPost, "/orders", rt.orders.place)
	r.With(ratekitchi.New(rt.reports.limiter, ip, headers), ratekitchi.Concurrency(rt.reports.inFlight, ip)).Method(http.MethodPost, "/reports", rt.reports.build)
	r.Method(http.MethodGet, "/upstream", rt.upstream)
	other := limited(http.HandlerFunc(http.NotFound)).ServeHTTP
	r.NotFound(other)
	r.MethodNotAllowed(other)
	return r, nil
}

// getHead are the methods of the GET routes of Gin and Echo.
var getHead = []string{http.MethodGet, http.MethodHead}

// routePaths are the paths Echo routes other requests of (other methods
// on the routes' paths) and of every other path ("/*") to its 404.
var routePaths = []string{"/*", "/", "/healthz", "/metrics", "/login", "/orders", "/reports", "/upstream"}

// ginHandler serves the routes with Gin and ratekitgin.
func ginHandler(rt *routes) (http.Handler, error) {
	ip, err := ratekitgin.IP(rt.ipOptions...) // ratekitgin.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitgin.WithHeaders(rt.headers)
	var limited gin.HandlerFunc
	login := []gin.HandlerFunc{ratekitgin.New(rt.login, ip, headers)}
	if rt.rules != nil {
		limited = ratekitgin.Rules(rt.rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitgin.New(rt.main, pickKey(rt.key, ip, ratekitgin.Header,
			func(name string) ratekitgin.Key { return ratekitgin.Adapt(keyfuncs.Query(name)) }), headers)
	}
	text := func(body string) gin.HandlerFunc {
		return func(c *gin.Context) { c.Data(http.StatusOK, textPlain, []byte(body)) }
	}

	gin.SetMode(gin.ReleaseMode) // no debug output
	r := gin.New()               // no logger
	r.RedirectTrailingSlash = false
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		r.Use(ratekitgin.Concurrency(rt.inFlight, ip))
	}
	r.Match(getHead, "/", limited, text(hello))
	r.Match(getHead, "/healthz", text(ok))
	if rt.metrics != nil {
		r.Match(getHead, "/metrics", gin.WrapH(rt.metrics))
	}
	r.POST("/login", append(login, text(loggedIn))...)
	r.POST("/orders", ratekitgin.New(rt.orders.limiter, ip, headers, ratekitgin.WithQueue(rt.orders.offer)), gin.WrapH(rt.orders.place))
	r.POST("/reports", ratekitgin.New(rt.reports.limiter, ip, headers), ratekitgin.Concurrency(rt.reports.inFlight, ip), gin.WrapH(rt.reports.build))
	r.Match(getHead, "/upstream", gin.WrapH(rt.upstream))
	r.NoRoute(limited, gin.WrapF(http.NotFound)) // other methods too
	return r, nil
}

// echoHandler serves the routes with Echo and ratekitecho.
func echoHandler(rt *routes) (http.Handler, error) {
	ip, err := ratekitecho.IP(rt.ipOptions...) // ratekitecho.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitecho.WithHeaders(rt.headers)
	var limited echo.MiddlewareFunc
	login := []echo.MiddlewareFunc{ratekitecho.New(rt.login, ip, headers)}
	if rt.rules != nil {
		limited = ratekitecho.Rules(rt.rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitecho.New(rt.main, pickKey(rt.key, ip, ratekitecho.Header,
			func(name string) ratekitecho.Key { return ratekitecho.Adapt(keyfuncs.Query(name)) }), headers)
	}
	text := func(body string) echo.HandlerFunc {
		return func(c echo.Context) error { return c.Blob(http.StatusOK, textPlain, []byte(body)) }
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true // (printed by e.Start only)
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		e.Use(ratekitecho.Concurrency(rt.inFlight, ip))
	}
	e.Match(getHead, "/", text(hello), limited)
	e.Match(getHead, "/healthz", text(ok))
	if rt.metrics != nil {
		e.Match(getHead, "/metrics", echo.WrapHandler(rt.metrics))
	}
	e.POST("/login", text(loggedIn), login...)
	e.POST("/orders", echo.WrapHandler(rt.orders.place), ratekitecho.New(rt.orders.limiter, ip, headers, ratekitecho.WithQueue(rt.orders.offer)))
	e.POST("/reports", echo.WrapHandler(rt.reports.build), ratekitecho.New(rt.reports.limiter, ip, headers), ratekitecho.Concurrency(rt.reports.inFlight, ip))
	e.Match(getHead, "/upstream", echo.WrapHandler(rt.upstream))
	// Other paths, and other methods on these paths (Echo's 405).
	for _, path := range routePaths {
		e.RouteNotFound(path, echo.WrapHandler(http.HandlerFunc(http.NotFound)), limited)
	}
	return e, nil
}

// fiberApp serves the routes with Fiber and ratekitfiber. Fiber does not
// serve net/http: fiberServer runs the app.
func fiberApp(rt *routes) (*fiber.App, error) {
	ip, err := ratekitfiber.IP(rt.ipOptions...) // ratekitfiber.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitfiber.WithHeaders(rt.headers)
	var limited fiber.Handler
	login := []fiber.Handler{ratekitfiber.New(rt.login, ip, headers)}
	if rt.rules != nil {
		limited = ratekitfiber.Rules(rt.rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitfiber.New(rt.main, pickKey(rt.key, ip, ratekitfiber.Header, fiberQuery), headers)
	}
	text := func(status int, body string) fiber.Handler {
		return func(c *fiber.Ctx) error {
			c.Set(fiber.HeaderContentType, textPlain)
			return c.Status(status).SendString(body)
		}
	}

	app := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		StrictRouting:         true, // "/healthz/" is not "/healthz",
		CaseSensitive:         true, // nor is "/HEALTHZ", as in net/http
		ReadTimeout:           10 * time.Second,
	})
	// -elastic: count every request in flight.
	if rt.inFlight != nil {
		app.Use(ratekitfiber.Concurrency(rt.inFlight, ip))
	}
	app.Get("/", limited, text(http.StatusOK, hello)) // Get routes HEAD too
	app.Get("/healthz", text(http.StatusOK, ok))
	if rt.metrics != nil {
		app.Get("/metrics", adaptor.HTTPHandler(rt.metrics))
	}
	app.Post("/login", append(login, text(http.StatusOK, loggedIn))...)
	app.Post("/orders", ratekitfiber.New(rt.orders.limiter, ip, headers, ratekitfiber.WithQueue(rt.orders.offer)), adaptor.HTTPHandler(rt.orders.place))
	app.Post("/reports", ratekitfiber.New(rt.reports.limiter, ip, headers), ratekitfiber.Concurrency(rt.reports.inFlight, ip), adaptor.HTTPHandler(rt.reports.build))
	app.Get("/upstream", adaptor.HTTPHandler(detached(rt.upstream)))
	other := text(http.StatusNotFound, notFound)
	app.Use(limited, func(c *fiber.Ctx) error { // every other request
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff") // as http.NotFound
		return other(c)
	})
	return app, nil
}

// fiberQuery is the key of the named query parameter under Fiber, which
// has no helper for it: keyfuncs.Query applied to a copy of the raw query
// (a key must not share Fiber's memory), so that the parameter is read, and
// its absence reported, exactly as under net/http.
func fiberQuery(name string) ratekitfiber.Key {
	query := keyfuncs.Query(name)
	return func(c *fiber.Ctx) (string, error) {
		raw := string(c.Request().URI().QueryString())
		return query(&http.Request{URL: &url.URL{RawQuery: raw}})
	}
}

// detached serves h, under Fiber, with a request context that never ends.
// The context of a request that Fiber passes to an http.Handler is
// fasthttp's RequestCtx, which ends only when the server shuts down, and
// whose Done races with the shutdown when a context derived from it
// watches it from a goroutine of its own (fasthttp 1.69), as the timeout
// of GET /upstream's call would. That call is bounded by its timeout.
func detached(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	})
}

// fiberServer runs a Fiber app on a listener.
type fiberServer struct{ app *fiber.App }

func (s fiberServer) Serve(ln net.Listener) error        { return s.app.Listener(ln) }
func (s fiberServer) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
func (s fiberServer) Close() error                       { return s.app.ShutdownWithTimeout(0) }
