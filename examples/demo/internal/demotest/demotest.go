// Package demotest runs programs of the demo (package demo) in tests: a
// Demo is a demo server started on a free loopback port, on a fake clock
// or the system's, with a client to send it requests; it is stopped, and
// checked to leak nothing, when the test ends.
//
// The checks of a route (CheckOrders, CheckReports, ...) run on any
// program, and Framework runs them all on a framework's program, with the
// transcripts of the same requests on it and on the default program, which
// must match: every program answers alike.
package demotest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// T0 is a whole hour since the Unix epoch: the fake clock of a Demo starts
// there, and so does every window.
var T0 = time.Unix(1_699_999_200, 0)

// Demo is a running demo server.
type Demo struct {
	t      *testing.T
	stderr *lineWriter
	// Base is the URL of the server, such as http://127.0.0.1:40123.
	Base string
	// Clock is the fake clock of the stores; nil on the system clock.
	Clock *storetest.Clock
	// Client sends the requests of Do; close its idle connections before
	// another demo of the test stops, lest they count as its leak.
	Client *http.Client
}

// Stderr returns what the server has written to standard error.
func (d *Demo) Stderr() string { return d.stderr.String() }

// lineWriter passes the first line written to it on a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
	sent  bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		if line, _, ok := strings.Cut(w.buf.String(), "\n"); ok {
			w.lines <- line
			w.sent = true
		}
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Start runs the program p with args plus -addr 127.0.0.1:0 on a fake
// clock at T0, and stops it, checking that nothing leaks, when the test
// ends.
func Start(t *testing.T, p demo.Program, args ...string) *Demo {
	t.Helper()
	clock := storetest.NewClock(T0)
	return launch(t, p, clock, fakeTime(clock), args...)
}

// StartWith runs the program as Start does, with the fakes f (whose
// Clock and Sleep Start's fake clock replaces).
func StartWith(t *testing.T, p demo.Program, f demo.Fakes, args ...string) *Demo {
	t.Helper()
	clock := storetest.NewClock(T0)
	ft := fakeTime(clock)
	f.Clock, f.Sleep = ft.Clock, ft.Sleep
	return launch(t, p, clock, f, args...)
}

// StartReal runs the program as Start does, but on the system clock, as
// its main does.
func StartReal(t *testing.T, p demo.Program, args ...string) *Demo {
	t.Helper()
	return launch(t, p, nil, demo.Fakes{}, args...)
}

// fakeTime returns the fakes of a demo on clock: the stores read it, and
// the waits of GET /upstream's client move it forward.
func fakeTime(clock *storetest.Clock) demo.Fakes {
	return demo.Fakes{Clock: clock.Now, Sleep: Advancing{clock}}
}

// Advancing is a client.Clock that does not sleep: a wait moves the
// clock forward, and with it the limiters that read it.
type Advancing struct{ *storetest.Clock }

// Sleep moves the clock d forward.
func (c Advancing) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// launch runs the program p with args plus -addr 127.0.0.1:0 and the
// fakes f (clock is that of f, or nil), and stops it, checking that
// nothing leaks, when the test ends.
func launch(t *testing.T, p demo.Program, clock *storetest.Clock, f demo.Fakes, args ...string) *Demo {
	t.Helper()
	goroutines := CountGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &lineWriter{lines: make(chan string, 1)}
	stderr := &lineWriter{lines: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- demo.Serve(ctx, p, append([]string{"-addr", "127.0.0.1:0"}, args...), stdout, stderr, f)
	}()

	var line string
	select {
	case line = <-stdout.lines:
	case err := <-done:
		cancel()
		t.Fatalf("demo exited before listening: %v\n%s", err, stderr)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("demo did not print its address")
	}
	addr, ok := strings.CutPrefix(line, "listening on ")
	require.True(t, ok, "first line %q", line)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port, "the real port is printed")
	require.Contains(t, stderr.String(), "demo: try: curl -i http://"+addr+"/ ", "the curl line comes before the address")

	d := &Demo{t: t, stderr: stderr, Base: "http://" + addr, Clock: clock,
		Client: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "graceful shutdown")
		case <-time.After(15 * time.Second):
			t.Fatal("demo did not shut down")
		}
		assert.Equal(t, line+"\n", stdout.String(), "stdout holds the address line only")
		d.Client.CloseIdleConnections()
		_, err := net.DialTimeout("tcp", addr, time.Second)
		assert.Error(t, err, "the listener is closed")
		WaitGoroutines(t, goroutines)
	})
	return d
}

