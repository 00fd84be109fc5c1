package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// now is the time of the fake clocks: 2026-01-05 00:00:00 UTC, aligned to
// every window.
var now = storetest.Epoch

// fakeClock never sleeps: Sleep records the wait and moves the clock (and
// the server's clock, if any) forward. With block set, Sleep instead closes
// block and waits for the context to end.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	waits  []time.Duration
	server *storetest.Clock
	block  chan struct{}
}

func newClock() *fakeClock { return &fakeClock{t: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	if c.block != nil {
		close(c.block)
		<-ctx.Done()
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	if c.server != nil {
		c.server.Advance(d)
	}
	return nil
}

func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// server is an httptest server that answers its n-th request (from 1) with
// answer, and records what it received.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

func serve(t *testing.T, answer func(n int, w http.ResponseWriter)) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		n := len(s.bodies)
		s.mu.Unlock()
		answer(n, w)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) Received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

func (s *server) Host() string { return s.Listener.Addr().String() }

// limited answers 429 with header (values given as name, value pairs) to
// the first `times` requests, and 200 "ok" afterwards.
func limited(status, times int, header ...string) func(int, http.ResponseWriter) {
	return func(n int, w http.ResponseWriter) {
		if n > times {
			_, _ = io.WriteString(w, "ok")
			return
		}
		for i := 0; i+1 < len(header); i += 2 {
			w.Header()[header[i]] = []string{header[i+1]}
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "slow down\n")
	}
}

// recorder collects the Waits observed by a Transport.
type recorder struct {
	mu    sync.Mutex
	waits []client.Wait
}

func (r *recorder) observe(w client.Wait) {
	r.mu.Lock()
	r.waits = append(r.waits, w)
	r.mu.Unlock()
}

func (r *recorder) Waits() []client.Wait {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Wait(nil), r.waits...)
}

// newTransport returns a Transport on clock with a jitter of exactly one
// half, and the recorder of its waits.
func newTransport(t *testing.T, next http.RoundTripper, clock client.Clock, opts ...client.Option) (*client.Transport, *recorder) {
	t.Helper()
	rec := &recorder{}
	base := []client.Option{client.WithClock(clock), client.WithObserver(rec.observe),
		client.WithRandom(func() float64 { return 0.5 })}
	rt, err := client.New(next, append(base, opts...)...)
	require.NoError(t, err)
	return rt, rec
}

func get(t *testing.T, rt http.RoundTripper, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if resp != nil {
		t.Cleanup(func() { _ = resp.Body.Close() })
	}
	return resp, err
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]client.Option{
		"negative retries":  client.WithMaxRetries(-1),
		"negative max wait": client.WithMaxWait(-time.Second),
		"zero backoff base": client.WithBackoff(0, time.Second),
		"max below base":    client.WithBackoff(time.Second, time.Millisecond),
	} {
		t.Run(name, func(t *testing.T) {
			rt, err := client.New(nil, opt)
			assert.Error(t, err)
			assert.Contains(t, err.Error(), "ratekit/client")
			assert.Nil(t, rt)
		})
	}
	rt, err := client.New(nil, client.WithClock(nil), client.WithRandom(nil), client.WithMaxRetries(0), client.WithMaxWait(0))
	require.NoError(t, err)
	assert.NotNil(t, rt)
}

