package readme

// snippet: hybrid
import (
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/hybrid"
	"github.com/redis/go-redis/v9"
)

// end snippet

// hybridLimiter builds the limiter of the hybrid example, 6000 requests a
// minute decided locally on leases from the Redis at 10.0.0.5, and passes
// it to use; the store is closed when use returns.
func hybridLimiter(use func(*core.Limiter) error) error {
	// snippet: hybrid
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	store, err := hybrid.New(rdb, time.Second) // sync every second
	if err != nil {
		return err
	}
	defer store.Close() // sends the last counts, gives back unused leases
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(6000)},
		core.WithStore(store))
	if err != nil {
		return err
	}
	// end snippet
	return use(lim)
}
