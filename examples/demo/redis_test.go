package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
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
		r := d.Get("/")
		require.Equal(t, http.StatusOK, r.Status, "request %d", i)
		assert.Equal(t, strconv.Itoa(6-i), r.Header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
	for _, d := range []*demotest.Demo{a, b} {
		r := d.Get("/")
		demotest.RequireProblem(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "60", r.Header.Get("Retry-After"))
	}
	for i := 1; i <= 5; i++ {
		require.Equal(t, http.StatusOK, []*demotest.Demo{a, b}[i%2].Do("POST", "/login").Status, "login %d", i)
	}
	demotest.RequireProblem(t, a.Do("POST", "/login"), http.StatusTooManyRequests)
	demotest.RequireProblem(t, b.Do("POST", "/login"), http.StatusTooManyRequests)

	// Each demo's cleanup counts goroutines against its start; the other
	// demo's keep-alive connections must not count as its leak.
	a.Client.CloseIdleConnections()
	b.Client.CloseIdleConnections()
}

// TestRedisDown: the demo starts and serves while its Redis is down,
// deciding by -fail: open admits, closed answers 503.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop(t)

	open := start(t, "-store", "redis", "-redis", "redis://"+addr+"/0", "-limit", "1")
	for i := 0; i < 3; i++ {
		require.Equal(t, http.StatusOK, open.Get("/").Status)
	}
	closed := start(t, "-store", "redis", "-redis", "redis://"+addr+"/0", "-fail", "closed")
	r := closed.Get("/")
	demotest.RequireProblem(t, r, http.StatusServiceUnavailable)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	// Never limited, whatever the store does.
	assert.Equal(t, http.StatusOK, closed.Get("/healthz").Status)
}

// TestRedisCluster: a comma-separated -redis list is a Redis Cluster.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	d := start(t, "-store", "redis", "-redis", strings.Join(cluster.Addrs(), ","), "-algorithm", "token-bucket", "-limit", "3")
	for i := 1; i <= 3; i++ {
		require.Equal(t, http.StatusOK, d.Get("/").Status, "request %d", i)
	}
	r := d.Get("/")
	demotest.RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, "20", r.Header.Get("Retry-After"))
	d.Client.CloseIdleConnections()
}
