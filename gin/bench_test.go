package ratekitgin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	ratekitgin "github.com/ratekit/ratekit/gin"
)

// benchWriter is the least a ResponseWriter can be. Its header map is
// cleared before each request, so the cost measured is the middleware's,
// not that of growing a fresh map.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

var okBody = []byte("ok")

// engine returns a Gin engine with middleware mw (if any) and one route,
// and a function that serves one request to it from 192.0.2.10, in place:
// what the middleware costs is then visible.
func engine(mw gin.HandlerFunc) func() int {
	r := gin.New()
	if mw != nil {
		r.Use(mw)
	}
	r.GET("/", func(c *gin.Context) { _, _ = c.Writer.Write(okBody) })
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.10:4711"
	w := &benchWriter{h: make(http.Header, 8)}
	return func() int {
		clear(w.h)
		w.status = 0
		r.ServeHTTP(w, req)
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

func constant(*gin.Context) (string, error) { return "client", nil }

// TestAllocs: on the allowed path the middleware allocates nothing: Gin
// with ratekit allocates what Gin alone does, with a constant key and with
// PeerIP (an IPv4 peer's key is a substring of RemoteAddr). Under the
// race detector, sync.Pool drops Gin's pooled contexts at random, so the
// test is skipped there.
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
	alone := count(engine(nil))
	withConstant := count(engine(ratekitgin.New(never(), constant)))
	withPeerIP := count(engine(ratekitgin.New(never(), ratekitgin.PeerIP)))
	t.Logf("allocs/request: gin %v, +ratekit (constant key) %v, +ratekit (PeerIP) %v", alone, withConstant, withPeerIP)
	if withConstant != alone {
		t.Errorf("ratekit with a constant key: %v allocs, gin alone %v", withConstant, alone)
	}
	if withPeerIP != alone {
		t.Errorf("ratekit with PeerIP: %v allocs, gin alone %v", withPeerIP, alone)
	}
}

// BenchmarkMiddleware compares Gin alone with Gin and ratekit (a token
// bucket never exhausted, keyed by a constant and by the peer address).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mw   gin.HandlerFunc
	}{
		{"framework", nil},
		{"ratekit-constant", ratekitgin.New(never(), constant)},
		{"ratekit-peerip", ratekitgin.New(never(), ratekitgin.PeerIP)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve := engine(bc.mw)
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