// TestHeaderStyles answers one 429 with each header style and checks the
// exact wait before the retry.
func TestHeaderStyles(t *testing.T) {
	unix := func(d time.Duration) string { return itoa(now.Add(d).Unix()) }
	httpDate := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	const backoff = 250 * time.Millisecond // first retry: 0.5 × 500ms

	tests := []struct {
		name   string
		header []string
		wait   time.Duration
		source string
	}{
		// Retry-After
		{"retry-after seconds", []string{"Retry-After", "7"}, 7 * time.Second, client.SourceRetryAfter},
		{"retry-after zero", []string{"Retry-After", "0"}, 0, client.SourceRetryAfter},
		{"retry-after padded", []string{"Retry-After", " 12 "}, 12 * time.Second, client.SourceRetryAfter},
		{"retry-after HTTP-date", []string{"Retry-After", httpDate(30 * time.Second)}, 30 * time.Second, client.SourceRetryAfter},
		{"retry-after RFC 850 date", []string{"Retry-After", now.Add(9 * time.Second).Format(time.RFC850)}, 9 * time.Second, client.SourceRetryAfter},
		{"retry-after date in the past", []string{"Retry-After", httpDate(-time.Hour)}, 0, client.SourceRetryAfter},
		{"retry-after wins over the rest", []string{"Retry-After", "3", "Ratelimit", `"api";r=0;t=30`, "X-Ratelimit-Reset", "40"}, 3 * time.Second, client.SourceRetryAfter},
		// IETF draft-11
		{"ietf", []string{"Ratelimit-Policy", `"api";q=100;w=60`, "Ratelimit", `"api";r=0;t=30`}, 30 * time.Second, client.SourceRateLimit},
		{"ietf longest exhausted", []string{"Ratelimit", `"burst";r=0;t=5, "hourly";r=0;t=40, "daily";r=10;t=80000`}, 40 * time.Second, client.SourceRateLimit},
		{"ietf quoted separators", []string{"Ratelimit", `"a,b;r=9";r=0;t=9`}, 9 * time.Second, client.SourceRateLimit},
		{"ietf wins over x-ratelimit", []string{"Ratelimit", `"api";r=0;t=8`, "X-Ratelimit-Reset", "40"}, 8 * time.Second, client.SourceRateLimit},
		{"ietf none exhausted", []string{"Ratelimit", `"api";r=3;t=30`}, backoff, client.SourceBackoff},
		// GitHub: epoch seconds
		{"github epoch reset", []string{"X-Ratelimit-Limit", "60", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", unix(42 * time.Second)}, 42 * time.Second, client.SourceReset},
		{"github epoch in the past", []string{"X-Ratelimit-Reset", unix(-time.Minute)}, 0, client.SourceReset},
		// Discord: float epoch and Reset-After
		{"discord float epoch", []string{"X-Ratelimit-Reset", itoa(now.Unix()+1) + ".250"}, 1250 * time.Millisecond, client.SourceReset},
		{"discord reset-after", []string{"X-Ratelimit-Reset-After", "1.5", "X-Ratelimit-Reset", unix(time.Minute)}, 1500 * time.Millisecond, client.SourceReset},
		// ratekit and others: delta seconds
		{"delta reset", []string{"X-Ratelimit-Reset", "3"}, 3 * time.Second, client.SourceReset},
		{"delta reset, fractional", []string{"X-Ratelimit-Reset", "59.5"}, 59500 * time.Millisecond, client.SourceReset},
		// garbage falls through to the next source
		{"garbage retry-after, ietf", []string{"Retry-After", "soon", "Ratelimit", `"api";r=0;t=6`}, 6 * time.Second, client.SourceRateLimit},
		{"negative retry-after", []string{"Retry-After", "-5", "X-Ratelimit-Reset", "4"}, 4 * time.Second, client.SourceReset},
		{"fractional retry-after", []string{"Retry-After", "1.5"}, backoff, client.SourceBackoff},
		{"garbage ietf", []string{"Ratelimit", `"api";r=0;t=-3, "b";r=0;t=x, "c";r=zero;t=2, r=0;t=1, "d";r=0;t=1234567890123456`}, backoff, client.SourceBackoff},
		{"NaN reset", []string{"X-Ratelimit-Reset", "NaN"}, backoff, client.SourceBackoff},
		{"Inf reset", []string{"X-Ratelimit-Reset-After", "Inf", "X-Ratelimit-Reset", "+Inf"}, backoff, client.SourceBackoff},
		{"exponent reset", []string{"X-Ratelimit-Reset", "1e3"}, backoff, client.SourceBackoff},
		{"hex reset", []string{"X-Ratelimit-Reset", "0x10"}, backoff, client.SourceBackoff},
		{"negative reset", []string{"X-Ratelimit-Reset", "-1"}, backoff, client.SourceBackoff},
		{"exponent reset-after", []string{"X-Ratelimit-Reset", "1e400", "X-Ratelimit-Reset-After", "1e400"}, backoff, client.SourceBackoff},
		{"dots reset", []string{"X-Ratelimit-Reset", "1.2.3"}, backoff, client.SourceBackoff},
		{"no header", nil, backoff, client.SourceBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, limited(http.StatusTooManyRequests, 1, tt.header...))
			clock := newClock()
			rt, rec := newTransport(t, nil, clock)

			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "ok", readBody(t, resp))
			assert.Equal(t, []time.Duration{tt.wait}, clock.Waits())
			assert.Equal(t, []client.Wait{{Host: srv.Host(), Duration: tt.wait, Attempt: 1, Source: tt.source}}, rec.Waits())
			assert.Len(t, srv.Received(), 2)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestBackoffGrowsToItsCap(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 100))
	clock := newClock()
	rt, rec := newTransport(t, nil, clock, client.WithMaxRetries(4), client.WithBackoff(time.Second, 3*time.Second))

	resp, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	// retry n waits 0.5 × min(3s, 1s × 2^(n−1))
	assert.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond}, clock.Waits())
	for i, w := range rec.Waits() {
		assert.Equal(t, i+1, w.Attempt)
		assert.Equal(t, client.SourceBackoff, w.Source)
	}
	assert.Len(t, srv.Received(), 5)
}

func TestBackoffIsFullJitter(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 100))
	for _, r := range []float64{0, 0.999} {
		clock := newClock()
		rt, err := client.New(nil, client.WithClock(clock), client.WithRandom(func() float64 { return r }), client.WithMaxRetries(1))
		require.NoError(t, err)
		_, err = get(t, rt, context.Background(), srv.URL)
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{time.Duration(r * float64(500*time.Millisecond))}, clock.Waits())
	}
}

func TestMaxRetriesReturnsTheLast429(t *testing.T) {
	for _, retries := range []int{0, 1, 3} {
		srv := serve(t, limited(http.StatusTooManyRequests, 100, "Retry-After", "1"))
		clock := newClock()
		rt, _ := newTransport(t, nil, clock, client.WithMaxRetries(retries))

		resp, err := get(t, rt, context.Background(), srv.URL)
		require.NoError(t, err, "denial is not an error")
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, "slow down\n", readBody(t, resp), "the last 429 is returned unread")
		assert.Len(t, srv.Received(), retries+1)
		assert.Len(t, clock.Waits(), retries)
	}
}

func TestDefaultMaxRetriesIsThree(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 100, "Retry-After", "2"))
	clock := newClock()
	rt, _ := newTransport(t, nil, clock)
	resp, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}, clock.Waits())
}

