package stdhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// Router stands in for a router such as Chi, whose Use method takes
// func(http.Handler) http.Handler middleware: the middleware returned by
// stdhttp.New plugs into it unchanged.
type Router struct {
	mux         *http.ServeMux
	middlewares []func(http.Handler) http.Handler
}

func NewRouter() *Router { return &Router{mux: http.NewServeMux()} }

// Use adds middleware around every route.
func (rt *Router) Use(mw ...func(http.Handler) http.Handler) {
	rt.middlewares = append(rt.middlewares, mw...)
}

// Get adds a GET route.
func (rt *Router) Get(pattern string, h http.HandlerFunc) { rt.mux.Handle("GET "+pattern, h) }

func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var h http.Handler = rt.mux
	for i := len(rt.middlewares) - 1; i >= 0; i-- {
		h = rt.middlewares[i](h)
	}
	h.ServeHTTP(w, r)
}

func Example_router() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerSecond(5)}))

	r := NewRouter()
	r.Use(stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithHeaders(answer.IETF)))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })

	req := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Body.String())
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 hello
	//
	// RateLimit-Policy: "api";q=5;w=1
}
