package redisstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestCluster runs the store on a real three-node Redis Cluster: the
// conformance traces, and the decisions and refunds over several limits
// at once, pass through a ClusterClient (no CROSSSLOT, no MOVED left
// unanswered), clients spread over every node, and two independent
// cluster clients still admit exactly the limit at one key.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)

	newClusterStore := func(t *testing.T, c *storetest.Clock) core.Store { return newStore(t, rdb, c) }
	t.Run("traces", func(t *testing.T) { storetest.RunTraces(t, newClusterStore) })
	// Several limits in one script: their keys share one slot.
	t.Run("all-or-nothing", func(t *testing.T) { storetest.RunAllOrNothing(t, newClusterStore) })
	t.Run("refund", func(t *testing.T) { storetest.RunRefund(t, newClusterStore) })
	t.Run("block", func(t *testing.T) { storetest.RunBlock(t, newClusterStore) })
	t.Run("operate", func(t *testing.T) { storetest.RunOperate(t, newClusterStore) })
	t.Run("operate-concurrency", func(t *testing.T) { storetest.RunOperateConcurrency(t, newClusterStore) })

	t.Run("keys spread over the nodes", func(t *testing.T) {
		ctx := context.Background()
		s := newStore(t, rdb, nil)
		for _, alg := range algorithms {
			c := bind(t, s, core.Limit{Name: "spread", Algorithm: alg, Rate: core.PerMinute(10)})
			for i := 0; i < 100; i++ {
				_, err := c.Take(ctx, "client-"+strconv.Itoa(i), 1)
				require.NoError(t, err)
			}
		}
		for i, node := range cluster.Nodes {
			n, err := node.Client(t).DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Positive(t, n, "node %d holds no key", i)
		}
	})

	t.Run("exact under contention", func(t *testing.T) {
		clients := []redis.UniversalClient{cluster.Client(t), cluster.Client(t)}
		for _, alg := range algorithms {
			l := core.Limit{Name: "hot", Algorithm: alg, Rate: core.PerHour(50)}
			// 2 clients x 32 goroutines x 8 = 512 requests.
			assert.Equal(t, 50, storetest.TakeConcurrently(t, counters(t, clients, l), 64, 8), alg)
		}
	})
}

// TestRing runs the conformance traces through a go-redis Ring of two
// servers: a client's keys, everything its decision touches, live on one
// shard.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	storetest.RunTraces(t, func(t *testing.T, c *storetest.Clock) core.Store { return newStore(t, ring, c) })
	storetest.RunConcurrency(t, func(t *testing.T, c *storetest.Clock) core.Store { return newStore(t, ring, c) }, 64, 4)
	storetest.RunAllOrNothing(t, func(t *testing.T, c *storetest.Clock) core.Store { return newStore(t, ring, c) })
}
