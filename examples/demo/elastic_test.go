package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/redisstore/redistest"
)

// elasticArgs: 2 a minute, up to 100% more while fewer than 2 requests are
// in flight (the one decided included): while a report is at work, there
// is no room.
var elasticArgs = []string{"-elastic", "100", "-elastic-in-flight", "2", "-algorithm", "fixed-window", "-limit", "2", "-metrics"}

// checkElastic: GET / admits twice its limit while the server has room,
// the headers reporting the limit itself and Remaining 0 beyond it; with a
// request in flight elsewhere (a report at work) it is exact; the metrics
// count the elastic admissions apart.
func checkElastic(t *testing.T, d *demo, g *gate) {
	t.Helper()
	for i := 1; i <= 4; i++ {
		r := d.get("/")
		require.Equal(t, http.StatusOK, r.status, "request %d", i)
		assert.Equal(t, "2", r.header.Get("X-RateLimit-Limit"), "the limit itself, never the ceiling")
		assert.Equal(t, strconv.Itoa(max(2-i, 0)), r.header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
	r := d.get("/")
	assert.Equal(t, "demo", requireProblem(t, r, http.StatusTooManyRequests).Limit, "over the ceiling")
	assert.Equal(t, "60", r.header.Get("Retry-After"))

	d.clock.Advance(time.Minute) // a new window
	for range 2 {
		require.Equal(t, http.StatusOK, d.get("/").status)
	}
	report := d.goDo("POST", "/reports")
	g.await(t, 1)
	requireProblem(t, d.get("/"), http.StatusTooManyRequests) // busy: exact at the limit
	g.release()
	require.Equal(t, http.StatusOK, receive(t, report).status)
	r = d.get("/")
	require.Equal(t, http.StatusOK, r.status, "room again")
	assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))

	body := d.get("/metrics").body
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo"} 4`,
		`ratekit_requests_total{decision="elastic_allowed",limit="demo"} 3`,
		`ratekit_requests_total{decision="denied",limit="demo"} 2`,
	} {
		assert.Contains(t, body, line+"\n")
	}
}

// TestElastic runs -elastic on every framework, each counting the
// requests in flight with its own middleware.
func TestElastic(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			d, g := startGated(t, append([]string{"-framework", fw}, elasticArgs...)...)
			checkElastic(t, d, g)
		})
	}
}

// TestElasticInRedis: -elastic with -store redis, whose counters the limit
// and its ceiling share as the memory store's do.
func TestElasticInRedis(t *testing.T) {
	srv := redistest.Start(t)
	d, g := startGated(t, append([]string{"-store", "redis", "-redis", redisURL(srv)}, elasticArgs...)...)
	checkElastic(t, d, g)
	d.client.CloseIdleConnections()
}