// WaitGoroutines fails the test unless the number of goroutines
// (CountGoroutines) falls back to at most n soon: connection goroutines
// end asynchronously.
func WaitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for CountGoroutines() > n {
		if time.Now().After(deadline) {
			t.Fatalf("leaked goroutines: %d, was %d\n%s", CountGoroutines(), n, stacks())
		}
		time.Sleep(10 * time.Millisecond) // polling for goroutines to end, not timing a limit
	}
}

// CountGoroutines returns the number of goroutines but those that
// fasthttp (the server of the Fiber programs) leaves running on purpose:
// the clock of its Date header, which runs for the life of the process
// once a response has been written, the cleaner of a server's worker
// pool, which sleeps for up to 10 s before it notices that the server
// stopped, and the idle workers it has yet to clean up, which another
// Fiber demo's requests may start while this one runs.
func CountGoroutines() int {
	n := 0
	for _, g := range strings.Split(stacks(), "\n\n") {
		idleWorker := strings.Contains(g, "[chan receive]") && strings.Contains(g, "fasthttp.(*workerPool).workerFunc")
		if !strings.Contains(g, "fasthttp.updateServerDate") && !strings.Contains(g, "fasthttp.(*workerPool).Start") && !idleWorker {
			n++
		}
	}
	return n
}

// stacks returns the stacks of all goroutines.
func stacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Response is what a demo answered.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends a request without body, with the header fields given as name,
// value pairs.
func (d *Demo) Do(method, path string, header ...string) Response {
	d.t.Helper()
	req, err := http.NewRequest(method, d.Base+path, nil)
	require.NoError(d.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.Client.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return Response{resp.StatusCode, resp.Header, string(body)}
}

// Get sends a GET request, as Do.
func (d *Demo) Get(path string, header ...string) Response { return d.Do("GET", path, header...) }

// GoDo sends a request in its own goroutine; its response, or its error,
// comes on the channel returned (see Receive).
func (d *Demo) GoDo(method, path string, header ...string) <-chan Response {
	out := make(chan Response, 1)
	req, err := http.NewRequest(method, d.Base+path, nil)
	require.NoError(d.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	go func() {
		resp, err := d.Client.Do(req)
		if err != nil {
			out <- Response{Status: -1, Body: err.Error()}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- Response{Status: -1, Body: err.Error()}
			return
		}
		out <- Response{resp.StatusCode, resp.Header, string(body)}
	}()
	return out
}

// Receive returns the response of GoDo, failing the test on an error or
// after 10 s.
func Receive(t *testing.T, ch <-chan Response) Response {
	t.Helper()
	select {
	case r := <-ch:
		require.NotEqual(t, -1, r.Status, r.Body)
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
		return Response{}
	}
}

// Alice is the token of the demo's customer alice, Bob bob's.
const (
	Alice = "alice-t0ken"
	Bob   = "bob-t0ken"
)

// Order posts an order of alice's to the demo.
func (d *Demo) Order(body string) Response {
	d.t.Helper()
	return d.OrderAs(Alice, body)
}

// OrderAs posts an order to the demo with the token, none when "", and
// the header fields header (name, value, ...).
func (d *Demo) OrderAs(token, body string, header ...string) Response {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.Base+"/orders", strings.NewReader(body))
	require.NoError(d.t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.Client.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return Response{resp.StatusCode, resp.Header, string(b)}
}

// QuotaExceeded is the problem type of a 429.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is the problem-details body of an answer over a limit.
type Problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Limit  string `json:"limit"`
}

// RequireProblem fails the test unless r has the status and a
// problem-details body, which it returns.
func RequireProblem(t *testing.T, r Response, status int) Problem {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	assert.Equal(t, answer.ProblemContentType, r.Header.Get("Content-Type"))
	assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	var p Problem
	require.NoError(t, json.Unmarshal([]byte(r.Body), &p), "body: %s", r.Body)
	assert.Equal(t, status, p.Status)
	return p
}

// Gate is the work of a report in tests: each report says that it has
// started, then works until the test opens the gate, or its request ends.
// No test times a report.
type Gate struct {
	started chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *Gate) work(ctx context.Context, _ time.Duration) error {
	g.started <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Await waits until n more reports have started.
func (g *Gate) Await(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-g.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("report %d of %d did not start", i+1, n)
		}
	}
}

