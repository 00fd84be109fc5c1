// Command gin is the demo of ratekit (examples/demo) on Gin and
// ratekitgin: the same routes, flags and answers as the default program,
// which serves them on net/http, with -metrics too. Only this program
// builds Gin:
//
//	go run ./examples/demo/gin -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
)

func main() { demo.Main(program) }

// program serves the demo's routes with Gin.
var program = demo.Program{Framework: "gin", Router: "Gin", Server: demo.HTTPServer(handler), Metrics: prommetrics.New}

// handler serves the routes with Gin and ratekitgin.
func handler(rt *demo.Routes) (http.Handler, error) {
	ip, err := ratekitgin.IP(rt.IPOptions...) // ratekitgin.PeerIP, but for -trusted-proxies and -ipv6-prefix
	if err != nil {
		return nil, err
	}
	headers := ratekitgin.WithHeaders(rt.Headers)
	var limited gin.HandlerFunc
	login := []gin.HandlerFunc{ratekitgin.New(rt.Login, ip, headers)}
	if rt.Rules != nil {
		limited = ratekitgin.Rules(rt.Rules, headers)
		login = append(login, limited)
	} else {
		limited = ratekitgin.New(rt.Main, demo.PickKey(rt.Key, ip, ratekitgin.Header,
			func(name string) ratekitgin.Key { return ratekitgin.Adapt(keyfuncs.Query(name)) }), headers)
	}
	text := func(body string) gin.HandlerFunc {
		return func(c *gin.Context) { c.Data(http.StatusOK, demo.TextPlain, []byte(body)) }
	}

	gin.SetMode(gin.ReleaseMode) // no debug output
	r := gin.New()               // no logger
	r.RedirectTrailingSlash = false
	// -elastic: count every request in flight.
	if rt.InFlight != nil {
		r.Use(ratekitgin.Concurrency(rt.InFlight, ip))
	}
	r.Match(demo.GetHead, "/", limited, text(demo.Hello))
	r.Match(demo.GetHead, "/healthz", text(demo.OK))
	if rt.Metrics != nil {
		r.Match(demo.GetHead, "/metrics", gin.WrapH(rt.Metrics))
	}
	r.POST("/login", append(login, text(demo.LoggedIn))...)
	// Authentication first: the limiter queues only a customer's orders.
	auth := func(c *gin.Context) {
		if !demo.Authenticate(c.Request) {
			demo.Refuse(c.Writer)
			c.Abort()
		}
	}
	r.POST("/orders", auth, ratekitgin.New(rt.Orders.Limiter, ip, headers, ratekitgin.WithQueue(rt.Orders.Offer)), gin.WrapH(rt.Orders.Place))
	r.POST("/reports", ratekitgin.New(rt.Reports.Limiter, ip, headers), ratekitgin.Concurrency(rt.Reports.InFlight, ip), gin.WrapH(rt.Reports.Build))
	r.Match(demo.GetHead, "/upstream", gin.WrapH(rt.Upstream))
	r.NoRoute(limited, gin.WrapF(http.NotFound)) // other methods too
	return r, nil
}
