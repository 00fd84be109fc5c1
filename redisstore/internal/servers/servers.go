// Package servers reaches the Redis servers behind a go-redis client, for
// the exact store (redisstore) and the hybrid store (redisstore/hybrid):
// every master of a cluster or shard of a ring (EachMaster, to load code
// on each), and calls bounded by a deadline whether or not the client
// applies deadlines itself (AppliesDeadlines, ByDeadline).
package servers

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// EachMaster runs fn on every master of a cluster, every shard of a ring,
// or the one server of a client (a Sentinel failover client is a
// *redis.Client).
func EachMaster(ctx context.Context, client redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("redisstore: a %T is not supported", client)
}

// AppliesDeadlines reports whether client applies context deadlines to
// its reads and writes (go-redis's ContextTimeoutEnabled): then a call
// returns at its deadline by itself.
func AppliesDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ReadTimeout returns client's read timeout as its options hold it once
// the client is made (positive: a bound; 0 or negative: none), or 0 for a
// client of another kind.
func ReadTimeout(client redis.UniversalClient) time.Duration {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout
	case *redis.ClusterClient:
		return c.Options().ReadTimeout
	case *redis.Ring:
		return c.Options().ReadTimeout
	}
	return 0
}

// ByDeadline runs fn by ctx's deadline. With a client that applies
// deadlines (applies), fn returns by then itself; otherwise fn goes on in
// a goroutine of its own when the deadline passes, and ByDeadline returns
// ctx's error.
func ByDeadline(ctx context.Context, applies bool, fn func(context.Context) error) error {
	if applies {
		return fn(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
