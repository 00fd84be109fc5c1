package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestOrdersQueued: two orders a second are placed at once, the next is
// queued and placed by the worker (demotest.CheckOrders).
func TestOrdersQueued(t *testing.T) {
	demotest.CheckOrders(t, start(t))
}

// TestOrdersQueuedInRedis: with -store redis the queue is a Redis stream,
// which another demo server's worker may drain as well.
func TestOrdersQueuedInRedis(t *testing.T) {
	srv := redistest.Start(t)
	d := start(t, "-store", "redis", "-redis", demotest.RedisURL(srv), "-redis-prefix", "demo-orders")
	demotest.CheckOrders(t, d)
	n, err := srv.Client(t).Exists(t.Context(), "demo-orders:q:{orders}").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the stream of the queue")
	d.Client.CloseIdleConnections()
}
