package readme

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// sharedLimiter builds the limiter of the Redis guide's Cluster example,
// 100 requests a minute shared by every server using the Redis Cluster of
// 10.0.0.5 to 10.0.0.7, and passes it to use. The store's start is bounded
// (two seconds): with no Cluster there, the store starts with its circuit
// open and use still gets the limiter.
func sharedLimiter(use func(*core.Limiter) error) error {
	// snippet: redis
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.5:6379", "10.0.0.6:6379", "10.0.0.7:6379"},
		ContextTimeoutEnabled: true,
	})
	store, err := redisstore.New(rdb,
		redisstore.WithPrefix("myapi"),
		redisstore.WithTimeout(50*time.Millisecond), // bound on each decision (default 100 ms)
		redisstore.WithFallback(4),                  // 4 servers: each admits a quarter while Redis is away
	)
	if err != nil {
		return err
	}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)},
		core.WithStore(store), core.WithFailClosed()) // a failed decision no fallback takes: 503
	if err != nil {
		return err
	}
	// end snippet
	return use(lim)
}
