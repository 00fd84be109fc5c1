package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestCluster runs the store on a real three-node Redis Cluster: the
// conformance traces pass through a ClusterClient (no CROSSSLOT, no
// MOVED left unanswered), clients spread over every node, and two
// independent cluster clients still admit exactly the limit at one key.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)

	t.Run("traces", func(t *testing.T) {
		storetest.RunTraces(t, func(t *testing.T, c core.Clock) core.Store { return newStore(t, rdb, c) })
	})

	t.Run("keys spread over the nodes", func(t *testing.T) {
		ctx := context.Background()
		s := newStore(t, rdb, nil)
		for _, alg := range core.Algorithms() {
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
		clients := []*redis.ClusterClient{cluster.Client(t), cluster.Client(t)}
		for _, alg := range core.Algorithms() {
			l := core.Limit{Name: "hot", Algorithm: alg, Rate: core.PerHour(50)}
			clock := storetest.NewClock(storetest.Epoch.Add(time.Second))
			prefix := newPrefix()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for _, cc := range clients {
				s, err := redisstore.New(cc, redisstore.WithPrefix(prefix), redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
				require.NoError(t, err)
				c := bind(t, s, l)
				for g := 0; g < 32; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < 8; i++ { // 2 x 32 x 8 = 512 requests
							d, err := c.Take(context.Background(), "hot-key", 1)
							if err != nil {
								errs <- err
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, int64(50), admitted.Load(), alg)
		}
	})
}

// TestRing runs the conformance traces through a go-redis Ring of two
// servers: a key and everything its decision touches live on one shard.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	storetest.RunTraces(t, func(t *testing.T, c core.Clock) core.Store { return newStore(t, ring, c) })
	storetest.RunConcurrency(t, func(t *testing.T, c core.Clock) core.Store { return newStore(t, ring, c) }, 64, 4)
}
