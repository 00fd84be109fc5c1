package adaptertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// InPlace returns a function that serves req to h and returns the status,
// on the least a ResponseWriter can be, whose header map is cleared before
// each request: what a middleware in h costs is then visible, not the cost
// of a recorder or of growing a fresh map.
func InPlace(h http.Handler, req *http.Request) func() int {
	w := &leastWriter{h: make(http.Header, 8)}
	return func() int {
		clear(w.h)
		w.status = http.StatusOK // as net/http, for a handler that only writes
		h.ServeHTTP(w, req)
		return w.status
	}
}

type leastWriter struct {
	h      http.Header
	status int
}

func (w *leastWriter) Header() http.Header         { return w.h }
func (w *leastWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *leastWriter) WriteHeader(status int)      { w.status = status }

// Unlimited returns a limiter that no test or benchmark exhausts: a token
// bucket of 4000 requests per 100 µs, named "bench" (a count below 4096,
// the largest number package answer formats without allocating).
func Unlimited() *core.Limiter {
	return core.Must(core.NewLimiter(core.Limit{Name: "bench", Algorithm: core.TokenBucket,
		Rate: core.Rate{Count: 4000, Period: 100 * time.Microsecond}}))
}

// Allocs returns the allocations of one call of serve, averaged over 1000
// calls, which must answer 200 before and after: the count is of the
// allowed path. It skips the test under -short and under the race
// detector, which makes sync.Pool drop pooled values (the frameworks'
// contexts) at random, so that counts are noise.
func Allocs(t testing.TB, serve func() int) float64 {
	t.Helper()
	if testing.Short() {
		t.Skip("allocation counts")
	}
	if raceEnabled {
		t.Skip("allocation counts: under the race detector, sync.Pool drops pooled values at random")
	}
	if s := serve(); s != http.StatusOK {
		t.Fatalf("adaptertest: status %d, want 200", s)
	}
	n := testing.AllocsPerRun(1000, func() { serve() })
	if s := serve(); s != http.StatusOK {
		t.Fatalf("adaptertest: status %d after the count: it must stay on the allowed path", s)
	}
	return n
}
