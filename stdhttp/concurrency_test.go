package stdhttp_test

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// blocker is a handler that holds each request until released.
type blocker struct {
	inside  chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{inside: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	b.inside <- struct{}{}
	<-b.release
	w.WriteHeader(http.StatusNoContent)
}

func newConcurrency(t *testing.T, max int, opts ...concurrency.Option) *concurrency.Limiter {
	t.Helper()
	lim, err := concurrency.NewLimiter(max, opts...)
	require.NoError(t, err)
	return lim
}

func request(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/report", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestConcurrencyFullKey(t *testing.T) {
	lim := newConcurrency(t, 2, concurrency.WithName("reports"))
	b := newBlocker()
	h := stdhttp.Concurrency(lim, keyfuncs.PeerIP)(b)

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, http.StatusNoContent, request(h, "192.0.2.1:1000").Code)
		}()
	}
	<-b.inside
	<-b.inside
	w := request(h, "192.0.2.1:1001")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	assert.Empty(t, w.Header().Get("X-Ratelimit-Remaining"), "no rate-limit fields for a concurrency refusal")
	var p map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	assert.Equal(t, "reports", p["limit"])
	assert.EqualValues(t, 429, p["status"])
	assert.EqualValues(t, 1, p["retry_after"])

	assert.Equal(t, 2, lim.InFlight())
	close(b.release) // the two requests end
	wg.Wait()
	assert.Zero(t, lim.InFlight(), "slots released when the handler returns")
	assert.Equal(t, http.StatusNoContent, request(h, "192.0.2.1:1002").Code)
}

func TestConcurrencyPanicReleases(t *testing.T) {
	lim := newConcurrency(t, 1)
	h := stdhttp.Concurrency(lim, keyfuncs.PeerIP)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	}))
	func() {
		defer func() { assert.Equal(t, "handler bug", recover()) }()
		request(h, "192.0.2.1:1000")
	}()
	assert.Zero(t, lim.InFlight(), "the panic released the slot")
	_, lease, err := lim.Acquire(context.Background(), "192.0.2.1")
	require.NoError(t, err)
	assert.NotNil(t, lease, "the key has its slot back")
	lease.Release()

	// Through a real server, whose recovery of the panic is net/http's own.
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's stack
	srv.Start()
	defer srv.Close()
	_, err = http.Get(srv.URL)
	assert.Error(t, err, "net/http drops the connection of a panicking handler")
	assert.Zero(t, lim.InFlight())
}

func TestConcurrencyKeyErrors(t *testing.T) {
	lim := newConcurrency(t, 1)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := stdhttp.Concurrency(lim, keyfuncs.Header("X-Api-Key"))(ok)
	w := request(h, "192.0.2.1:1000")
	assert.Equal(t, http.StatusBadRequest, w.Code, "no key")
	assert.Empty(t, w.Header().Get("Retry-After"))
	assert.Zero(t, lim.InFlight())

	assert.Panics(t, func() { stdhttp.Concurrency(nil, keyfuncs.PeerIP) })
	assert.Panics(t, func() { stdhttp.Concurrency(lim, nil) })
}

// A rate limit and a concurrency limit on the same handler: each refuses
// what it must, the rate limit's fields ride on every answer it decides,
// and a request over its rate takes no slot.
func TestConcurrencyWithRateLimit(t *testing.T) {
	clock := newClock()
	rate := newLimiter(t, clock, core.Limit{Name: "per-minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	inflight := newConcurrency(t, 1, concurrency.WithName("one-at-a-time"))
	b := newBlocker()
	h := stdhttp.New(rate, keyfuncs.PeerIP)(stdhttp.Concurrency(inflight, keyfuncs.PeerIP)(b))

	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- request(h, "192.0.2.1:1000") }()
	<-b.inside // 1st request: counted by the rate limit, holds the slot

	w := request(h, "192.0.2.1:1001") // 2nd: within the rate, but no slot
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("X-Ratelimit-Remaining"), "the rate limit admitted it and said so")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	var p map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	assert.Equal(t, "one-at-a-time", p["limit"], "the concurrency limit refused it")

	w = request(h, "192.0.2.1:1002") // 3rd: the rate's last request, no slot
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "0", w.Header().Get("X-Ratelimit-Remaining"))

	w = request(h, "192.0.2.1:1003") // 4th: over the rate
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	assert.Equal(t, "per-minute", p["limit"], "the rate limit refused it, before any slot")
	assert.Equal(t, 1, inflight.InFlight())

	close(b.release)
	assert.Equal(t, http.StatusNoContent, (<-done).Code)
	assert.Zero(t, inflight.InFlight())
}

func TestConcurrencyOptions(t *testing.T) {
	lim := newConcurrency(t, 1, concurrency.WithName("uploads"))
	var denied core.Decision
	var retryAfter string
	b := newBlocker()
	h := stdhttp.Concurrency(lim, keyfuncs.PeerIP,
		stdhttp.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/health" }),
		stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			denied, retryAfter = d, w.Header().Get("Retry-After")
			w.WriteHeader(http.StatusTeapot)
		}),
	)(b)

	done := make(chan int)
	go func() { done <- request(h, "192.0.2.1:1000").Code }()
	<-b.inside
	assert.Equal(t, http.StatusTeapot, request(h, "192.0.2.1:1001").Code, "the denied handler answers")
	assert.Equal(t, core.Decision{Name: "uploads", Quota: 1, RetryAfter: time.Second}, denied)
	assert.Equal(t, "1", retryAfter, "Retry-After is set before the denied handler runs")

	skipped := make(chan int)
	go func() {
		r := httptest.NewRequest(http.MethodGet, "/health", nil)
		r.RemoteAddr = "192.0.2.1:1002"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		skipped <- w.Code
	}()
	<-b.inside
	assert.Equal(t, 1, lim.InFlight(), "the skipped request took no slot")
	close(b.release)
	assert.Equal(t, http.StatusNoContent, <-skipped)
	assert.Equal(t, http.StatusNoContent, <-done)
	assert.Zero(t, lim.InFlight())
}
