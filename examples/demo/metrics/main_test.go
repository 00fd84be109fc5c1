package main

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestMetrics: with -metrics, GET /metrics reports the decisions of both
// limits, is never limited and carries no rate-limit headers.
func TestMetrics(t *testing.T) {
	d := demotest.Start(t, program, "-metrics", "-algorithm", "fixed-window", "-limit", "10")
	for i := 0; i < 12; i++ {
		d.Get("/")
	}
	d.Do("POST", "/login")
	var r demotest.Response
	for i := 0; i < 30; i++ { // far past any limit
		r = d.Get("/metrics")
		require.Equal(t, http.StatusOK, r.Status)
		assert.Empty(t, r.Header.Values("X-RateLimit-Limit"))
	}
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo"} 10`,
		`ratekit_requests_total{decision="denied",limit="demo"} 2`,
		`ratekit_requests_total{decision="allowed",limit="login"} 1`,
		`ratekit_near_limit_total{limit="demo"} 2`,
		`ratekit_tracked_keys{limit="demo"} 1`,
		// Every decision of the memory store is timed.
		`ratekit_store_duration_seconds_count{limit="demo",store="memory"} 12`,
	} {
		assert.Contains(t, r.Body, line+"\n")
	}
}

// TestMetricsWithRules: with -config, the metrics follow the rules in
// force: a request under two rules counts once in ratekit_requests_total
// and once per rule in ratekit_decisions_total, the limits are labelled by
// their descriptor paths, the keys of each rule's limit are tracked, and
// the series of a rule that a reload removed are gone.
func TestMetricsWithRules(t *testing.T) {
	path := demotest.WriteRules(t)
	d := demotest.Start(t, program, "-metrics", "-config", path, "-trusted-proxies", "127.0.0.1/32")
	client := func(ip string) []string { return []string{"X-Forwarded-For", ip} }
	for range 4 {
		d.Get("/", client("192.0.2.1")...)
	}
	for range 3 {
		d.Do("POST", "/login", client("192.0.2.2")...)
	}
	body := d.Get("/metrics").Body
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo-test/remote_address"} 3`,
		`ratekit_requests_total{decision="denied",limit="demo-test/remote_address"} 1`,
		// The login rule (2 a minute) decides the logins, which the rule
		// of every route (3 a minute) decides too: each login counts once
		// as a request, and as a decision of both while admitted.
		`ratekit_requests_total{decision="allowed",limit="demo-test/remote_address@POST/login"} 2`,
		`ratekit_requests_total{decision="denied",limit="demo-test/remote_address@POST/login"} 1`,
		`ratekit_decisions_total{decision="allowed",limit="demo-test/remote_address"} 5`,
		`ratekit_decisions_total{decision="allowed",limit="demo-test/remote_address@POST/login"} 2`,
		`ratekit_tracked_keys{limit="demo-test/remote_address"} 2`,
		`ratekit_tracked_keys{limit="demo-test/remote_address@POST/login"} 1`,
	} {
		assert.Contains(t, body, line+"\n")
	}
	assert.NotContains(t, body, `limit="demo"`, "the flag-built limit is not in use")

	// Without the login rule, its series go.
	require.NoError(t, os.WriteFile(path, []byte(demotest.RulesV1[:strings.Index(demotest.RulesV1, "  - key: remote_address\n    match:")]), 0o644))
	demotest.WaitFor(t, func(int) bool { return !strings.Contains(d.Get("/metrics").Body, "@POST/login") })
	assert.Contains(t, d.Get("/metrics").Body, `ratekit_requests_total{decision="allowed",limit="demo-test/remote_address"} 3`+"\n")
}

// TestRedisMetrics: with -store redis, the store latency of every decision
// is in the histogram, labelled store="redis".
func TestRedisMetrics(t *testing.T) {
	srv := redistest.Start(t)
	d := demotest.Start(t, program, "-metrics", "-store", "redis", "-redis", demotest.RedisURL(srv), "-algorithm", "fixed-window", "-limit", "10")
	for i := 0; i < 12; i++ {
		d.Get("/")
	}
	r := d.Get("/metrics")
	require.Equal(t, http.StatusOK, r.Status)
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo"} 10`,
		`ratekit_requests_total{decision="denied",limit="demo"} 2`,
		`ratekit_store_duration_seconds_count{limit="demo",store="redis"} 12`,
		`ratekit_store_errors_total{store="redis"} 0`,
	} {
		assert.Contains(t, r.Body, line+"\n")
	}
	assert.NotContains(t, r.Body, "ratekit_tracked_keys", "Redis keys are not counted")
	d.Client.CloseIdleConnections()
}

// TestMetricsByDefault: this program serves GET /metrics without
// -metrics, and not with -metrics=false.
func TestMetricsByDefault(t *testing.T) {
	d := demotest.Start(t, program)
	d.Get("/")
	r := d.Get("/metrics")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Contains(t, r.Body, `ratekit_requests_total{decision="allowed",limit="demo"} 1`+"\n")
	assert.Contains(t, d.Stderr(), "(routes: GET / /healthz /upstream /metrics, POST /login /orders /reports;")

	d = demotest.Start(t, program, "-metrics=false", "-limit", "1")
	d.Get("/")
	demotest.RequireProblem(t, d.Get("/metrics"), http.StatusTooManyRequests) // limited as every other request
}

// TestElasticMetrics: the metrics count the elastic admissions apart
// (demotest.CheckElastic).
func TestElasticMetrics(t *testing.T) {
	d, g := demotest.StartGated(t, program, demotest.ElasticArgs...)
	demotest.CheckElastic(t, d, g, true)
}
