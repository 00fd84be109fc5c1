package readme

// snippet: overlimit
import (
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/overlimit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

// end snippet

// cachedLimiter builds the limiter of the over-limit cache example: the
// exact Redis store behind a cache of rejections.
func cachedLimiter(use func(*core.Limiter) error) error {
	// snippet: overlimit
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	exact, err := redisstore.New(rdb)
	if err != nil {
		return err
	}
	store, err := overlimit.New(exact) // bounded: overlimit.WithMaxKeys, default 100,000 clients
	if err != nil {
		return err
	}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerSecond(10)}, core.WithStore(store))
	if err != nil {
		return err
	}
	// end snippet
	return use(lim)
}