func TestMaxWait(t *testing.T) {
	tests := []struct {
		name    string
		opts    []client.Option
		header  []string
		waits   []time.Duration
		status  int
		request int
	}{
		{"default 60s: waits 60s", nil, []string{"Retry-After", "60"}, []time.Duration{time.Minute}, 200, 2},
		{"default 60s: 61s is too long", nil, []string{"Retry-After", "61"}, nil, 429, 1},
		{"ietf beyond max", []client.Option{client.WithMaxWait(10 * time.Second)}, []string{"Ratelimit", `"day";r=0;t=86400`}, nil, 429, 1},
		{"epoch beyond max", []client.Option{client.WithMaxWait(10 * time.Second)}, []string{"X-Ratelimit-Reset", itoa(now.Unix() + 11)}, nil, 429, 1},
		{"far HTTP-date", nil, []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}, nil, 429, 1},
		{"backoff capped by max wait", []client.Option{client.WithMaxWait(100 * time.Millisecond)}, nil, []time.Duration{50 * time.Millisecond}, 200, 2},
		{"zero max wait retries only at once", []client.Option{client.WithMaxWait(0)}, []string{"Retry-After", "1"}, nil, 429, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, limited(http.StatusTooManyRequests, 1, tt.header...))
			clock := newClock()
			rt, _ := newTransport(t, nil, clock, tt.opts...)
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, tt.status, resp.StatusCode)
			assert.Equal(t, tt.waits, clock.Waits())
			assert.Len(t, srv.Received(), tt.request)
		})
	}
}

func TestContextDeadline(t *testing.T) {
	t.Run("a wait past the deadline returns the 429 at once", func(t *testing.T) {
		srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "7"))
		clock := newClock()
		rt, _ := newTransport(t, nil, clock)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := get(t, rt, ctx, srv.URL)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, "slow down\n", readBody(t, resp))
		assert.Empty(t, clock.Waits())
		assert.Len(t, srv.Received(), 1)
	})
	t.Run("a wait before the deadline is taken", func(t *testing.T) {
		srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "2"))
		clock := newClock()
		rt, _ := newTransport(t, nil, clock)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := get(t, rt, ctx, srv.URL)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, []time.Duration{2 * time.Second}, clock.Waits())
	})
}

// tracker wraps the response bodies of next to count what is read from them
// and whether they are closed.
type tracker struct {
	next   http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	read   atomic.Int64
	closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

func (tr *tracker) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tr.next.RoundTrip(req)
	if err == nil {
		body := &trackedBody{ReadCloser: resp.Body}
		resp.Body = body
		tr.mu.Lock()
		tr.bodies = append(tr.bodies, body)
		tr.mu.Unlock()
	}
	return resp, err
}

func (tr *tracker) Bodies() []*trackedBody {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]*trackedBody(nil), tr.bodies...)
}

func TestCancelDuringWait(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "30"))
	clock := newClock()
	clock.block = make(chan struct{})
	tr := &tracker{next: http.DefaultTransport}
	rt, _ := newTransport(t, tr, clock)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-clock.block
		cancel()
	}()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []time.Duration{30 * time.Second}, clock.Waits())
	require.Len(t, tr.Bodies(), 1)
	assert.True(t, tr.Bodies()[0].closed.Load(), "the held 429 is closed")
	assert.Len(t, srv.Received(), 1)
}

func TestRetriedBodiesAreDrainedAndClosed(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	srv := serve(t, func(n int, w http.ResponseWriter) {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, "small 429 body")
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, big)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
	tr := &tracker{next: http.DefaultTransport}
	rt, _ := newTransport(t, tr, newClock())

	resp, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	bodies := tr.Bodies()
	require.Len(t, bodies, 3)
	assert.Equal(t, int64(len("small 429 body")), bodies[0].read.Load(), "drained to the end")
	assert.Equal(t, int64(64<<10), bodies[1].read.Load(), "drained up to 64 KB")
	assert.True(t, bodies[0].closed.Load())
	assert.True(t, bodies[1].closed.Load())
	assert.False(t, bodies[2].closed.Load(), "the final response is the caller's")
	assert.Equal(t, "ok", readBody(t, resp))
}

func Test503(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		header   []string
		want     int
		received int
	}{
		{"503 with Retry-After is retried", http.StatusServiceUnavailable, []string{"Retry-After", "3"}, 200, 2},
		{"503 with an HTTP-date is retried", http.StatusServiceUnavailable, []string{"Retry-After", now.Add(3 * time.Second).Format(http.TimeFormat)}, 200, 2},
		{"503 without Retry-After is not", http.StatusServiceUnavailable, []string{"X-Ratelimit-Reset", "3"}, 503, 1},
		{"503 with garbage Retry-After is not", http.StatusServiceUnavailable, []string{"Retry-After", "later"}, 503, 1},
		{"500 with Retry-After is not", http.StatusInternalServerError, []string{"Retry-After", "3"}, 500, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, limited(tt.status, 1, tt.header...))
			clock := newClock()
			rt, rec := newTransport(t, nil, clock)
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, tt.want, resp.StatusCode)
			assert.Len(t, srv.Received(), tt.received)
			if tt.received == 2 {
				assert.Equal(t, []time.Duration{3 * time.Second}, clock.Waits())
				assert.Equal(t, client.SourceRetryAfter, rec.Waits()[0].Source)
			} else {
				assert.Empty(t, clock.Waits())
			}
		})
	}
}

// oneShot is a request body that http.NewRequest cannot re-obtain.
type oneShot struct{ io.Reader }

