package main

import (
	"testing"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestElastic: GET / admits twice its limit while the server has room,
// and is exact while a report is at work (demotest.CheckElastic; the
// metrics of the elastic admissions are checked in examples/demo/metrics).
func TestElastic(t *testing.T) {
	d, g := startGated(t, demotest.ElasticArgs...)
	demotest.CheckElastic(t, d, g, false)
}

// TestElasticInRedis: -elastic with -store redis, whose counters the limit
// and its ceiling share as the memory store's do.
func TestElasticInRedis(t *testing.T) {
	srv := redistest.Start(t)
	d, g := startGated(t, append([]string{"-store", "redis", "-redis", demotest.RedisURL(srv)}, demotest.ElasticArgs...)...)
	demotest.CheckElastic(t, d, g, false)
	d.Client.CloseIdleConnections()
}
