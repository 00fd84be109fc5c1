package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/cli"
)

// t0 is a whole hour since the Unix epoch: every window starts there.
var t0 = time.Unix(1_699_999_200, 0)

// demo is a running demo server.
type demo struct {
	t      *testing.T
	stderr *lineWriter
	base   string
	clock  *storetest.Clock
	client *http.Client
}

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

// start runs the demo with args plus -addr 127.0.0.1:0 and a fake clock,
// and stops it, checking that nothing leaks, when the test ends.
func start(t *testing.T, args ...string) *demo {
	t.Helper()
	clock := storetest.NewClock(t0)
	return launch(t, clock, fakeTime(clock), args...)
}

// startReal runs the demo as start does, but on the system clock, as main
// does.
func startReal(t *testing.T, args ...string) *demo {
	t.Helper()
	return launch(t, nil, fakes{}, args...)
}

// fakeTime returns the fakes of a demo on clock: the stores read it, and
// the waits of GET /upstream's client move it forward.
func fakeTime(clock *storetest.Clock) fakes {
	return fakes{clock: clock.Now, sleep: advancing{clock}}
}

// advancing is a client.Clock that does not sleep: a wait moves the
// clock forward, and with it the limiters that read it.
type advancing struct{ *storetest.Clock }

func (c advancing) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// launch runs the demo with args plus -addr 127.0.0.1:0 and the fakes f
// (clock is that of f, or nil), and stops it, checking that nothing
// leaks, when the test ends.
func launch(t *testing.T, clock *storetest.Clock, f fakes, args ...string) *demo {
	t.Helper()
	goroutines := countGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &lineWriter{lines: make(chan string, 1)}
	stderr := &lineWriter{lines: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), stdout, stderr, f)
	}()

	var line string
	select {
	case line = <-stdout.lines:
	case err := <-done:
		cancel()
		t.Fatalf("demo exited before listening: %v", err)
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

	d := &demo{t: t, stderr: stderr, base: "http://" + addr, clock: clock,
		client: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "graceful shutdown")
		case <-time.After(15 * time.Second):
			t.Fatal("demo did not shut down")
		}
		assert.Equal(t, line+"\n", stdout.String(), "stdout holds the address line only")
		d.client.CloseIdleConnections()
		_, err := net.DialTimeout("tcp", addr, time.Second)
		assert.Error(t, err, "the listener is closed")
		waitGoroutines(t, goroutines)
	})
	return d
}

// waitGoroutines fails the test unless the number of goroutines
// (countGoroutines) falls back to at most n soon: connection goroutines end
// asynchronously.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for countGoroutines() > n {
		if time.Now().After(deadline) {
			t.Fatalf("leaked goroutines: %d, was %d\n%s", countGoroutines(), n, stacks())
		}
		time.Sleep(10 * time.Millisecond) // polling for goroutines to end, not timing a limit
	}
}

// countGoroutines returns the number of goroutines but those that
// fasthttp (the server under -framework fiber and fiber3) leaves running
// on purpose: the clock of its Date header, which runs for the life of the
// process once a response has been written, the cleaner of a server's
// worker pool, which sleeps for up to 10 s before it notices that the
// server stopped, and the idle workers it has yet to clean up, which
// another Fiber demo's requests may start while this one runs.
func countGoroutines() int {
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

type response struct {
	status int
	header http.Header
	body   string
}

func (d *demo) do(method, path string, header ...string) response {
	d.t.Helper()
	req, err := http.NewRequest(method, d.base+path, nil)
	require.NoError(d.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.client.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return response{resp.StatusCode, resp.Header, string(body)}
}

func (d *demo) get(path string, header ...string) response { return d.do("GET", path, header...) }

// quotaExceeded is the problem type of a 429.
const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Limit  string `json:"limit"`
}

func requireProblem(t *testing.T, r response, status int) problem {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal([]byte(r.body), &p), "body: %s", r.body)
	assert.Equal(t, status, p.Status)
	return p
}

