package stdhttp_test

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestConcurrencyConformance runs the adapters' concurrency suite on
// stdhttp itself, the reference.
func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		handle := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { s.Handle(); _, _ = io.WriteString(w, "ok") })
		return adaptertest.Handler(stdhttp.Concurrency(s.Limiter, key, stdhttp.WithLogger(quiet))(handle))
	})
	assert.Panics(t, func() { stdhttp.Concurrency(nil, keyfuncs.PeerIP) })
	assert.Panics(t, func() { stdhttp.Concurrency(new(concurrency.Limiter), nil) })
}

// A handler that panics under a real server, whose recovery is net/http's
// own (it drops the connection), gives its slot back.
func TestConcurrencyPanicThroughServer(t *testing.T) {
	lim, err := concurrency.NewLimiter(1)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(stdhttp.Concurrency(lim, keyfuncs.PeerIP)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's stack
	srv.Start()
	defer srv.Close()
	for range 2 { // more than the one slot
		_, err = srv.Client().Get(srv.URL)
		assert.Error(t, err, "net/http drops the connection of a panicking handler")
		assert.Zero(t, lim.InFlight())
	}
}

// A rate limit in front of a concurrency limit: the rate limit's fields
// ride on the concurrency refusal, written to the same ResponseWriter, and
// a request over the rate takes no slot.
func TestConcurrencyBehindRateLimit(t *testing.T) {
	inflight, err := concurrency.NewLimiter(1, concurrency.WithName("one-at-a-time"))
	require.NoError(t, err)
	var refused []*httptest.ResponseRecorder
	var h http.Handler
	h = stdhttp.New(limiter(t, 3), keyfuncs.PeerIP)(stdhttp.Concurrency(inflight, keyfuncs.PeerIP)(http.HandlerFunc(
		func(w http.ResponseWriter, _ *http.Request) { // the 1st request holds the slot while the others come
			for range 3 {
				refused = append(refused, get(h, "/", "192.0.2.1:1001"))
			}
			w.WriteHeader(http.StatusNoContent)
		})))
	assert.Equal(t, http.StatusNoContent, get(h, "/", "192.0.2.1:1000").Code)
	for i, c := range []struct{ remaining, limit string }{{"1", "one-at-a-time"}, {"0", "one-at-a-time"}, {"0", "api"}} {
		var p struct{ Limit string }
		assert.Equal(t, http.StatusTooManyRequests, refused[i].Code, "request %d", i+2)
		assert.Equal(t, c.remaining, refused[i].Header().Get(answer.HeaderRemaining), "request %d", i+2)
		require.NoError(t, json.Unmarshal(refused[i].Body.Bytes(), &p))
		assert.Equal(t, c.limit, p.Limit, "request %d: the limit that refused it", i+2)
	}
	assert.Zero(t, inflight.InFlight())
}
