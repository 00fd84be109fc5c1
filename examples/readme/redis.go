package readme

// snippet: redis
import (
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

// end snippet

// sharedLimiter builds the limiter of the Redis example, 100 requests a
// minute shared by every server using the Redis at 10.0.0.5, and passes it
// to use. Building it sends nothing to Redis.
func sharedLimiter(use func(*core.Limiter) error) error {
	// snippet: redis
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapi"))
	if err != nil {
		return err
	}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}, core.WithStore(store))
	if err != nil {
		return err
	}
	// end snippet
	return use(lim)
}
