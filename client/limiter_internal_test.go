package client

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// gateClock is a Clock whose Sleep announces itself on sleeping and
// returns when wake is sent to, having moved the limiter's clock by the
// wait.
type gateClock struct {
	mu       sync.Mutex
	t        time.Time
	sleeping chan time.Duration
	wake     chan struct{}
}

func (c *gateClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleeping <- d
	<-c.wake
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// TestLimiterQueue: while one request of a Transport waits for the
// limiter, the others for the same key queue behind it instead of asking
// the limiter, and are admitted in turn.
func TestLimiterQueue(t *testing.T) {
	clock := &gateClock{t: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC),
		sleeping: make(chan time.Duration), wake: make(chan struct{})}
	var takes atomic.Int64
	lim, err := core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(1)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}),
		core.WithObserver(func(core.Event) { takes.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	key := func(*http.Request) string { return "k" }
	if d, _ := lim.Take(context.Background(), "k", 1); !d.Allowed {
		t.Fatal("the first request is not admitted")
	}
	takes.Store(0)
	var sent atomic.Int64
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	rt, err := New(next, WithClock(clock), WithLimiter(lim, key))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	send := func() {
		req, _ := http.NewRequest(http.MethodGet, "http://api.example/", nil)
		_, err := rt.RoundTrip(req)
		done <- err
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	users := func() int {
		rt.qmu.Lock()
		defer rt.qmu.Unlock()
		if q := rt.turns["k"]; q != nil {
			return q.users
		}
		return 0
	}

	go send()
	// Rejected, given the turn at once, and waiting for its RetryAfter.
	if d := <-clock.sleeping; d != time.Minute {
		t.Fatalf("the first wait is %s, want 1m", d)
	}
	if n := takes.Load(); n != 1 {
		t.Fatalf("%d takes before the first wait, want 1", n)
	}
	go send()
	go send()
	waitFor("two requests to queue", func() bool { return users() == 3 })
	if n := takes.Load(); n != 1 {
		t.Fatalf("%d takes, want 1: the queued requests asked the limiter", n)
	}
	for i := range 2 {
		clock.wake <- struct{}{} // admitted and sent; the next in the queue is rejected and waits
		if d := <-clock.sleeping; d != time.Minute {
			t.Fatalf("wait %d is %s, want 1m", i+2, d)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	clock.wake <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// 2 takes per request: a rejection and an admission after the wait.
	if n, s := takes.Load(), sent.Load(); n != 6 || s != 3 {
		t.Fatalf("%d takes and %d requests sent, want 6 and 3", n, s)
	}
	if n := users(); n != 0 || len(rt.turns) != 0 {
		t.Fatalf("the queue holds %d requests and %d keys after all were sent", n, len(rt.turns))
	}
}
