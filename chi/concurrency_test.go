package ratekitchi_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitchi "github.com/ratekit/ratekit/chi"
)

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		r := chi.NewRouter()
		r.Use(ratekitchi.Concurrency(s.Limiter, key))
		r.Get("/", func(w http.ResponseWriter, _ *http.Request) { s.Handle(); _, _ = io.WriteString(w, "ok") })
		return adaptertest.Handler(r)
	})
	assert.Panics(t, func() { ratekitchi.Concurrency(nil, ratekitchi.PeerIP) })
}
