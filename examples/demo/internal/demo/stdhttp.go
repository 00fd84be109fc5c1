package demo

import (
	"context"
	"net/http"

	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// StdHTTP is the default program: the routes on net/http's ServeMux and
// package stdhttp, without metrics. Every framework's program answers as
// it does: the same bodies, the headers and problem-details body of the
// middleware (the same in every adapter), and for every other request
// net/http's 404, after the limit of GET /.
var StdHTTP = Program{Framework: "stdhttp", Router: "net/http", Server: HTTPServer(ServeMux)}

// ServeMux serves the routes with net/http's ServeMux and package stdhttp.
func ServeMux(rt *Routes) (http.Handler, error) {
	ip, err := keyfuncs.IP(rt.IPOptions...) // keyfuncs.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	key := PickKey(rt.Key, ip, keyfuncs.Header, keyfuncs.Query)

	app := http.NewServeMux() // what GET / limits
	app.HandleFunc("GET /{$}", TextHandler(Hello))
	app.HandleFunc("/", http.NotFound) // POST / too: 404, not 405

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", TextHandler(OK))
	if rt.Metrics != nil {
		mux.Handle("GET /metrics", rt.Metrics)
	}
	headers := stdhttp.WithHeaders(rt.Headers)
	var login http.Handler = TextHandler(LoggedIn)
	var limited func(http.Handler) http.Handler
	if rt.Rules != nil {
		limited = stdhttp.Rules(rt.Rules, headers)
		login = limited(login)
	} else {
		limited = stdhttp.New(rt.Main, key, headers)
	}
	mux.Handle("POST /login", stdhttp.New(rt.Login, ip, headers)(login))
	// Authentication first: the limiter queues only a customer's orders.
	mux.Handle("POST /orders", Authenticated(stdhttp.New(rt.Orders.Limiter, ip, headers, stdhttp.WithQueue(rt.Orders.Offer))(rt.Orders.Place)))
	mux.Handle("POST /reports", stdhttp.New(rt.Reports.Limiter, ip, headers)(stdhttp.Concurrency(rt.Reports.InFlight, ip)(rt.Reports.Build)))
	mux.Handle("GET /upstream", rt.Upstream)
	mux.Handle("/", limited(app))
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		return stdhttp.Concurrency(rt.InFlight, ip)(mux), nil
	}
	return mux, nil
}

// Detached serves h with a request context that never ends, for Fiber.
// The context of a request that Fiber passes to an http.Handler is
// fasthttp's RequestCtx, which ends only when the server shuts down, and
// whose Done races with the shutdown when a context derived from it
// watches it from a goroutine of its own (fasthttp 1.69), as the timeout
// of GET /upstream's call would. That call is bounded by its timeout.
func Detached(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	})
}