func TestDefaults(t *testing.T) {
	d := start(t)
	for i := 1; i <= 10; i++ {
		r := d.get("/")
		require.Equal(t, http.StatusOK, r.status, "request %d", i)
		assert.Equal(t, "hello\n", r.body)
		assert.Equal(t, "10", r.header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(10-i), r.header.Get("X-RateLimit-Remaining"))
		assert.NotEmpty(t, r.header.Get("X-RateLimit-Reset"))
	}
	r := d.get("/")
	p := requireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, quotaExceeded, p.Type)
	assert.Equal(t, "demo", p.Limit)
	assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
	// Sliding window counter, 10 a minute, all at t0: the weighted count
	// falls to 9 a tenth into the next window.
	assert.Equal(t, "66", r.header.Get("Retry-After"))
	assert.Equal(t, "66", r.header.Get("X-RateLimit-Retry-After"))

	// Health checks are never limited and carry no rate-limit headers.
	for range 20 {
		r := d.get("/healthz")
		require.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, "ok\n", r.body)
		assert.Empty(t, r.header.Values("X-RateLimit-Limit"))
	}

	// Logins have their own counter: GET / being exhausted does not matter.
	for i := 1; i <= 5; i++ {
		r := d.do("POST", "/login")
		require.Equal(t, http.StatusOK, r.status, "login %d", i)
		assert.Equal(t, "logged in\n", r.body)
		assert.Equal(t, "5", r.header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(5-i), r.header.Get("X-RateLimit-Remaining"))
	}
	r = d.do("POST", "/login")
	p = requireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "login", p.Limit)
	assert.Equal(t, "60", r.header.Get("Retry-After"))

	// Other paths are limited like GET /.
	requireProblem(t, d.get("/nothing-here"), http.StatusTooManyRequests)

	// A minute later the login window is new; GET / still waits 6 s.
	d.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, d.do("POST", "/login").status)
	assert.Equal(t, "6", d.get("/").header.Get("Retry-After"))
	d.clock.Advance(6 * time.Second)
	assert.Equal(t, http.StatusOK, d.get("/").status)
}

func TestLoginCountedApart(t *testing.T) {
	d := start(t, "-limit", "3")
	for range 6 {
		d.do("POST", "/login")
	}
	require.Equal(t, http.StatusTooManyRequests, d.do("POST", "/login").status)
	r := d.get("/")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "2", r.header.Get("X-RateLimit-Remaining"), "logins did not count against GET /")
	assert.Equal(t, http.StatusNotFound, d.get("/missing").status, "unknown paths are counted, then 404")
	assert.Equal(t, "0", d.get("/").header.Get("X-RateLimit-Remaining"))
}

func TestIETFHeaders(t *testing.T) {
	d := start(t, "-headers", "ietf", "-algorithm", "fixed-window", "-limit", "2", "-period", "30s")
	r := d.get("/")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, `"demo";q=2;w=30`, r.header.Get("RateLimit-Policy"))
	assert.Equal(t, `"demo";r=1;t=30`, r.header.Get("RateLimit"))
	assert.Empty(t, r.header.Values("X-RateLimit-Limit"))
	d.get("/")
	r = d.get("/")
	requireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "30", r.header.Get("Retry-After"))

	r = d.do("POST", "/login")
	assert.Equal(t, `"login";q=5;w=60`, r.header.Get("RateLimit-Policy"), "the style applies to logins too")
}

func TestBothHeaders(t *testing.T) {
	r := start(t, "-headers", "both").get("/")
	assert.Equal(t, "9", r.header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, `"demo";r=9;t=120`, r.header.Get("RateLimit"))
}

func TestTokenBucketBurst(t *testing.T) {
	// 6 a minute (one every 10 s), at most 2 at once.
	d := start(t, "-algorithm", "token_bucket", "-limit", "6", "-burst", "2")
	for range 2 {
		require.Equal(t, http.StatusOK, d.get("/").status)
	}
	r := d.get("/")
	requireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "2", r.header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "10", r.header.Get("Retry-After"))
	d.clock.Advance(10 * time.Second)
	assert.Equal(t, http.StatusOK, d.get("/").status)
}

func TestShaping(t *testing.T) {
	// One slot every 50 ms; no request waits more than 60 ms.
	d := start(t, "-algorithm", "leaky-bucket", "-limit", "20", "-period", "1s", "-shape", "-max-delay", "60ms")
	require.Equal(t, http.StatusOK, d.get("/").status)
	begin := time.Now()
	r := d.get("/")
	require.Equal(t, http.StatusOK, r.status)
	assert.GreaterOrEqual(t, time.Since(begin), 50*time.Millisecond, "held for its slot")
	// The next slot is 100 ms away (the store's clock stands still).
	requireProblem(t, d.get("/"), http.StatusTooManyRequests)
}

