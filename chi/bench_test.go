package ratekitchi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
)

// benchWriter is the least a ResponseWriter can be. Its header map is
// cleared before each request, so the cost measured is the router's and
// the middleware's, not that of growing a fresh map.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

var okBody = []byte("ok")

// router returns a Chi router with middleware mw on every route (if any)
// and the route /users/{id}, with mwWith (if any) mounted on it with
// r.With; and a function that serves one request to it in place.
func router(mw, mwWith func(http.Handler) http.Handler) func() int {
	r := chi.NewRouter()
	if mw != nil {
		r.Use(mw)
	}
	rt := chi.Router(r)
	if mwWith != nil {
		rt = r.With(mwWith)
	}
	rt.Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(okBody) })
	req := httptest.NewRequest(http.MethodGet, "/users/42", nil)
	req.RemoteAddr = "192.0.2.10:4711"
	w := &benchWriter{h: make(http.Header, 8)}
	return func() int {
		clear(w.h)
		w.status = http.StatusOK
		r.ServeHTTP(w, req)
		return w.status
	}
}

// never is a token bucket that a benchmark never exhausts: 4000 requests
// per 100 µs, as in stdhttp's benchmark (a count below 4096, the largest
// number package answer formats without allocating).
func never() *core.Limiter {
	return core.Must(core.NewLimiter(core.Limit{Name: "bench", Algorithm: core.TokenBucket,
		Rate: core.Rate{Count: 4000, Period: 100 * time.Microsecond}}))
}

func constant(*http.Request) (string, error) { return "client", nil }

// TestAllocs: on the allowed path the middleware allocates nothing, with a
// constant key and with PeerIP alike (an IPv4 peer's key is a substring of
// r.RemoteAddr). Chi's own allocations (the request copy that carries its
// route context) are the same with and without ratekit. Route costs what
// building "METHOD pattern" costs.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	count := func(serve func() int) float64 {
		t.Helper()
		if c := serve(); c != http.StatusOK {
			t.Fatalf("status %d", c)
		}
		return testing.AllocsPerRun(1000, func() { serve() })
	}
	alone := count(router(nil, nil))
	withConstant := count(router(ratekitchi.New(never(), constant), nil))
	withPeerIP := count(router(ratekitchi.New(never(), ratekitchi.PeerIP), nil))
	withRoute := count(router(nil, ratekitchi.New(never(), ratekitchi.Route)))
	t.Logf("allocs/request: chi %v, +ratekit (constant key) %v, +ratekit (PeerIP) %v, +ratekit (Route, r.With) %v",
		alone, withConstant, withPeerIP, withRoute)
	if withConstant != alone {
		t.Errorf("ratekit with a constant key: %v allocs, chi alone %v", withConstant, alone)
	}
	if withPeerIP != alone {
		t.Errorf("ratekit with PeerIP: %v allocs, chi alone %v", withPeerIP, alone)
	}
}

// BenchmarkMiddleware compares Chi alone with Chi and ratekit (a token
// bucket never exhausted) keyed by a constant, by the peer address, and by
// the route pattern on r.With. (httprate, Chi's usual limiter, is a module
// of its own and is benchmarked outside this module.)
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name       string
		mw, mwWith func(http.Handler) http.Handler
	}{
		{"framework", nil, nil},
		{"ratekit-constant", ratekitchi.New(never(), constant), nil},
		{"ratekit-peerip", ratekitchi.New(never(), ratekitchi.PeerIP), nil},
		{"ratekit-route", nil, ratekitchi.New(never(), ratekitchi.Route)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve := router(bc.mw, bc.mwWith)
			if c := serve(); c != http.StatusOK {
				b.Fatalf("status %d", c)
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			if c := serve(); c != http.StatusOK {
				b.Fatalf("status %d: the benchmark must stay on the allowed path", c)
			}
		})
	}
}