// Release opens the gate: reports at work finish, and later ones do not
// wait.
func (g *Gate) Release() { g.once.Do(func() { close(g.open) }) }

// StartGated runs the program as Start does, with reports that work until
// the gate returned opens (at the latest when the test ends, before the
// demo stops).
func StartGated(t *testing.T, p demo.Program, args ...string) (*Demo, *Gate) {
	t.Helper()
	g := &Gate{started: make(chan struct{}, 64), open: make(chan struct{})}
	clock := storetest.NewClock(T0)
	f := fakeTime(clock)
	f.Work = g.work
	d := launch(t, p, clock, f, args...)
	t.Cleanup(g.Release) // before the demo's cleanup, which waits for its requests
	return d, g
}

// RedisURL is the -redis (or -peer) URL of a private Redis.
func RedisURL(srv *redistest.Server) string { return "redis://" + srv.Addr() + "/0" }

// Eventually polls cond until it holds, failing the test after 10 s:
// what it waits for (a file watcher, the syncs of a hybrid store) runs
// on the real clock.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling, not timing a limit
	}
}

// WaitFor polls cond, with the number of the attempt, until it holds, for
// at most 10 s: the file watcher reloads in real time, not on the demo's
// fake clock.
func WaitFor(t *testing.T, cond func(attempt int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := 1; !cond(n); n++ {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(20 * time.Millisecond) // polling a real-time file watcher, not timing a limit
	}
}

// adminListeningRE reads the URL of the admin listener in a demo's
// standard error.
var adminListeningRE = regexp.MustCompile(`demo: admin listening on (http://(\S+)/admin/ratekit/) `)

// AdminURL returns the base URL of the admin listener that the running
// demo printed to stderr: it prints it before the address of its API, so
// it is there once Start returns.
func (d *Demo) AdminURL() string {
	d.t.Helper()
	m := adminListeningRE.FindStringSubmatch(d.Stderr())
	require.NotNil(d.t, m, "stderr: %s", d.Stderr())
	host, port, err := net.SplitHostPort(m[2])
	require.NoError(d.t, err)
	require.Equal(d.t, "127.0.0.1", host)
	require.NotEqual(d.t, "0", port, "the real port is printed")
	require.NotEqual(d.t, d.Base, "http://"+m[2], "a listener of its own")
	return m[1]
}

// Admin sends a request to the admin listener: a GET without body, or a
// POST of body as JSON. token "" sends no Authorization header. It
// returns the status and the JSON body.
func (d *Demo) Admin(method, route, token string, body any) (int, map[string]any) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(d.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.AdminURL()+route, rd)
	require.NoError(d.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := d.Client.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	var got map[string]any
	require.NoError(d.t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(d.t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(d.t, "no-store", resp.Header.Get("Cache-Control"))
	if resp.StatusCode == http.StatusUnauthorized {
		assert.Equal(d.t, `Bearer realm="ratekit admin"`, resp.Header.Get("WWW-Authenticate"))
	}
	return resp.StatusCode, got
}

// State returns the decision of the admin listener's state for client ip
// under the limiter "demo", with the token "t0ken": whether a request
// would be allowed, and what would remain.
func (d *Demo) State(ip string) (allowed bool, remaining int) {
	d.t.Helper()
	status, got := d.Admin("GET", "state?limiter=demo&key="+ip, "t0ken", nil)
	require.Equal(d.t, http.StatusOK, status, "%v", got)
	dec := got["decision"].(map[string]any)
	return dec["allowed"].(bool), int(dec["remaining"].(float64))
}