func TestKeyHeader(t *testing.T) {
	d := start(t, "-key", "header:X-API-Key", "-limit", "1")
	require.Equal(t, http.StatusOK, d.get("/", "X-API-Key", "alice").status)
	require.Equal(t, http.StatusTooManyRequests, d.get("/", "X-API-Key", "alice").status)
	require.Equal(t, http.StatusOK, d.get("/", "X-API-Key", "bob").status)

	r := d.get("/")
	requireProblem(t, r, http.StatusBadRequest)
	assert.Empty(t, r.header.Values("Retry-After"))
	// Logins are still limited per client IP.
	require.Equal(t, http.StatusOK, d.do("POST", "/login").status)
}

func TestKeyQuery(t *testing.T) {
	d := start(t, "-key", "query:user", "-limit", "1")
	require.Equal(t, http.StatusOK, d.get("/?user=alice").status)
	require.Equal(t, http.StatusTooManyRequests, d.get("/?user=alice").status)
	require.Equal(t, http.StatusOK, d.get("/?user=bob").status)
}

func TestTrustedProxies(t *testing.T) {
	d := start(t, "-trusted-proxies", "10.0.0.0/8, 127.0.0.1", "-limit", "1")
	require.Equal(t, http.StatusOK, d.get("/", "X-Forwarded-For", "192.0.2.1").status)
	require.Equal(t, http.StatusTooManyRequests, d.get("/", "X-Forwarded-For", "192.0.2.1").status)
	require.Equal(t, http.StatusOK, d.get("/", "X-Forwarded-For", "192.0.2.2").status)
	// The login limit uses the same client IPs.
	for range 5 {
		require.Equal(t, http.StatusOK, d.do("POST", "/login", "X-Forwarded-For", "192.0.2.3").status)
	}
	require.Equal(t, http.StatusTooManyRequests, d.do("POST", "/login", "X-Forwarded-For", "192.0.2.3").status)
	require.Equal(t, http.StatusOK, d.do("POST", "/login", "X-Forwarded-For", "192.0.2.4").status)
}

func TestUntrustedForwardedForIgnored(t *testing.T) {
	d := start(t, "-limit", "1")
	require.Equal(t, http.StatusOK, d.get("/", "X-Forwarded-For", "192.0.2.1").status)
	require.Equal(t, http.StatusTooManyRequests, d.get("/", "X-Forwarded-For", "192.0.2.2").status,
		"without trusted proxies the peer is the client")
}