func TestReplay(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		body      func() io.Reader
		replayAll bool
		received  []string
	}{
		{"GET without body", http.MethodGet, nil, false, []string{"", ""}},
		{"DELETE without body", http.MethodDelete, nil, false, []string{"", ""}},
		{"PUT with GetBody", http.MethodPut, func() io.Reader { return strings.NewReader("payload") }, false, []string{"payload", "payload"}},
		{"PUT with a one-shot body", http.MethodPut, func() io.Reader { return oneShot{strings.NewReader("payload")} }, false, []string{"payload"}},
		{"POST with GetBody, by default", http.MethodPost, func() io.Reader { return bytes.NewBufferString("payload") }, false, []string{"payload"}},
		{"POST with GetBody, replay on", http.MethodPost, func() io.Reader { return bytes.NewBufferString("payload") }, true, []string{"payload", "payload"}},
		{"POST with a one-shot body, replay on", http.MethodPost, func() io.Reader { return oneShot{strings.NewReader("payload")} }, true, []string{"payload"}},
		{"PATCH without body, replay on", http.MethodPatch, nil, true, []string{"", ""}},
		{"PATCH without body, by default", http.MethodPatch, nil, false, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "1"))
			rt, _ := newTransport(t, nil, newClock(), client.WithReplayNonIdempotent(tt.replayAll))
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, err := http.NewRequest(tt.method, srv.URL, body)
			require.NoError(t, err)
			resp, err := (&http.Client{Transport: rt}).Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, tt.received, srv.Received(), "what the server received")
			if len(tt.received) == 1 {
				assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
				assert.Equal(t, "slow down\n", readBody(t, resp))
			} else {
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
}

func TestGetBodyIsCalledForEachRetry(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 2, "Retry-After", "1"))
	rt, _ := newTransport(t, nil, newClock())
	req, err := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("v1"))
	require.NoError(t, err)
	calls := 0
	req.GetBody = func() (io.ReadCloser, error) {
		calls++
		return io.NopCloser(strings.NewReader("v" + strconv.Itoa(calls+1))), nil
	}
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, calls)
	assert.Equal(t, []string{"v1", "v2", "v3"}, srv.Received())
}

// TestGetBodyFailureReturnsThe429: GetBody is called before the wait; when
// it fails, the 429 is returned at once, unread, with a nil error.
func TestGetBodyFailureReturnsThe429(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "1"))
	clock := newClock()
	var buf bytes.Buffer
	rt, rec := newTransport(t, nil, clock, client.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	req, err := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err, "a request that cannot be replayed is a denial")
	defer resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "slow down\n", readBody(t, resp))
	assert.Empty(t, clock.Waits(), "nobody waits in vain")
	assert.Empty(t, rec.Waits())
	assert.Len(t, srv.Received(), 1)
	assert.Contains(t, buf.String(), "ratekit/client: replaying PUT")
	assert.Contains(t, buf.String(), "body gone")
}

// TestGetBodyBeforeTheWait: the next body is obtained before the wait, and
// closed when the wait is cancelled.
func TestGetBodyBeforeTheWait(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 100, "Retry-After", "30"))
	clock := newClock()
	clock.block = make(chan struct{})
	rt, _ := newTransport(t, nil, clock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-clock.block
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	var bodies []*trackedBody
	var waitsAtCall []int
	req.GetBody = func() (io.ReadCloser, error) {
		waitsAtCall = append(waitsAtCall, len(clock.Waits()))
		b := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("payload"))}
		bodies = append(bodies, b)
		return b, nil
	}
	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []int{0}, waitsAtCall, "GetBody is called before the wait")
	require.Len(t, bodies, 1)
	assert.True(t, bodies[0].closed.Load(), "the unsent body is closed")
	assert.Len(t, srv.Received(), 1)
}

// TestNoBodyIsNeverReplayedWithABody: a request without a body (nil or
// http.NoBody) is retried without one, whatever its GetBody says.
func TestNoBodyIsNeverReplayedWithABody(t *testing.T) {
	for name, body := range map[string]io.ReadCloser{"nil": nil, "NoBody": http.NoBody} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var received []string
			n := 0
			next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				mu.Lock()
				defer mu.Unlock()
				got := "<nil>"
				if r.Body != nil {
					b, _ := io.ReadAll(r.Body)
					got = string(b)
				}
				received = append(received, got)
				n++
				resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok"))}
				if n == 1 {
					resp.StatusCode = http.StatusTooManyRequests
					resp.Header.Set("Retry-After", "1")
				}
				return resp, nil
			})
			rt, _ := newTransport(t, next, newClock())
			req, err := http.NewRequest(http.MethodPut, "http://api.example/", nil)
			require.NoError(t, err)
			req.Body = body
			calls := 0
			req.GetBody = func() (io.ReadCloser, error) {
				calls++
				return io.NopCloser(strings.NewReader("surprise")), nil
			}
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Zero(t, calls, "GetBody is not called")
			want := "<nil>"
			if body != nil {
				want = ""
			}
			assert.Equal(t, []string{want, want}, received)
		})
	}
}

