package stdhttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestConcurrencyConformance runs the adapters' concurrency suite on
// stdhttp itself, the reference.
func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			s.Handle()
			_, _ = io.WriteString(w, "ok")
		})
		return adaptertest.Handler(stdhttp.Concurrency(s.Limiter, key)(ok))
	})
}
