package ratekitecho_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
)

// benchWriter is the least a ResponseWriter can be. Its header map is
// cleared before each request, so the cost measured is the middleware's,
// not that of growing a fresh map (as in stdhttp's benchmark).
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

var okBody = []byte("ok")

// server returns an Echo instance with the middleware mws (nil ones
// left out) and one route, and a function that serves one request to it
// in place.
func server(mws ...echo.MiddlewareFunc) func() int {
	e := echo.New()
	for _, mw := range mws {
		if mw != nil {
			e.Use(mw)
		}
	}
	e.GET("/", func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMETextPlainCharsetUTF8, okBody)
	})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.10:4711"
	w := &benchWriter{h: make(http.Header, 8)}
	return func() int {
		clear(w.h)
		w.status = 0
		e.ServeHTTP(w, r)
		return w.status
	}
}

// never is a token bucket that a benchmark never exhausts: 4000 requests
// per 100 µs, as in stdhttp's benchmark (a count below 4096, the largest
// number core formats without allocating).
func never() *core.Limiter {
	return core.Must(core.NewLimiter(core.Limit{Name: "bench", Algorithm: core.TokenBucket,
		Rate: core.Rate{Count: 4000, Period: 100 * time.Microsecond}}))
}

func constant(echo.Context) (string, error) { return "client", nil }

// noop is the least middleware Echo can have.
func noop(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return next(c) }
}

// TestAllocs: on the allowed path ratekit allocates nothing of its own,
// not even the closure that Echo makes every middleware pay for.
//
// Echo applies middleware anew for every request (applyMiddleware in
// ServeHTTP, for e.Use, group and route middleware alike), so a
// middleware costs Echo one allocation per request: the handler closure
// that its MiddlewareFunc returns, which holds next, as the no-op
// middleware shows. ratekit's keeps a handler for each route it is the
// innermost middleware of (see chains), so it adds no allocation to
// Echo's there. In front of another middleware, whose closure is new for
// every request, it costs what a no-op one costs, and with more routes
// than its table has slots, never more.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	if raceEnabled {
		t.Skip("allocation counts: under the race detector, sync.Pool drops pooled values at random")
	}
	count := func(serve func() int) float64 {
		t.Helper()
		if s := serve(); s != http.StatusOK {
			t.Fatalf("status %d", s)
		}
		return testing.AllocsPerRun(1000, func() { serve() })
	}
	alone := count(server())
	withNoop := count(server(noop))
	twoNoops := count(server(noop, noop))
	if withNoop != alone+1 || twoNoops != alone+2 {
		t.Fatalf("a no-op middleware costs Echo %v allocs, two %v; expected 1 and 2", withNoop-alone, twoNoops-alone)
	}
	innermost := map[string]float64{
		"constant key": count(server(ratekitecho.New(never(), constant))),
		"PeerIP":       count(server(ratekitecho.New(never(), ratekitecho.PeerIP))),
		"config":       count(server(ratekitecho.NewWithConfig(ratekitecho.Config{Limiter: never()}))),
		"after no-op":  count(server(noop, ratekitecho.New(never(), ratekitecho.PeerIP))) - 1,
	}
	for name, n := range innermost {
		if n != alone {
			t.Errorf("ratekit (%s): %v allocs, echo alone %v", name, n, alone)
		}
	}
	if n := count(server(ratekitecho.New(never(), ratekitecho.PeerIP), noop)); n != twoNoops {
		t.Errorf("ratekit in front of a no-op middleware: %v allocs, two no-op middlewares %v", n, twoNoops)
	}
	// 1000 routes, each requested in turn, after a first pass.
	manyRoutes := func(mw echo.MiddlewareFunc) float64 {
		e := echo.New()
		e.Use(mw)
		reqs := make([]*http.Request, 1000)
		for i := range reqs {
			p := fmt.Sprintf("/r%d", i)
			e.GET(p, func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMETextPlainCharsetUTF8, okBody) })
			reqs[i] = httptest.NewRequest(http.MethodGet, p, nil)
			reqs[i].RemoteAddr = "192.0.2.10:4711"
		}
		w := &benchWriter{h: make(http.Header, 8)}
		for _, r := range reqs { // the first request to each route keeps its handler
			e.ServeHTTP(w, r)
		}
		i := 0
		return count(func() int {
			clear(w.h)
			w.status = 0
			e.ServeHTTP(w, reqs[i%len(reqs)])
			i++
			return max(w.status, http.StatusOK)
		})
	}
	if n, base := manyRoutes(ratekitecho.New(never(), ratekitecho.PeerIP)), manyRoutes(noop); n > base {
		t.Errorf("ratekit on 1000 routes: %v allocs, a no-op middleware %v", n, base)
	}
}

// BenchmarkMiddleware compares Echo alone, with one and two no-op middlewares, with
// ratekit (a token bucket never exhausted, keyed by a constant and by the
// peer address, with its three X-Ratelimit-* headers and without, alone
// and in front of a no-op middleware) and with Echo's own
// middleware.RateLimiter on its memory store configured alike (a rate and
// burst never reached, keyed by its default, c.RealIP()).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mws  []echo.MiddlewareFunc
	}{
		{"framework", nil},
		{"framework+noop", []echo.MiddlewareFunc{noop}},
		{"framework+noop+noop", []echo.MiddlewareFunc{noop, noop}},
		{"ratekit/constant", []echo.MiddlewareFunc{ratekitecho.New(never(), constant)}},
		{"ratekit/PeerIP", []echo.MiddlewareFunc{ratekitecho.New(never(), ratekitecho.PeerIP)}},
		// In front of another middleware: its next handler is new for
		// every request, so its handler is built anew too.
		{"ratekit/PeerIP+noop", []echo.MiddlewareFunc{ratekitecho.New(never(), ratekitecho.PeerIP), noop}},
		// Echo's RateLimiter sets no header: like for like.
		{"ratekit/PeerIP/no-headers", []echo.MiddlewareFunc{ratekitecho.New(never(), ratekitecho.PeerIP, ratekitecho.WithHeaders(answer.NoHeaders))}},
		{"echo-ratelimiter", []echo.MiddlewareFunc{middleware.RateLimiter(middleware.NewRateLimiterMemoryStore(1e9))}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve := server(bc.mws...)
			if s := serve(); s != http.StatusOK {
				b.Fatalf("status %d", s)
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			if s := serve(); s != http.StatusOK {
				b.Fatalf("status %d: the benchmark must stay on the allowed path", s)
			}
		})
	}
}