func TestIPv6Prefix(t *testing.T) {
	d := start(t, "-trusted-proxies", "127.0.0.1", "-ipv6-prefix", "48", "-limit", "1")
	require.Equal(t, http.StatusOK, d.get("/", "X-Forwarded-For", "2001:db8:1:1::1").status)
	require.Equal(t, http.StatusTooManyRequests, d.get("/", "X-Forwarded-For", "2001:db8:1:2::1").status, "same /48")
	require.Equal(t, http.StatusOK, d.get("/", "X-Forwarded-For", "2001:db8:2::1").status)
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"-algorithm", "foo"}, []string{`unknown algorithm "foo"`,
			"token-bucket, leaky-bucket, fixed-window, sliding-window-log, sliding-window-counter"}},
		{[]string{"-limit", "0"}, []string{"-limit 0", "from 1 to"}},
		{[]string{"-limit", "-3"}, []string{"-limit -3", "from 1 to"}},
		{[]string{"-period", "0s"}, []string{"-period 0s", "positive"}},
		{[]string{"-fail", "maybe"}, []string{`"maybe"`, "open, closed"}},
		{[]string{"-key", "bogus"}, []string{`"bogus"`, "ip, header:NAME, query:NAME"}},
		{[]string{"-key", "header:"}, []string{"header name missing", "ip, header:NAME, query:NAME"}},
		{[]string{"-key", "header:a b"}, []string{"not a valid header name"}},
		{[]string{"-algorithm", "fixed-window", "-burst", "5"}, []string{"-burst", "token-bucket and leaky-bucket", "fixed-window"}},
		{[]string{"-burst", "5"}, []string{"-burst", "sliding-window-counter"}},
		{[]string{"-algorithm", "token-bucket", "-burst", "0"}, []string{"-burst 0", "from 1 to"}},
		{[]string{"-shape"}, []string{"-shape", "leaky-bucket"}},
		{[]string{"-algorithm", "leaky-bucket", "-max-delay", "1s"}, []string{"-max-delay", "-shape"}},
		{[]string{"-algorithm", "leaky-bucket", "-shape", "-max-delay", "-1s"}, []string{"-max-delay -1s", "negative"}},
		{[]string{"-framework", "martini"}, []string{`"martini"`, "valid: stdhttp, gin, echo, echo5, fiber, fiber3, chi"}},
		{[]string{"-headers", "fancy"}, []string{`"fancy"`, "x-ratelimit, ietf, both"}},
		{[]string{"-ipv6-prefix", "200"}, []string{"200"}},
		{[]string{"-trusted-proxies", "10.0.0.0/8,nonsense"}, []string{"nonsense"}},
		{[]string{"-limit", "ten"}, []string{"-limit"}},
		{[]string{"-no-such-flag"}, []string{"no-such-flag"}},
		{[]string{"extra"}, []string{`"extra"`}},
		{[]string{"-store", "disk"}, []string{`"disk"`, "memory, redis"}},
		{[]string{"-redis", "redis://127.0.0.1:6379/0"}, []string{"-redis applies only with -store redis"}},
		{[]string{"-redis-prefix", "x"}, []string{"-redis-prefix applies only with -store redis"}},
		{[]string{"-store", "redis", "-redis", "nonsense"}, []string{`"nonsense" is not host:port`}},
		{[]string{"-store", "redis", "-redis", "10.0.0.1:7000,,"}, []string{"is not host:port"}},
		{[]string{"-store", "redis", "-redis", "http://127.0.0.1:6379"}, []string{"-redis", "redis://"}},
		{[]string{"-store", "redis", "-redis-prefix", "a{b}"}, []string{"-redis-prefix", "not allowed"}},
		{[]string{"-elastic", "-5"}, []string{"-elastic -5", "from 1 to 1000", "0 for none"}},
		{[]string{"-elastic", "1001"}, []string{"-elastic 1001", "from 1 to 1000"}},
		{[]string{"-elastic", "100", "-config", "rules.yaml"}, []string{"-elastic applies only without -config"}},
		{[]string{"-elastic", "100", "-store", "hybrid"}, []string{"-elastic does not work with -store hybrid", "memory or redis"}},
		{[]string{"-elastic-in-flight", "5"}, []string{"-elastic-in-flight applies only with -elastic"}},
		{[]string{"-elastic", "0", "-elastic-in-flight", "5"}, []string{"-elastic-in-flight applies only with -elastic"}},
		{[]string{"-elastic", "50", "-elastic-in-flight", "0"}, []string{"-elastic-in-flight 0", "from 1 to 1048576"}},
		{[]string{"-elastic", "1000", "-limit", strconv.Itoa(core.MaxCount)}, []string{"-elastic 1000 with -limit"}},
		{[]string{"-upstream", "ftp://127.0.0.1/"}, []string{`-upstream "ftp://127.0.0.1/"`, "http:// or https:// URL"}},
		{[]string{"-upstream", "127.0.0.1:8081"}, []string{"http:// or https:// URL"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			require.Error(t, err)
			assert.Empty(t, stdout.String(), "nothing is served")

			var ue *cli.UsageError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, 2, cli.ExitCode("demo", err, &stderr))
			for _, w := range tt.want {
				assert.Contains(t, stderr.String(), w)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 0, cli.ExitCode("demo", nil, &stderr))
	assert.Equal(t, 0, cli.ExitCode("demo", flag.ErrHelp, &stderr))
	assert.Empty(t, stderr.String())
	assert.Equal(t, 1, cli.ExitCode("demo", errors.New("boom"), &stderr))
	assert.Equal(t, "demo: boom\n", stderr.String())
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &stdout, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, name := range []string{"-addr", "-framework", "-algorithm", "-limit", "-period", "-burst", "-shape",
		"-max-delay", "-key", "-trusted-proxies", "-ipv6-prefix", "-fail", "-headers", "-store", "-redis", "-redis-prefix", "-metrics",
		"-admin", "-admin-token", "-elastic", "-elastic-in-flight", "-upstream"} {
		assert.Contains(t, stderr.String(), name)
	}
}

func TestListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"-addr", ln.Addr().String()}, &stdout, &stderr)
	require.Error(t, err)
	assert.Empty(t, stdout.String())
	assert.Equal(t, 1, cli.ExitCode("demo", err, &stderr))
}

// TestRunRealClock runs the demo as main does, on the system clock.
func TestRunRealClock(t *testing.T) {
	goroutines := countGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-algorithm", "sliding-window-log", "-limit", "2"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	addr := strings.TrimSuffix(strings.TrimPrefix(line, "listening on "), "\n")
	client := &http.Client{Transport: &http.Transport{}}
	codes := []int{}
	for range 3 {
		resp, err := client.Get("http://" + addr + "/")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429}, codes)
	cancel()
	require.NoError(t, <-done)
	client.CloseIdleConnections()
	waitGoroutines(t, goroutines)
}
