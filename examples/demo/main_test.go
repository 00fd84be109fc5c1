package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/internal/cli"
)

// The tests of this package run the default program, demo.StdHTTP, as
// main does (package demotest); each framework's program runs the same
// checks of its routes, and compares its answers with this program's.

// start runs the default program with args on a fake clock (demotest.Start).
func start(t *testing.T, args ...string) *demotest.Demo {
	t.Helper()
	return demotest.Start(t, demo.StdHTTP, args...)
}

// startReal runs the default program with args on the system clock.
func startReal(t *testing.T, args ...string) *demotest.Demo {
	t.Helper()
	return demotest.StartReal(t, demo.StdHTTP, args...)
}

// startGated runs the default program with args, with reports that work
// until the gate opens (demotest.StartGated).
func startGated(t *testing.T, args ...string) (*demotest.Demo, *demotest.Gate) {
	t.Helper()
	return demotest.StartGated(t, demo.StdHTTP, args...)
}

// run runs the default program with args until ctx is done, as main does.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return demo.Run(ctx, demo.StdHTTP, args, stdout, stderr)
}

func TestDefaults(t *testing.T) {
	d := start(t)
	for i := 1; i <= 10; i++ {
		r := d.Get("/")
		require.Equal(t, http.StatusOK, r.Status, "request %d", i)
		assert.Equal(t, "hello\n", r.Body)
		assert.Equal(t, "10", r.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(10-i), r.Header.Get("X-RateLimit-Remaining"))
		assert.NotEmpty(t, r.Header.Get("X-RateLimit-Reset"))
	}
	r := d.Get("/")
	p := demotest.RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, demotest.QuotaExceeded, p.Type)
	assert.Equal(t, "demo", p.Limit)
	assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
	// Sliding window counter, 10 a minute, all at demotest.T0: the weighted count
	// falls to 9 a tenth into the next window.
	assert.Equal(t, "66", r.Header.Get("Retry-After"))
	assert.Equal(t, "66", r.Header.Get("X-RateLimit-Retry-After"))

	// Health checks are never limited and carry no rate-limit headers.
	for range 20 {
		r := d.Get("/healthz")
		require.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, "ok\n", r.Body)
		assert.Empty(t, r.Header.Values("X-RateLimit-Limit"))
	}

	// Logins have their own counter: GET / being exhausted does not matter.
	for i := 1; i <= 5; i++ {
		r := d.Do("POST", "/login")
		require.Equal(t, http.StatusOK, r.Status, "login %d", i)
		assert.Equal(t, "logged in\n", r.Body)
		assert.Equal(t, "5", r.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(5-i), r.Header.Get("X-RateLimit-Remaining"))
	}
	r = d.Do("POST", "/login")
	p = demotest.RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "login", p.Limit)
	assert.Equal(t, "60", r.Header.Get("Retry-After"))

	// Other paths are limited like GET /.
	demotest.RequireProblem(t, d.Get("/nothing-here"), http.StatusTooManyRequests)

	// A minute later the login window is new; GET / still waits 6 s.
	d.Clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, d.Do("POST", "/login").Status)
	assert.Equal(t, "6", d.Get("/").Header.Get("Retry-After"))
	d.Clock.Advance(6 * time.Second)
	assert.Equal(t, http.StatusOK, d.Get("/").Status)
}

func TestLoginCountedApart(t *testing.T) {
	d := start(t, "-limit", "3")
	for range 6 {
		d.Do("POST", "/login")
	}
	require.Equal(t, http.StatusTooManyRequests, d.Do("POST", "/login").Status)
	r := d.Get("/")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "2", r.Header.Get("X-RateLimit-Remaining"), "logins did not count against GET /")
	assert.Equal(t, http.StatusNotFound, d.Get("/missing").Status, "unknown paths are counted, then 404")
	assert.Equal(t, "0", d.Get("/").Header.Get("X-RateLimit-Remaining"))
}

func TestIETFHeaders(t *testing.T) {
	d := start(t, "-headers", "ietf", "-algorithm", "fixed-window", "-limit", "2", "-period", "30s")
	r := d.Get("/")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"demo";q=2;w=30`, r.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"demo";r=1;t=30`, r.Header.Get("RateLimit"))
	assert.Empty(t, r.Header.Values("X-RateLimit-Limit"))
	d.Get("/")
	r = d.Get("/")
	demotest.RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "30", r.Header.Get("Retry-After"))

	r = d.Do("POST", "/login")
	assert.Equal(t, `"login";q=5;w=60`, r.Header.Get("RateLimit-Policy"), "the style applies to logins too")
}

func TestBothHeaders(t *testing.T) {
	r := start(t, "-headers", "both").Get("/")
	assert.Equal(t, "9", r.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, `"demo";r=9;t=120`, r.Header.Get("RateLimit"))
}

func TestTokenBucketBurst(t *testing.T) {
	// 6 a minute (one every 10 s), at most 2 at once.
	d := start(t, "-algorithm", "token_bucket", "-limit", "6", "-burst", "2")
	for range 2 {
		require.Equal(t, http.StatusOK, d.Get("/").Status)
	}
	r := d.Get("/")
	demotest.RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "2", r.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "10", r.Header.Get("Retry-After"))
	d.Clock.Advance(10 * time.Second)
	assert.Equal(t, http.StatusOK, d.Get("/").Status)
}