// TestRequestIsUnmodified: retries never change the caller's request.
func TestRequestIsUnmodified(t *testing.T) {
	var mu sync.Mutex
	var tokens []string
	srv := serve(t, limited(http.StatusTooManyRequests, 2, "Retry-After", "1"))
	check := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get("X-Token"))
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})
	rt, _ := newTransport(t, check, newClock())
	req, err := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	req.Header.Set("X-Token", "secret")
	req.Header.Add("Accept", "a")
	req.Header.Add("Accept", "b")
	header, body, length := req.Header.Clone(), req.Body, req.ContentLength
	getBody := reflect.ValueOf(req.GetBody).Pointer()

	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"payload", "payload", "payload"}, srv.Received())
	assert.Equal(t, []string{"secret", "secret", "secret"}, tokens)

	assert.Equal(t, header, req.Header)
	assert.True(t, body == req.Body, "the same Body")
	assert.Equal(t, length, req.ContentLength)
	assert.Equal(t, getBody, reflect.ValueOf(req.GetBody).Pointer())
	again, err := req.GetBody()
	require.NoError(t, err)
	b, _ := io.ReadAll(again)
	assert.Equal(t, "payload", string(b))
}

func TestTransportErrorsPassThrough(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 0))
	srv.Close()
	rt, _ := newTransport(t, nil, newClock())
	_, err := get(t, rt, context.Background(), srv.URL)
	assert.Error(t, err)
}

func TestPacing(t *testing.T) {
	tests := []struct {
		name   string
		opts   []client.Option
		first  func(w http.ResponseWriter)
		waits  []time.Duration
		source string
	}{
		{"x-ratelimit remaining 0", nil, func(w http.ResponseWriter) {
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", "5")
		}, []time.Duration{5 * time.Second}, client.SourcePacing},
		{"github epoch", nil, func(w http.ResponseWriter) {
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", itoa(now.Unix()+8))
		}, []time.Duration{8 * time.Second}, client.SourcePacing},
		{"ietf exhausted", nil, func(w http.ResponseWriter) {
			w.Header().Set("Ratelimit", `"api";r=0;t=9`)
		}, []time.Duration{9 * time.Second}, client.SourcePacing},
		{"remaining left", nil, func(w http.ResponseWriter) {
			w.Header().Set("X-Ratelimit-Remaining", "1")
			w.Header().Set("X-Ratelimit-Reset", "5")
			w.Header().Set("Ratelimit", `"api";r=1;t=5`)
		}, nil, ""},
		{"beyond max wait: sent anyway", nil, func(w http.ResponseWriter) {
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", "3600")
		}, nil, ""},
		{"a 429 after the last retry", []client.Option{client.WithMaxRetries(0)}, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "4")
			w.WriteHeader(http.StatusTooManyRequests)
		}, []time.Duration{4 * time.Second}, client.SourcePacing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, func(n int, w http.ResponseWriter) {
				if n == 1 {
					tt.first(w)
				}
			})
			clock := newClock()
			rt, rec := newTransport(t, nil, clock, append(tt.opts, client.WithPacing(true))...)
			for range 2 {
				_, err := get(t, rt, context.Background(), srv.URL)
				require.NoError(t, err)
			}
			assert.Equal(t, tt.waits, clock.Waits())
			if tt.waits != nil {
				assert.Equal(t, []client.Wait{{Host: srv.Host(), Duration: tt.waits[0], Attempt: 0, Source: tt.source}}, rec.Waits())
			}
			// The second response said nothing: the third request goes at once.
			_, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, tt.waits, clock.Waits())
		})
	}
}

func TestPacingIsOffByDefault(t *testing.T) {
	srv := serve(t, func(_ int, w http.ResponseWriter) { w.Header().Set("X-Ratelimit-Remaining", "0") })
	clock := newClock()
	rt, _ := newTransport(t, nil, clock)
	for range 3 {
		_, err := get(t, rt, context.Background(), srv.URL)
		require.NoError(t, err)
	}
	assert.Empty(t, clock.Waits())
}

func TestPacingIsPerHost(t *testing.T) {
	spent := serve(t, func(_ int, w http.ResponseWriter) {
		w.Header().Set("X-Ratelimit-Remaining", "0")
		w.Header().Set("X-Ratelimit-Reset", "5")
	})
	other := serve(t, func(int, http.ResponseWriter) {})
	clock := newClock()
	rt, _ := newTransport(t, nil, clock, client.WithPacing(true))
	_, err := get(t, rt, context.Background(), spent.URL)
	require.NoError(t, err)
	_, err = get(t, rt, context.Background(), other.URL)
	require.NoError(t, err)
	assert.Empty(t, clock.Waits())
}

func TestPacingHonoursTheContext(t *testing.T) {
	srv := serve(t, func(_ int, w http.ResponseWriter) { w.Header().Set("Ratelimit", `"api";r=0;t=20`) })
	clock := newClock()
	rt, _ := newTransport(t, nil, clock, client.WithPacing(true))
	_, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)

	// a deadline before the reset: sent without waiting
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = get(t, rt, ctx, srv.URL)
	require.NoError(t, err)
	assert.Empty(t, clock.Waits())

	// cancelled while waiting: the error, and the request body is closed
	ctx, cancel = context.WithCancel(context.Background())
	clock.block = make(chan struct{})
	go func() {
		<-clock.block
		cancel()
	}()
	body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("payload"))}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, body)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, body.closed.Load())
	assert.Equal(t, []time.Duration{20 * time.Second}, clock.Waits())
	assert.Len(t, srv.Received(), 2)
}

