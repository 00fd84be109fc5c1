package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestReports: two reports of a client IP at once, the third refused with
// 429, a slot freed when a report ends, the rate limit first
// (demotest.CheckReports).
func TestReports(t *testing.T) {
	d, g := startGated(t, "-trusted-proxies", "127.0.0.1")
	demotest.CheckReports(t, d, g)
}

// TestReportsInRedis: with -store redis or hybrid the slots are leases in
// Redis, which demo servers on it share: a client with a report at work
// on each of two servers has no third slot on either.
func TestReportsInRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []string{"redis", "hybrid"} {
		t.Run(store, func(t *testing.T) {
			args := []string{"-store", store, "-redis", demotest.RedisURL(srv), "-redis-prefix", "demo-" + store, "-trusted-proxies", "127.0.0.1"}
			a, ga := startGated(t, args...)
			b, gb := startGated(t, args...)
			first, second := a.GoDo("POST", "/reports"), b.GoDo("POST", "/reports")
			ga.Await(t, 1)
			gb.Await(t, 1)
			for _, d := range []*demotest.Demo{a, b} {
				r := d.Do("POST", "/reports")
				assert.Equal(t, "reports-in-flight", demotest.RequireProblem(t, r, http.StatusTooManyRequests).Limit)
			}
			third := b.GoDo("POST", "/reports", demotest.Other...)
			gb.Await(t, 1)
			ga.Release()
			gb.Release()
			for _, ch := range []<-chan demotest.Response{first, second, third} {
				assert.Equal(t, http.StatusOK, demotest.Receive(t, ch).Status)
			}
			assert.Equal(t, http.StatusOK, a.Do("POST", "/reports").Status, "the slot of a report that ended is free on every server")
			a.Client.CloseIdleConnections()
			b.Client.CloseIdleConnections()
		})
	}
}
