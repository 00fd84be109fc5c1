package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// stepClock is a Clock that never sleeps: a wait moves it forward.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Sleep(_ context.Context, d time.Duration) error {
	c.Advance(d)
	return nil
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// spentFor answers every request with X-RateLimit-Remaining: 0 and the reset
// that reset returns for its host; before, if not nil, runs first.
func spentFor(reset func(host string) string, before func(*http.Request)) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if before != nil {
			before(r)
		}
		h := http.Header{"X-Ratelimit-Remaining": {"0"}}
		if v := reset(r.URL.Host); v != "" {
			h.Set("X-Ratelimit-Reset", v)
		}
		return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader(""))}, nil
	})
}

func (t *Transport) hosts() map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(t.until))
	for k, v := range t.until {
		out[k] = v
	}
	return out
}

// hostCount returns the number of hosts t remembers, without copying them.
func (t *Transport) hostCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.until)
}

func send(t *testing.T, rt http.RoundTripper, url string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

// TestPaceForgetsAPassedReset: pace deletes an entry whose time has passed,
// before the request is sent.
func TestPaceForgetsAPassedReset(t *testing.T) {
	clock := &stepClock{t: time.Unix(1_767_571_200, 0)}
	var rt *Transport
	seen := -1
	next := spentFor(func(string) string { return "" }, func(r *http.Request) {
		if r.URL.Path == "/second" {
			seen = len(rt.hosts())
		}
	})
	next0 := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/first" {
			h := http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"5"}}
			return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader(""))}, nil
		}
		return next.RoundTrip(r)
	})
	rt, err := New(next0, WithPacing(true), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	send(t, rt, "http://a.example/first")
	if got := len(rt.hosts()); got != 1 {
		t.Fatalf("after a spent quota: %d hosts, want 1", got)
	}
	clock.Advance(10 * time.Second)
	send(t, rt, "http://a.example/second")
	if seen != 0 {
		t.Fatalf("when the reset had passed, the request was sent with %d hosts remembered, want 0", seen)
	}
}

// TestLearnSweeps: past sweepFrom hosts, a new host sweeps expired entries.
func TestLearnSweeps(t *testing.T) {
	clock := &stepClock{t: time.Unix(1_767_571_200, 0)}
	rt, err := New(spentFor(func(string) string { return "1" }, nil), WithPacing(true), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for i := range sweepFrom {
		send(t, rt, fmt.Sprintf("http://h%d.example/", i))
	}
	if got := len(rt.hosts()); got != sweepFrom {
		t.Fatalf("%d hosts, want %d", got, sweepFrom)
	}
	clock.Advance(2 * time.Second)
	send(t, rt, "http://new.example/")
	hosts := rt.hosts()
	if len(hosts) != 1 {
		t.Fatalf("after the sweep: %d hosts, want 1", len(hosts))
	}
	if _, ok := hosts["new.example"]; !ok {
		t.Fatalf("after the sweep: %v, want new.example", hosts)
	}
}

// TestLearnCaps: at maxHosts live entries, the soonest reset is forgotten
// for a later one, and a new host that resets sooner than all is not kept.
func TestLearnCaps(t *testing.T) {
	clock := &stepClock{t: time.Unix(1_767_571_200, 0)}
	resets := map[string]string{}
	rt, err := New(spentFor(func(host string) string { return resets[host] }, nil),
		WithPacing(true), WithClock(clock), WithMaxWait(0)) // no pacing waits: every request is sent
	if err != nil {
		t.Fatal(err)
	}
	const extra = 100
	for i := range maxHosts + extra {
		host := fmt.Sprintf("h%d.example", i)
		resets[host] = fmt.Sprint(1000 + i) // later and later
		send(t, rt, "http://"+host+"/")
		if got := rt.hostCount(); got > maxHosts {
			t.Fatalf("after %d hosts: %d remembered, more than %d", i+1, got, maxHosts)
		}
	}
	hosts := rt.hosts()
	if len(hosts) != maxHosts {
		t.Fatalf("%d hosts, want %d", len(hosts), maxHosts)
	}
	for i := range extra {
		if _, ok := hosts[fmt.Sprintf("h%d.example", i)]; ok {
			t.Fatalf("h%d.example, among the soonest, is still remembered", i)
		}
	}
	if _, ok := hosts[fmt.Sprintf("h%d.example", maxHosts+extra-1)]; !ok {
		t.Fatal("the latest host is not remembered")
	}
	resets["soon.example"] = "10"
	send(t, rt, "http://soon.example/")
	if _, ok := rt.hosts()["soon.example"]; ok {
		t.Fatal("a host resetting sooner than all was kept at the cap")
	}
	// a known host is updated, at the cap too
	resets["h4195.example"] = "99999"
	send(t, rt, "http://h4195.example/")
	if got, want := rt.hosts()["h4195.example"], clock.Now().Add(99999*time.Second); !got.Equal(want) {
		t.Fatalf("h4195.example resets at %v, want %v", got, want)
	}
}

// TestZeroTransportPaces: the zero Transport's map is made on first use.
func TestZeroTransportPaces(t *testing.T) {
	rt := &Transport{}
	rt.learn("a.example", &http.Response{StatusCode: http.StatusOK,
		Header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"5"}}}, time.Now())
	if len(rt.hosts()) != 1 {
		t.Fatal("the zero Transport did not learn")
	}
}
