package stdhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// benchWriter is the least a ResponseWriter can be. Its header map is
// cleared before each request, so the cost measured is the middleware's,
// not that of growing a fresh map.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header           { return w.h }
func (w *benchWriter) Write(p []byte) (int, error)   { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)        { w.status = status }
func (w *benchWriter) reset()                        { clear(w.h); w.status = 0 }
func okBench(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(okBody) }

var okBody = []byte("ok")

func BenchmarkMiddleware(b *testing.B) {
	ip, err := keyfuncs.IP()
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, h http.Handler) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:4711"
		w := &benchWriter{h: make(http.Header, 8)}
		h.ServeHTTP(w, r) // the key is tracked from here on
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			w.reset()
			h.ServeHTTP(w, r)
		}
		b.StopTimer()
		if w.status != 0 && w.status != http.StatusOK {
			b.Fatalf("status %d: the benchmark must stay on the allowed path", w.status)
		}
	}

	b.Run("bare", func(b *testing.B) { run(b, http.HandlerFunc(okBench)) })
	for _, algo := range algorithms {
		b.Run(algo.String(), func(b *testing.B) {
			// 4000 requests per 100 µs (4 x 10^7 per second), far more than
			// one goroutine sends, so every request is admitted. The count
			// stays below 4096, the numbers package answer formats without
			// allocating; the short period also keeps the sliding window
			// log, which stores every request, small.
			lim, err := core.NewLimiter(core.Limit{
				Name:      "bench",
				Algorithm: algo,
				Rate:      core.Rate{Count: 4000, Period: 100 * time.Microsecond},
			})
			if err != nil {
				b.Fatal(err)
			}
			run(b, stdhttp.New(lim, ip)(http.HandlerFunc(okBench)))
		})
	}
}
