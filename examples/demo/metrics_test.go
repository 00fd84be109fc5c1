package main

import (
	"net/http"
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
		// The memory store is not timed.
		`ratekit_store_duration_seconds_count{limit="demo",store="memory"} 0`,
	} {
		assert.Contains(t, r.body, line+"\n")
	}
}
