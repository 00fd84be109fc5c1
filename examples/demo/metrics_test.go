package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetrics: with -metrics, GET /metrics reports the decisions of both
// limits, is never limited and carries no rate-limit headers.
func TestMetrics(t *testing.T) {
	d := start(t, "-metrics", "-algorithm", "fixed-window", "-limit", "10")
	for i := 0; i < 12; i++ {
		d.get("/")
	}
	d.do("POST", "/login")
	var r response
	for i := 0; i < 30; i++ { // far past any limit
		r = d.get("/metrics")
		require.Equal(t, http.StatusOK, r.status)
		assert.Empty(t, r.header.Values("X-RateLimit-Limit"))
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
		assert.Contains(t, r.body, line+"\n")
	}
}

// TestMetricsWithRules: with -config, the metrics follow the rules in
// force: a request under two rules counts once in ratekit_requests_total
// and once per rule in ratekit_decisions_total, the limits are labelled by
// their descriptor paths, the keys of each rule's limit are tracked, and
// the series of a rule that a reload removed are gone.
func TestMetricsWithRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rulesV1), 0o644))
	d := start(t, "-metrics", "-config", path, "-trusted-proxies", "127.0.0.1/32")
	client := func(ip string) []string { return []string{"X-Forwarded-For", ip} }
	for range 4 {
		d.get("/", client("192.0.2.1")...)
	}
	for range 3 {
		d.do("POST", "/login", client("192.0.2.2")...)
	}
	body := d.get("/metrics").body
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
	require.NoError(t, os.WriteFile(path, []byte(rulesV1[:strings.Index(rulesV1, "  - key: remote_address\n    match:")]), 0o644))
	waitFor(t, func(int) bool { return !strings.Contains(d.get("/metrics").body, "@POST/login") })
	assert.Contains(t, d.get("/metrics").body, `ratekit_requests_total{decision="allowed",limit="demo-test/remote_address"} 3`+"\n")
}
