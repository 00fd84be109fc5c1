package demo

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/cli"
)

// The demo's servers are tested where its programs are (examples/demo and
// each framework's, with package demotest); this file tests what they
// cannot reach: the parsed flags, and the parts of a route alone.

// parse parses args as the default program does.
func parse(args ...string) (*config, error) { return parseFlags(StdHTTP, args, io.Discard) }

func TestParseAdmin(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	// With a token, any address will do.
	cfg, err := parse("-admin", "0.0.0.0:9091", "-admin-token", "t0ken")
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:9091", cfg.admin)
	t.Setenv(adminTokenEnv, "from-env")
	cfg, err = parse("-admin", ":9091")
	require.NoError(t, err)
	assert.Equal(t, "from-env", cfg.adminToken)
	for _, host := range []string{"127.0.0.1", "127.1.2.3", "::1", "localhost", "LocalHost", "::ffff:127.0.0.1"} {
		assert.True(t, isLoopback(host), host)
	}
	for _, host := range []string{"", "0.0.0.0", "::", "10.0.0.1", "localhost.example", "example.com"} {
		assert.False(t, isLoopback(host), host)
	}
}

func TestParseRulesKey(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", "redis://127.0.0.1:1/0"}, `-config "redis://127.0.0.1:1/0": no Redis key after the database number`},
		{[]string{"-config", "redis://127.0.0.1:1/ratekit:rules"}, "no Redis key after the database number"},
		{[]string{"-config", "redis://127.0.0.1:1/zero/k"}, `-config "redis://127.0.0.1:1/zero/k": redis: invalid database number`},
		{[]string{"-config", "redis://127.0.0.1:1/0/k", "-algorithm", "token-bucket"}, "-algorithm applies only without -config"},
	} {
		_, err := parse(tc.args...)
		assert.ErrorContains(t, err, tc.want)
		assert.Equal(t, 2, cli.ExitCode("demo", err, &strings.Builder{}), "%q", tc.args)
	}
	cfg, err := parse("-config", "redis://u:p@127.0.0.1:1/2/a%2Fb:c")
	require.NoError(t, err)
	assert.Equal(t, "a/b:c", cfg.rulesRedis.key)
	assert.Equal(t, 2, cfg.rulesRedis.options.DB)
	assert.Equal(t, "p", cfg.rulesRedis.options.Password)
	assert.Empty(t, cfg.rulesFile)
}

// TestPrograms: a program serves its own framework, names the program of
// another, and serves -metrics only with Program.Metrics.
func TestPrograms(t *testing.T) {
	gin := Program{Framework: "gin", Router: "Gin", Server: StdHTTP.Server}
	_, err := parseFlags(gin, []string{"-framework", "gin"}, io.Discard)
	require.NoError(t, err)
	_, err = parseFlags(gin, []string{"-framework", "stdhttp"}, io.Discard)
	assert.ErrorContains(t, err, "-framework stdhttp: this program serves gin only, so as not to build the other frameworks; run go run ./examples/demo (the same demo and flags)")
	_, err = parseFlags(gin, []string{"-framework", "chi"}, io.Discard)
	assert.ErrorContains(t, err, "run go run ./examples/demo/chi (the same demo and flags)")
	_, err = parseFlags(gin, []string{"-metrics"}, io.Discard)
	assert.ErrorContains(t, err, "-metrics: this program leaves the Prometheus client out")
	assert.Equal(t, 2, cli.ExitCode("demo", err, io.Discard))

	withMetrics := StdHTTP
	withMetrics.Metrics, withMetrics.MetricsByDefault = func(string, []MemoryLimit) (Metrics, error) { return nil, nil }, true
	cfg, err := parseFlags(withMetrics, nil, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.metrics, "on by default")
	cfg, err = parseFlags(withMetrics, []string{"-metrics=false"}, io.Discard)
	require.NoError(t, err)
	assert.False(t, cfg.metrics)
}

// TestStartLine: the first line says where the demo listens and what
// limits GET /, whatever the store and the rules.
func TestStartLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "demo: starting on 127.0.0.1:8080 with net/http: GET / allows 10 requests per minute per client IP " +
			"(sliding-window-counter), counted in memory; POST /login 5 requests per minute per client IP (fixed-window) (-h lists the flags)"},
		{[]string{"-store", "redis", "-limit", "3", "-period", "1h", "-algorithm", "fixed-window"},
			"GET / allows 3 requests per hour per client IP (fixed-window), counted in Redis at 127.0.0.1:6379;"},
		{[]string{"-store", "redis", "-redis", "10.0.0.1:7000,10.0.0.2:7000"}, "counted in Redis at 10.0.0.1:7000,10.0.0.2:7000;"},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", "us=redis://10.2.0.5:6379/0"},
			"counted in memory on leases from Redis at 127.0.0.1:6379, region eu;"},
		{[]string{"-config", "redis://127.0.0.1:6380/0/ratekit:rules:demo", "-store", "redis"},
			"GET / limited by the rules under Redis key ratekit:rules:demo at 127.0.0.1:6380, counted in Redis at 127.0.0.1:6379;"},
		{[]string{"-addr", ":9000", "-config", "rules.yaml"}, "demo: starting on :9000 with net/http: GET / limited by the rules of rules.yaml, counted in memory;"},
	} {
		cfg, err := parse(tc.args...)
		require.NoError(t, err, "%q", tc.args)
		assert.Contains(t, cfg.startLine(StdHTTP), tc.want, "%q", tc.args)
	}
}

func TestTryLine(t *testing.T) {
	assert.Equal(t, "demo: try: curl -i http://127.0.0.1:8080/   (routes: GET / /healthz /upstream, POST /login /orders /reports; see examples/demo/README.md)",
		tryLine(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, false))
	assert.Contains(t, tryLine(&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, true),
		"curl -i http://localhost:8080/   (routes: GET / /healthz /upstream /metrics,")
}

// noTurn is a client.Clock whose waits end at the request's deadline, as
// when the pacer's queue is longer than the call's timeout.
type noTurn struct{ *storetest.Clock }

func (noTurn) Sleep(context.Context, time.Duration) error { return context.DeadlineExceeded }

// TestUpstreamNoTurn: a call that gets no turn before its deadline is
// not sent, and is answered 503 with Retry-After.
func TestUpstreamNoTurn(t *testing.T) {
	cfg, err := parse()
	require.NoError(t, err)
	clock := storetest.NewClock(time.Unix(1_699_999_200, 0))
	u, err := cfg.upstream(t.Context(), clock.Now, noTurn{clock}, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer u.close()
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusServiceUnavailable} {
		w := httptest.NewRecorder()
		u.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/upstream", nil))
		require.Equal(t, want, w.Code, "call %d: %s", i+1, w.Body)
		if want == http.StatusServiceUnavailable {
			assert.Equal(t, "upstream: no turn within 5s\n", w.Body.String())
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
		}
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