// TestPacingConcurrent: goroutines share a host whose quota is always spent
// and one whose quota is spent, then left, by turns. Once a reset is
// recorded, the clock passes it only through a wait, so waits must happen.
func TestPacingConcurrent(t *testing.T) {
	spent := serve(t, func(_ int, w http.ResponseWriter) {
		w.Header().Set("X-Ratelimit-Remaining", "0")
		w.Header().Set("X-Ratelimit-Reset", "1")
	})
	mixed := serve(t, func(n int, w http.ResponseWriter) {
		w.Header().Set("X-Ratelimit-Remaining", strconv.Itoa(n%3))
		w.Header().Set("X-Ratelimit-Reset", "1")
	})
	clock := newClock()
	rt, rec := newTransport(t, nil, clock, client.WithPacing(true))
	hc := &http.Client{Transport: rt}
	errs := make(chan error, 8*20)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { // no t.FailNow here: errors go to the test goroutine
			defer wg.Done()
			for range 10 {
				for _, url := range []string{spent.URL, mixed.URL} {
					resp, err := hc.Get(url)
					if err != nil {
						errs <- err
						continue
					}
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						errs <- fmt.Errorf("%s: status %d", url, resp.StatusCode)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Len(t, spent.Received(), 80)
	assert.Len(t, mixed.Received(), 80)
	waits := clock.Waits()
	assert.NotEmpty(t, waits, "pacing waited")
	for _, w := range waits {
		assert.True(t, w > 0 && w <= time.Second, "pacing wait %s", w)
	}
	assert.Len(t, rec.Waits(), len(waits))
	for _, w := range rec.Waits() {
		assert.Equal(t, client.SourcePacing, w.Source)
		assert.Contains(t, []string{spent.Host(), mixed.Host()}, w.Host)
	}
}

func TestLogger(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "7"))
	var buf bytes.Buffer
	rt, err := client.New(nil, client.WithClock(newClock()), client.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	require.NoError(t, err)
	_, err = get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "host="+srv.Host()+" wait=7s attempt=1 source=retry-after")
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"))
}

// sharedClock is the fakeClock whose waits also move the server's clock.
func sharedClock(server *storetest.Clock) *fakeClock {
	return &fakeClock{t: server.Now(), server: server}
}

// TestRatekitServer runs the client against ratekit's own middleware, whose
// limiter reads a clock that the client's waits advance: each wait must
// make the server admit the retry.
func TestRatekitServer(t *testing.T) {
	// 3 requests per minute, 6 requests at once: the waits are the
	// Retry-After of each algorithm, computed by hand.
	const s = time.Second
	algorithms := []struct {
		algo  core.Algorithm
		waits []time.Duration
	}{
		{core.TokenBucket, []time.Duration{20 * s, 20 * s, 20 * s}}, // one token every 20s
		{core.FixedWindow, []time.Duration{60 * s}},                 // the next window admits 3
		{core.SlidingWindowLog, []time.Duration{60 * s}},            // the 3 requests at 0s expire at 60s
		// at 80s: 1 + 3 × (1 − 20/60) = 3; at 100s: 2 + 3 × (1 − 40/60) = 3; ...
		{core.SlidingWindowCounter, []time.Duration{80 * s, 20 * s, 20 * s}},
	}
	styles := map[string]answer.Style{"x-ratelimit": answer.XRateLimit,
		"ietf": answer.IETF, "both": answer.Both, "none": answer.NoHeaders}
	for styleName, style := range styles {
		for _, tt := range algorithms {
			t.Run(tt.algo.String()+"/"+styleName, func(t *testing.T) {
				serverClock := storetest.NewClock(now)
				lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: tt.algo, Rate: core.PerMinute(3)},
					core.WithStore(&core.MemoryStore{Clock: serverClock.Now}))
				require.NoError(t, err)
				var handled atomic.Int64
				ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					handled.Add(1)
					_, _ = io.WriteString(w, "ok")
				})
				srv := httptest.NewServer(stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithHeaders(style))(ok))
				defer srv.Close()

				clock := sharedClock(serverClock)
				// 80s is more than the default maximum wait
				rt, rec := newTransport(t, nil, clock, client.WithMaxWait(5*time.Minute))
				for range 6 {
					resp, err := get(t, rt, context.Background(), srv.URL)
					require.NoError(t, err)
					assert.Equal(t, http.StatusOK, resp.StatusCode)
				}
				assert.Equal(t, int64(6), handled.Load())
				assert.Equal(t, tt.waits, clock.Waits())
				for _, w := range rec.Waits() {
					assert.Equal(t, 1, w.Attempt, "every wait made the server admit the retry")
					assert.Equal(t, client.SourceRetryAfter, w.Source)
				}
			})
		}
	}
}

// TestRatekitServerPacing: with pacing, a client that spends its quota
// waits for the reset and is never rejected.
func TestRatekitServerPacing(t *testing.T) {
	for _, style := range []answer.Style{answer.XRateLimit, answer.IETF} {
		serverClock := storetest.NewClock(now)
		lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
			core.WithStore(&core.MemoryStore{Clock: serverClock.Now}))
		require.NoError(t, err)
		var rejected atomic.Int64
		srv := httptest.NewServer(stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithHeaders(style),
			stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, _ core.Decision) {
				rejected.Add(1)
				w.WriteHeader(http.StatusTooManyRequests)
			}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		defer srv.Close()

		clock := sharedClock(serverClock)
		rt, rec := newTransport(t, nil, clock, client.WithPacing(true))
		for range 5 {
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		}
		assert.Zero(t, rejected.Load())
		assert.Equal(t, []time.Duration{time.Minute, time.Minute}, clock.Waits())
		for _, w := range rec.Waits() {
			assert.Equal(t, client.SourcePacing, w.Source)
		}
	}
}