func TestShaping(t *testing.T) {
	// One slot every 50 ms; no request waits more than 60 ms.
	d := start(t, "-algorithm", "leaky-bucket", "-limit", "20", "-period", "1s", "-shape", "-max-delay", "60ms")
	require.Equal(t, http.StatusOK, d.Get("/").Status)
	begin := time.Now()
	r := d.Get("/")
	require.Equal(t, http.StatusOK, r.Status)
	assert.GreaterOrEqual(t, time.Since(begin), 50*time.Millisecond, "held for its slot")
	// The next slot is 100 ms away (the store's clock stands still).
	demotest.RequireProblem(t, d.Get("/"), http.StatusTooManyRequests)
}

func TestKeyHeader(t *testing.T) {
	d := start(t, "-key", "header:X-API-Key", "-limit", "1")
	require.Equal(t, http.StatusOK, d.Get("/", "X-API-Key", "alice").Status)
	require.Equal(t, http.StatusTooManyRequests, d.Get("/", "X-API-Key", "alice").Status)
	require.Equal(t, http.StatusOK, d.Get("/", "X-API-Key", "bob").Status)

	r := d.Get("/")
	demotest.RequireProblem(t, r, http.StatusBadRequest)
	assert.Empty(t, r.Header.Values("Retry-After"))
	// Logins are still limited per client IP.
	require.Equal(t, http.StatusOK, d.Do("POST", "/login").Status)
}

func TestKeyQuery(t *testing.T) {
	d := start(t, "-key", "query:user", "-limit", "1")
	require.Equal(t, http.StatusOK, d.Get("/?user=alice").Status)
	require.Equal(t, http.StatusTooManyRequests, d.Get("/?user=alice").Status)
	require.Equal(t, http.StatusOK, d.Get("/?user=bob").Status)
}

func TestTrustedProxies(t *testing.T) {
	d := start(t, "-trusted-proxies", "10.0.0.0/8, 127.0.0.1", "-limit", "1")
	require.Equal(t, http.StatusOK, d.Get("/", "X-Forwarded-For", "192.0.2.1").Status)
	require.Equal(t, http.StatusTooManyRequests, d.Get("/", "X-Forwarded-For", "192.0.2.1").Status)
	require.Equal(t, http.StatusOK, d.Get("/", "X-Forwarded-For", "192.0.2.2").Status)
	// The login limit uses the same client IPs.
	for range 5 {
		require.Equal(t, http.StatusOK, d.Do("POST", "/login", "X-Forwarded-For", "192.0.2.3").Status)
	}
	require.Equal(t, http.StatusTooManyRequests, d.Do("POST", "/login", "X-Forwarded-For", "192.0.2.3").Status)
	require.Equal(t, http.StatusOK, d.Do("POST", "/login", "X-Forwarded-For", "192.0.2.4").Status)
}

func TestUntrustedForwardedForIgnored(t *testing.T) {
	d := start(t, "-limit", "1")
	require.Equal(t, http.StatusOK, d.Get("/", "X-Forwarded-For", "192.0.2.1").Status)
	require.Equal(t, http.StatusTooManyRequests, d.Get("/", "X-Forwarded-For", "192.0.2.2").Status,
		"without trusted proxies the peer is the client")
}

func TestIPv6Prefix(t *testing.T) {
	d := start(t, "-trusted-proxies", "127.0.0.1", "-ipv6-prefix", "48", "-limit", "1")
	require.Equal(t, http.StatusOK, d.Get("/", "X-Forwarded-For", "2001:db8:1:1::1").Status)
	require.Equal(t, http.StatusTooManyRequests, d.Get("/", "X-Forwarded-For", "2001:db8:1:2::1").Status, "same /48")
	require.Equal(t, http.StatusOK, d.Get("/", "X-Forwarded-For", "2001:db8:2::1").Status)
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
		{[]string{"-framework", "gin"}, []string{"-framework gin: this program serves stdhttp only", "run go run ./examples/demo/gin"}},
		{[]string{"-framework", "fiber3", "-limit", "5"}, []string{"run go run ./examples/demo/fiber3 (the same demo and flags)"}},
		{[]string{"-metrics"}, []string{"-metrics: this program leaves the Prometheus client out", "run go run ./examples/demo/metrics"}},
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

// TestFirstLines: as it starts, the demo says to stderr where it will
// listen and what GET / allows; once it listens, what to curl.
func TestFirstLines(t *testing.T) {
	tests := []struct {
		args []string
		want string // the first line, but the address
	}{
		{nil, "with net/http: GET / allows 10 requests per minute per client IP (sliding-window-counter), counted in memory; " +
			"POST /login 5 requests per minute per client IP (fixed-window) (-h lists the flags)"},
		{[]string{"-algorithm", "token-bucket", "-limit", "5", "-period", "10s", "-burst", "2", "-key", "header:X-API-Key"},
			"GET / allows 5 requests per 10s per X-API-Key header (token-bucket, bursts of 2), counted in memory;"},
		{[]string{"-algorithm", "leaky-bucket", "-limit", "20", "-period", "1s", "-shape", "-key", "query:user"},
			"GET / allows 20 requests per second per ?user= value (leaky-bucket, shaped), counted in memory;"},
		{[]string{"-elastic", "50"}, "counted in memory, up to 50% more while there is room;"},
		{[]string{"-config", demotest.WriteRules(t)}, "GET / limited by the rules of "},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			d := start(t, tt.args...)
			first, rest, _ := strings.Cut(d.Stderr(), "\n")
			assert.True(t, strings.HasPrefix(first, "demo: starting on 127.0.0.1:0 with net/http: "), first)
			assert.Contains(t, first, tt.want)
			assert.Contains(t, rest, "demo: try: curl -i "+d.Base+"/   (routes: GET / /healthz /upstream, POST /login /orders /reports; see examples/demo/README.md)\n")
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
	goroutines := demotest.CountGoroutines()
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
	demotest.WaitGoroutines(t, goroutines)
}
