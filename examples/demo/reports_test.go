package main

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// gate is the work of a report in tests: each report says that it has
// started, then works until the test opens the gate, or its request ends.
// No test times a report.
type gate struct {
	started chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gate) work(ctx context.Context, _ time.Duration) error {
	g.started <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits until n more reports have started.
func (g *gate) await(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-g.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("report %d of %d did not start", i+1, n)
		}
	}
}

// release opens the gate: reports at work finish, and later ones do not
// wait.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// startGated runs the demo as start does, with reports that work until the
// gate returned opens (at the latest when the test ends, before the demo
// stops).
func startGated(t *testing.T, args ...string) (*demo, *gate) {
	t.Helper()
	g := &gate{started: make(chan struct{}, 64), open: make(chan struct{})}
	clock := storetest.NewClock(t0)
	f := fakeTime(clock)
	f.work = g.work
	d := launch(t, clock, f, args...)
	t.Cleanup(g.release) // before the demo's cleanup, which waits for its requests
	return d, g
}

// goDo sends a request in its own goroutine; its response, or its error,
// comes on the channel returned.
func (d *demo) goDo(method, path string, header ...string) <-chan response {
	out := make(chan response, 1)
	req, err := http.NewRequest(method, d.base+path, nil)
	require.NoError(d.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	go func() {
		resp, err := d.client.Do(req)
		if err != nil {
			out <- response{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- response{status: -1, body: err.Error()}
			return
		}
		out <- response{resp.StatusCode, resp.Header, string(body)}
	}()
	return out
}

// receive returns the response of goDo.
func receive(t *testing.T, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		require.NotEqual(t, -1, r.status, r.body)
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
		return response{}
	}
}

// other is the header of another client than the test's, for a demo run
// with -trusted-proxies 127.0.0.1.
var other = []string{"X-Forwarded-For", "192.0.2.9"}

// checkReports: two reports of a client IP at once, the third refused
// with 429 (that of the concurrency limit, with the rate limit's fields),
// while another client's report runs; a slot frees when a report ends;
// ?ms= out of bounds is 400; the rate limit comes first.
func checkReports(t *testing.T, d *demo, g *gate) {
	t.Helper()
	first, second := d.goDo("POST", "/reports"), d.goDo("POST", "/reports")
	g.await(t, 2)
	r := d.do("POST", "/reports")
	p := requireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, quotaExceeded, p.Type)
	assert.Equal(t, "reports-in-flight", p.Limit)
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	assert.Equal(t, "10", r.header.Get("X-RateLimit-Limit"), "the rate limit came first")
	assert.Equal(t, "7", r.header.Get("X-RateLimit-Remaining"))

	third := d.goDo("POST", "/reports", other...) // the slots are per client IP
	g.await(t, 1)
	g.release()
	for _, ch := range []<-chan response{first, second, third} {
		r := receive(t, ch)
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "report ready after 1s of work\n", r.body)
		assert.Equal(t, textPlain, r.header.Get("Content-Type"))
	}

	r = d.do("POST", "/reports?ms=250")
	require.Equal(t, http.StatusOK, r.status, "the slots are free: %s", r.body)
	assert.Equal(t, "report ready after 250ms of work\n", r.body)
	for _, ms := range []string{"5001", "-1", "1e3", "%3Cscript%3E"} {
		r := d.do("POST", "/reports?ms="+ms)
		require.Equal(t, http.StatusBadRequest, r.status, ms)
		assert.Equal(t, badWork+"\n", r.body, "no client text in the answer")
	}
	// 8 of the 10 a minute counted so far: the refused one too.
	for i := range 2 {
		require.Equal(t, http.StatusOK, d.do("POST", "/reports?ms=0").status, "report %d", 9+i)
	}
	r = d.do("POST", "/reports?ms=0")
	assert.Equal(t, "reports", requireProblem(t, r, http.StatusTooManyRequests).Limit)
	assert.Equal(t, "60", r.header.Get("Retry-After"))
	g.await(t, 3) // the reports that worked since the gate opened
}

func TestReports(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			d, g := startGated(t, "-framework", fw, "-trusted-proxies", "127.0.0.1")
			checkReports(t, d, g)
		})
	}
}

// TestReportsInRedis: with -store redis or hybrid the slots are leases in
// Redis, which demo servers on it share: a client with a report at work
// on each of two servers has no third slot on either.
func TestReportsInRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []string{"redis", "hybrid"} {
		t.Run(store, func(t *testing.T) {
			args := []string{"-store", store, "-redis", redisURL(srv), "-redis-prefix", "demo-" + store, "-trusted-proxies", "127.0.0.1"}
			a, ga := startGated(t, args...)
			b, gb := startGated(t, args...)
			first, second := a.goDo("POST", "/reports"), b.goDo("POST", "/reports")
			ga.await(t, 1)
			gb.await(t, 1)
			for _, d := range []*demo{a, b} {
				r := d.do("POST", "/reports")
				assert.Equal(t, "reports-in-flight", requireProblem(t, r, http.StatusTooManyRequests).Limit)
			}
			third := b.goDo("POST", "/reports", other...)
			gb.await(t, 1)
			ga.release()
			gb.release()
			for _, ch := range []<-chan response{first, second, third} {
				assert.Equal(t, http.StatusOK, receive(t, ch).status)
			}
			assert.Equal(t, http.StatusOK, a.do("POST", "/reports").status, "the slot of a report that ended is free on every server")
			a.client.CloseIdleConnections()
			b.client.CloseIdleConnections()
		})
	}
}

// TestReportCancelled: the default work of a report ends with its
// request's context.
func TestReportCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, wait(ctx, time.Hour), context.Canceled)
	require.NoError(t, wait(context.Background(), 0))
}
