package readme

// snippet: rules-redis
import "github.com/ratekit/ratekit/rulesredis" // module github.com/ratekit/ratekit/rulesredis: rules kept in Redis

// end snippet

import (
	"github.com/ratekit/ratekit/rules"
	"github.com/redis/go-redis/v9"
)

// rulesRedisServer runs serve with engine's rules taken from the Redis key
// ratekit:rules:api of rdb, and reloaded whenever a new version is
// published there.
func rulesRedisServer(engine *rules.Engine, rdb redis.UniversalClient, serve func() error) error {
	// snippet: rules-redis
	w, err := rulesredis.Watch(engine, rdb, "ratekit:rules:api") // instead of rulesfile.Watch; fails if the key is missing or invalid
	if err != nil {
		return err
	}
	defer w.Close()
	// end snippet
	return serve()
}
