package redisstore_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestElastic runs the elastic throttling traces and concurrency checks
// (core.WithElastic), the ones the memory store passes, against a real
// redis-server: the limits as configured and the raised limits bound
// beside them share their Redis keys, under every algorithm.
func TestElastic(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	storetest.RunElastic(t, func(t *testing.T, c *storetest.Clock) core.Store {
		return newStore(t, rdb, c)
	})
}