// TestSystemClock uses the default clock without sleeping: a zero wait,
// and a wait whose context the observer cancels.
func TestSystemClock(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "0"))
	rt, err := client.New(nil)
	require.NoError(t, err)
	resp, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	srv = serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "30"))
	ctx, cancel := context.WithCancel(context.Background())
	rt, err = client.New(nil, client.WithObserver(func(client.Wait) { cancel() }))
	require.NoError(t, err)
	start := time.Now()
	_, err = get(t, rt, ctx, srv.URL)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 10*time.Second)
}

// forever is the longest time.Duration, to which too-large waits saturate.
const forever = time.Duration(math.MaxInt64)

// TestHugeWaitsSaturate: a well-formed wait too large for a time.Duration
// is the longest Duration, not garbage: beyond any maximum wait, so the 429
// (or 503) is returned at once instead of falling through to backoff.
func TestHugeWaitsSaturate(t *testing.T) {
	digits400 := strings.Repeat("9", 400)
	tests := []struct {
		name   string
		status int
		header []string
		source string
	}{
		{"retry-after just past the largest", 429, []string{"Retry-After", "9223372037"}, client.SourceRetryAfter},
		{"retry-after beyond int64", 429, []string{"Retry-After", "99999999999999999999"}, client.SourceRetryAfter},
		{"retry-after 400 digits", 429, []string{"Retry-After", digits400}, client.SourceRetryAfter},
		{"503 retry-after beyond int64", 503, []string{"Retry-After", "99999999999999999999"}, client.SourceRetryAfter},
		{"ietf", 429, []string{"Ratelimit", `"day";r=0;t=9999999999`}, client.SourceRateLimit},
		{"ietf largest 15 digits", 429, []string{"Ratelimit", `"day";r=0;t=999999999999999`}, client.SourceRateLimit},
		{"reset-after beyond int64", 429, []string{"X-Ratelimit-Reset-After", "99999999999999999999"}, client.SourceReset},
		{"reset-after just past the largest", 429, []string{"X-Ratelimit-Reset-After", "9223372036.9"}, client.SourceReset},
		{"reset-after 400 digits", 429, []string{"X-Ratelimit-Reset-After", digits400 + ".5"}, client.SourceReset},
		{"reset epoch beyond int64", 429, []string{"X-Ratelimit-Reset", "99999999999999999999"}, client.SourceReset},
		{"reset epoch in milliseconds", 429, []string{"X-Ratelimit-Reset", itoa(now.UnixMilli() + 5000)}, client.SourceReset},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/returned at once", func(t *testing.T) {
			srv := serve(t, limited(tt.status, 1, tt.header...))
			clock := newClock()
			rt, _ := newTransport(t, nil, clock, client.WithMaxWait(24*time.Hour))
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, tt.status, resp.StatusCode)
			assert.Equal(t, "slow down\n", readBody(t, resp))
			assert.Empty(t, clock.Waits())
			assert.Len(t, srv.Received(), 1)
		})
		t.Run(tt.name+"/saturated", func(t *testing.T) {
			srv := serve(t, limited(tt.status, 1, tt.header...))
			clock := newClock()
			rt, rec := newTransport(t, nil, clock, client.WithMaxWait(forever))
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, []time.Duration{forever}, clock.Waits())
			assert.Equal(t, []client.Wait{{Host: srv.Host(), Duration: forever, Attempt: 1, Source: tt.source}}, rec.Waits())
		})
	}
	// the largest whole number of seconds that fits is not saturated
	srv := serve(t, limited(429, 1, "Retry-After", "9223372036"))
	clock := newClock()
	rt, _ := newTransport(t, nil, clock, client.WithMaxWait(forever))
	_, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{9223372036 * time.Second}, clock.Waits())
}

// TestEpochThreshold: X-RateLimit-Reset 999999999 is a delta, 1000000000
// a Unix time (in September 2001, so no wait).
func TestEpochThreshold(t *testing.T) {
	tests := []struct {
		reset string
		wait  time.Duration
	}{
		{"999999999", 999999999 * time.Second},
		{"999999999.5", 999999999*time.Second + 500*time.Millisecond},
		{"1000000000", 0},
		{"1000000000.0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.reset, func(t *testing.T) {
			srv := serve(t, limited(http.StatusTooManyRequests, 1, "X-Ratelimit-Reset", tt.reset))
			clock := newClock()
			rt, rec := newTransport(t, nil, clock, client.WithMaxWait(forever))
			resp, err := get(t, rt, context.Background(), srv.URL)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, []time.Duration{tt.wait}, clock.Waits())
			assert.Equal(t, client.SourceReset, rec.Waits()[0].Source)
		})
	}
}

// TestBackoffDoesNotOverflow: with a huge backoff maximum, the doubling
// stops at the maximum instead of wrapping to a negative ceiling.
func TestBackoffDoesNotOverflow(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 100))
	clock := newClock()
	rt, _ := newTransport(t, nil, clock, client.WithMaxRetries(3),
		client.WithBackoff(1<<62, forever), client.WithMaxWait(forever))
	resp, err := get(t, rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	// 0.5 × 2^62, then 0.5 × MaxInt64 (2^62 as a float64)
	assert.Equal(t, []time.Duration{1 << 61, 1 << 62, 1 << 62}, clock.Waits())
}

