package adaptertest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
)

// ConcurrencySetup is what a ConcurrencyMount builds: the adapter's
// concurrency middleware (its Concurrency function) on every route.
type ConcurrencySetup struct {
	// Limiter is the concurrency limiter of the middleware.
	Limiter *concurrency.Limiter

	// Key is the key function, on the value of the request header
	// KeyHeader, as in Setup.
	Key func(value string) (string, error)

	// Handle is called by the handler of GET /, which then answers 200
	// "ok". It blocks or panics as a case needs.
	Handle func()
}

// ConcurrencyMount builds the adapter under test: a router of the
// framework with its recovery middleware (gin.Recovery, Echo's Recover,
// Fiber's recover; none for net/http and Chi, where the server recovers),
// then the adapter's concurrency middleware, and the route GET /.
type ConcurrencyMount func(t *testing.T, s ConcurrencySetup) Serve

// RunConcurrency runs the concurrency middleware's cases through mount: a
// full key is answered 429 with Retry-After and the problem body of the
// rate-limit middleware while another key passes; slots come back when
// handlers return, and when they panic; a missing key is 400, a failing
// key function 500, each with stdhttp's body.
func RunConcurrency(t *testing.T, mount ConcurrencyMount) {
	lim, err := concurrency.NewLimiter(2, concurrency.WithName("reports"), concurrency.WithLogger(NewLogger(io.Discard)))
	if err != nil {
		t.Fatal(err)
	}
	var handle atomic.Pointer[func()]
	pass := func() {}
	handle.Store(&pass)
	serve := mount(t, ConcurrencySetup{Limiter: lim, Key: concurrencyKey, Handle: func() { (*handle.Load())() }})

	get := func(client string) (res response, panicked bool) {
		defer func() {
			if p := recover(); p != nil {
				panicked = true // a framework without recovery: the panic went on
			}
		}()
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if client != "" {
			r.Header.Set(KeyHeader, client)
		}
		return read(t, serve(r)), false
	}
	expectOK := func(what string, r response) {
		t.Helper()
		if r.status != http.StatusOK || r.body != "ok" {
			t.Errorf("%s: got %d %q, want 200 \"ok\"", what, r.status, r.body)
		}
	}
	expectProblem := func(what string, r response, status int, d core.Decision, retry string) {
		t.Helper()
		want := string(answer.Problem(status, &d, nil))
		if r.status != status || r.body != want {
			t.Errorf("%s: got %d %q, want %d %q", what, r.status, r.body, status, want)
		}
		for name, value := range map[string]string{"Retry-After": retry, "Content-Type": answer.ProblemContentType,
			"Cache-Control": answer.ProblemCacheControl, answer.HeaderRemaining: ""} {
			if got := r.header.Get(name); got != value {
				t.Errorf("%s: %s is %q, want %q", what, name, got, value)
			}
		}
	}

	t.Run("full", func(t *testing.T) {
		inside, release := make(chan struct{}), make(chan struct{})
		hold := func() { inside <- struct{}{}; <-release }
		handle.Store(&hold)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); r, _ := get("alice"); expectOK("held request", r) }()
		}
		<-inside
		<-inside
		handle.Store(&pass)
		r, _ := get("alice")
		expectProblem("third request of a full key", r, http.StatusTooManyRequests,
			core.Decision{Name: "reports", Quota: 2, RetryAfter: time.Second}, "1")
		r, _ = get("bob")
		expectOK("another key", r)
		if n := lim.InFlight(); n != 2 {
			t.Errorf("%d in flight, want 2", n)
		}
		close(release)
		wg.Wait()
		if n := lim.InFlight(); n != 0 {
			t.Errorf("%d in flight after the handlers returned, want 0", n)
		}
		r, _ = get("alice")
		expectOK("after the slots came back", r)
	})

	t.Run("panic", func(t *testing.T) {
		boom := func() { panic("handler bug") }
		handle.Store(&boom)
		for range 3 { // more than the slots: each panic released its own
			if r, panicked := get("alice"); !panicked && r.status != http.StatusInternalServerError {
				t.Errorf("panicking handler: got %d, want 500 or the panic", r.status)
			}
		}
		handle.Store(&pass)
		if n := lim.InFlight(); n != 0 {
			t.Errorf("%d in flight after panics, want 0", n)
		}
		r, _ := get("alice")
		expectOK("after panics", r)
	})

	t.Run("key errors", func(t *testing.T) {
		r, _ := get("")
		expectProblem("no key", r, http.StatusBadRequest, core.Decision{}, "")
		r, _ = get(failingKey)
		expectProblem("key function failing", r, http.StatusInternalServerError, core.Decision{}, "")
	})
}

// failingKey makes concurrencyKey fail with an error that is not a
// missing key.
const failingKey = "fail"

func concurrencyKey(value string) (string, error) {
	switch value {
	case "":
		return "", fmt.Errorf("%w: no %s header", keyfuncs.ErrMissing, KeyHeader)
	case failingKey:
		return "", errors.New("key store down: secret detail")
	}
	return value, nil
}
