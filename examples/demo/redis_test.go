package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestRedisSharedByTwoServers runs two demo servers on one private Redis:
// they share the limit of GET / and the login limit, as two instances of
// an API behind a load balancer would.
func TestRedisSharedByTwoServers(t *testing.T) {
	srv := redistest.Start(t)
	args := []string{"-store", "redis", "-redis", "redis://" + srv.Addr() + "/0", "-redis-prefix", "demo-test",
		"-algorithm", "fixed-window", "-limit", "6"}
	a, b := start(t, args...), start(t, args...)
	for i := 1; i <= 6; i++ {
		d := a
		if i%2 == 0 {
			d = b
		}
		r := d.get("/")
		require.Equal(t, http.StatusOK, r.status, "request %d", i)
		assert.Equal(t, strconv.Itoa(6-i), r.header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
	for _, d := range []*demo{a, b} {
		r := d.get("/")
		requireProblem(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "60", r.header.Get("Retry-After"))
	}
	for i := 1; i <= 5; i++ {
		require.Equal(t, http.StatusOK, []*demo{a, b}[i%2].do("POST", "/login").status, "login %d", i)
	}
	requireProblem(t, a.do("POST", "/login"), http.StatusTooManyRequests)
	requireProblem(t, b.do("POST", "/login"), http.StatusTooManyRequests)

	// Each demo's cleanup counts goroutines against its start; the other
	// demo's keep-alive connections must not count as its leak.
	a.client.CloseIdleConnections()
	b.client.CloseIdleConnections()
}

// TestRedisDown: the demo starts and serves while its Redis is down,
// deciding by -fail: open admits, closed answers 503.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop(t)

	open := start(t, "-store", "redis", "-redis", "redis://"+addr+"/0", "-limit", "1")
	for i := 0; i < 3; i++ {
		require.Equal(t, http.StatusOK, open.get("/").status)
	}
	closed := start(t, "-store", "redis", "-redis", "redis://"+addr+"/0", "-fail", "closed")
	r := closed.get("/")
	requireProblem(t, r, http.StatusServiceUnavailable)
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	// Never limited, whatever the store does.
	assert.Equal(t, http.StatusOK, closed.get("/healthz").status)
}

// TestRedisCluster: a comma-separated -redis list is a Redis Cluster.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	d := start(t, "-store", "redis", "-redis", strings.Join(cluster.Addrs(), ","), "-algorithm", "token-bucket", "-limit", "3")
	for i := 1; i <= 3; i++ {
		require.Equal(t, http.StatusOK, d.get("/").status, "request %d", i)
	}
	r := d.get("/")
	requireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "20", r.header.Get("Retry-After"))
	d.client.CloseIdleConnections()
}

// TestRedisMetrics: with -store redis, the store latency of every decision
// is in the histogram, labelled store="redis".
func TestRedisMetrics(t *testing.T) {
	srv := redistest.Start(t)
	d := start(t, "-metrics", "-store", "redis", "-redis", "redis://"+srv.Addr()+"/0", "-algorithm", "fixed-window", "-limit", "10")
	for i := 0; i < 12; i++ {
		d.get("/")
	}
	r := d.get("/metrics")
	require.Equal(t, http.StatusOK, r.status)
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo"} 10`,
		`ratekit_requests_total{decision="denied",limit="demo"} 2`,
		`ratekit_store_duration_seconds_count{limit="demo",store="redis"} 12`,
		`ratekit_store_errors_total{store="redis"} 0`,
	} {
		assert.Contains(t, r.body, line+"\n")
	}
	assert.NotContains(t, r.body, "ratekit_tracked_keys", "Redis keys are not counted")
	d.client.CloseIdleConnections()
}
