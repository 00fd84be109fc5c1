// Command chi is the demo of ratekit (examples/demo) on Chi and
// ratekitchi, whose keys are keyfuncs.Func: the same routes, flags and
// answers as the default program, which serves them on net/http, with
// -metrics too. Only this program builds Chi:
//
//	go run ./examples/demo/chi -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	"github.com/ratekit/ratekit/keyfuncs"
)

func main() { demo.Main(program) }

// program serves the demo's routes with Chi.
var program = demo.Program{Framework: "chi", Router: "Chi", Server: demo.HTTPServer(handler), Metrics: prommetrics.New}

// handler serves the routes with Chi and ratekitchi.
func handler(rt *demo.Routes) (http.Handler, error) {
	ip, err := ratekitchi.IP(rt.IPOptions...)
	if err != nil {
		return nil, err
	}
	headers := ratekitchi.WithHeaders(rt.Headers)
	var limited func(http.Handler) http.Handler
	login := []func(http.Handler) http.Handler{ratekitchi.New(rt.Login, ip, headers)}
	if rt.Rules != nil {
		limited = ratekitchi.Rules(rt.Rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitchi.New(rt.Main, demo.PickKey(rt.Key, ip, ratekitchi.Header, keyfuncs.Query), headers)
	}

	r := chi.NewRouter()
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		r.Use(ratekitchi.Concurrency(rt.InFlight, ip))
	}
	r.Use(middleware.GetHead) // HEAD where GET is routed
	r.With(limited).Get("/", demo.TextHandler(demo.Hello))
	r.Get("/healthz", demo.TextHandler(demo.OK))
	if rt.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", rt.Metrics)
	}
	r.With(login...).Post("/login", demo.TextHandler(demo.LoggedIn))
	// Authentication first: the limiter queues only a customer's orders.
	r.With(demo.Authenticated, ratekitchi.New(rt.Orders.Limiter, ip, headers, ratekitchi.WithQueue(rt.Orders.Offer))).Method(http.MethodPost, "/orders", rt.Orders.Place)
	r.With(ratekitchi.New(rt.Reports.Limiter, ip, headers), ratekitchi.Concurrency(rt.Reports.InFlight, ip)).Method(http.MethodPost, "/reports", rt.Reports.Build)
	r.Method(http.MethodGet, "/upstream", rt.Upstream)
	other := limited(http.HandlerFunc(http.NotFound)).ServeHTTP
	r.NotFound(other)
	r.MethodNotAllowed(other)
	return r, nil
}
