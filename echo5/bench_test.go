package ratekitecho5_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
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

// server returns an Echo instance with middleware mw (if any) and one
// route, and a function that serves one request to it in place.
func server(mw echo.MiddlewareFunc) func() int {
	e := echo.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/", func(c *echo.Context) error {
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

func constant(*echo.Context) (string, error) { return "client", nil }

// noop is the least middleware Echo can have.
func noop(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error { return next(c) }
}

// TestAllocs: on the allowed path ratekit allocates nothing of its own.
//
// Echo v5 compiles its middleware chains once, when e.Use, a group or a
// route adds middleware (Echo v4 applied them anew for every request, one
// closure per middleware), so a middleware costs Echo v5 no allocation
// per request: Echo alone, Echo with a middleware that only calls next,
// and Echo with ratekit, keyed by a constant, by PeerIP or by ClientIP,
// allocate alike. (The one allocation of Echo alone is the handler's
// Content-Type field.)
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
		n := testing.AllocsPerRun(1000, func() { serve() })
		if s := serve(); s != http.StatusOK {
			t.Fatalf("status %d: the count must stay on the allowed path", s)
		}
		return n
	}
	alone := count(server(nil))
	withNoop := count(server(noop))
	withConstant := count(server(ratekitecho5.New(never(), constant)))
	withPeerIP := count(server(ratekitecho5.New(never(), ratekitecho5.PeerIP)))
	withClientIP := count(server(ratekitecho5.New(never(), ratekitecho5.ClientIP)))
	withConfig := count(server(ratekitecho5.NewWithConfig(ratekitecho5.Config{Limiter: never()})))
	withShorthand := count(server(ratekitecho5.LimitByIP(4000, 100*time.Microsecond)))
	t.Logf("allocs/request: echo %v, echo + no-op middleware %v, +ratekit (constant key) %v, +ratekit (PeerIP) %v, "+
		"+ratekit (ClientIP) %v, +ratekit (config) %v, +ratekit (LimitByIP) %v",
		alone, withNoop, withConstant, withPeerIP, withClientIP, withConfig, withShorthand)
	if alone != 1 {
		t.Errorf("echo alone: %v allocs, expected 1 (the handler's Content-Type field)", alone)
	}
	for name, n := range map[string]float64{
		"no-op middleware":   withNoop,
		"ratekit, constant":  withConstant,
		"ratekit, PeerIP":    withPeerIP,
		"ratekit, ClientIP":  withClientIP,
		"ratekit, config":    withConfig,
		"ratekit, LimitByIP": withShorthand,
	} {
		if n != alone {
			t.Errorf("echo with %s: %v allocs, echo alone %v", name, n, alone)
		}
	}
}

// BenchmarkMiddleware compares Echo alone, with a no-op middleware, with
// ratekit (a token bucket never exhausted, keyed by a constant and by the
// peer address, with its three X-Ratelimit-* headers and without) and
// with Echo's own middleware.RateLimiter on its memory store configured
// alike (a rate and burst never reached, keyed by its default,
// c.RealIP(), which is the peer address in Echo v5).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mw   echo.MiddlewareFunc
	}{
		{"framework", nil},
		{"framework+noop", noop},
		{"ratekit/constant", ratekitecho5.New(never(), constant)},
		{"ratekit/PeerIP", ratekitecho5.New(never(), ratekitecho5.PeerIP)},
		// Echo's RateLimiter sets no header: like for like.
		{"ratekit/PeerIP/no-headers", ratekitecho5.New(never(), ratekitecho5.PeerIP, ratekitecho5.WithHeaders(answer.NoHeaders))},
		{"echo-ratelimiter", middleware.RateLimiter(middleware.NewRateLimiterMemoryStore(1e9))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve := server(bc.mw)
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