// TestJitterIsClamped: a random source outside [0, 1) cannot make a
// negative wait or one beyond the ceiling.
func TestJitterIsClamped(t *testing.T) {
	const ceiling = 500 * time.Millisecond
	below := time.Duration(math.Nextafter(1, 0) * float64(ceiling))
	for _, tt := range []struct {
		r    float64
		wait time.Duration
	}{
		{math.NaN(), 0}, {-1, 0}, {math.Inf(-1), 0}, {0.25, ceiling / 4},
		{1, below}, {2, below}, {math.Inf(1), below},
	} {
		srv := serve(t, limited(http.StatusTooManyRequests, 100))
		clock := newClock()
		rt, err := client.New(nil, client.WithClock(clock), client.WithRandom(func() float64 { return tt.r }), client.WithMaxRetries(1))
		require.NoError(t, err)
		_, err = get(t, rt, context.Background(), srv.URL)
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{tt.wait}, clock.Waits(), "random %v", tt.r)
	}
	assert.Less(t, below, ceiling)
}

// TestZeroTransport: a Transport not made by New has every default.
func TestZeroTransport(t *testing.T) {
	srv := serve(t, limited(http.StatusTooManyRequests, 1, "Retry-After", "0"))
	resp, err := get(t, &client.Transport{}, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, srv.Received(), 2)

	// three retries by default, then the 429
	srv = serve(t, limited(http.StatusTooManyRequests, 100, "Retry-After", "0"))
	var rt client.Transport
	resp, err = get(t, &rt, context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Len(t, srv.Received(), 4)
}

// stub answers with the headers that answer returns for a request, as a
// 200 unless they set a status.
func stub(answer func(r *http.Request) (int, http.Header)) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		status, h := answer(r)
		if h == nil {
			h = http.Header{}
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
}

func do(rt http.RoundTripper, ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// TestPacingKeepsItsReset: a recorded reset is cleared only by a response
// that says quota is left, and never moved earlier.
func TestPacingKeepsItsReset(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name   string
		status int
		second http.Header
		wait   []time.Duration
	}{
		{"a 404 without fields", http.StatusNotFound, nil, []time.Duration{30 * time.Second}},
		{"a 200 without fields", http.StatusOK, nil, []time.Duration{30 * time.Second}},
		{"an earlier reset", http.StatusOK, h("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "5"), []time.Duration{30 * time.Second}},
		{"a later reset", http.StatusOK, h("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "50"), []time.Duration{50 * time.Second}},
		{"remaining unparsable", http.StatusOK, h("X-Ratelimit-Remaining", "lots"), []time.Duration{30 * time.Second}},
		{"a 429 with remaining left", http.StatusTooManyRequests, h("X-Ratelimit-Remaining", "5"), []time.Duration{30 * time.Second}},
		{"ietf one left, one exhausted", http.StatusOK, h("Ratelimit", `"s";r=4;t=1, "h";r=0;t=9`), []time.Duration{30 * time.Second}},
		{"remaining left", http.StatusOK, h("X-Ratelimit-Remaining", " 5 "), nil},
		{"ietf left", http.StatusOK, h("Ratelimit", `"api";r=1;t=30`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			next := stub(func(*http.Request) (int, http.Header) {
				n++
				switch n {
				case 1:
					return http.StatusOK, h("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "30")
				case 2:
					return tt.status, tt.second
				}
				return http.StatusOK, nil
			})
			clock := newClock()
			rt, _ := newTransport(t, next, clock, client.WithPacing(true), client.WithMaxRetries(0))
			require.NoError(t, do(rt, context.Background(), "http://api.example/"))
			// a deadline before the reset: sent at once, and the server answers
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			require.NoError(t, do(rt, ctx, "http://api.example/favicon.ico"))
			assert.Empty(t, clock.Waits())
			require.NoError(t, do(rt, context.Background(), "http://api.example/"))
			assert.Equal(t, tt.wait, clock.Waits())
		})
	}
}

// TestPacingHostIsNormalized: the pacing key is the lower-cased host,
// without the scheme's default port; Wait.Host is the URL's host as is.
func TestPacingHostIsNormalized(t *testing.T) {
	tests := []struct {
		first, second string
		wait          bool
	}{
		{"https://API.Example.com:443/a", "https://api.example.com/b", true},
		{"https://api.example.com/a", "https://API.EXAMPLE.COM:443/b", true},
		{"http://api.example.com:80/a", "http://Api.Example.Com/b", true},
		{"https://api.example.com:8443/a", "https://api.example.com/b", false},
		{"http://api.example.com:443/a", "http://api.example.com/b", false},
		{"https://api.example.com:80/a", "https://api.example.com/b", false},
		{"https://[::1]:443/a", "https://[::1]/b", true},
	}
	for _, tt := range tests {
		t.Run(tt.first+" "+tt.second, func(t *testing.T) {
			next := stub(func(r *http.Request) (int, http.Header) {
				if r.URL.Path == "/a" {
					return http.StatusOK, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"5"}}
				}
				return http.StatusOK, nil
			})
			clock := newClock()
			rt, rec := newTransport(t, next, clock, client.WithPacing(true))
			require.NoError(t, do(rt, context.Background(), tt.first))
			require.NoError(t, do(rt, context.Background(), tt.second))
			if !tt.wait {
				assert.Empty(t, clock.Waits())
				return
			}
			assert.Equal(t, []time.Duration{5 * time.Second}, clock.Waits())
			u, err := url.Parse(tt.second)
			require.NoError(t, err)
			assert.Equal(t, []client.Wait{{Host: u.Host, Duration: 5 * time.Second, Source: client.SourcePacing}}, rec.Waits())
		})
	}
}
