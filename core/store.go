package core

import (
	"context"
	"errors"
	"time"
)

// A Store holds the counters of limits. The memory store (NewMemoryStore)
// keeps them in this process; the Redis store shares them between servers.
//
// Bind is called once per limit, when a Limiter is built; the Counter it
// returns takes every decision for that limit. Binding two limits with the
// same ID (name and algorithm) gives counters over the same state, so a
// limit whose count or burst is changed keeps its counts: a client that
// used 3 of 5 has 3 left of 6. A bucket whose period changes keeps its
// level in tokens (capped at the new burst); the window algorithms count
// in windows of the period, so a new period starts their counts afresh.
// The memory store converts a bucket's level when the new limit is bound;
// a store shared by servers, which take up a new configuration at
// different moments, may convert each key at its next decision instead.
type Store interface {
	Bind(l Limit) (Counter, error)
}

// A Counter takes decisions for one limit, per key. Implementations must be
// safe for concurrent use, and each call must be atomic: concurrent calls on
// one key never admit more than the limit allows.
//
// Take decides one request of the given cost (cost 0 reports the state
// without counting) and, when admitted, counts it. Peek answers what Take
// would answer for the same cost, without counting anything.
//
// The error is non-nil only when the store failed (an unreachable server, a
// cancelled context); a rejection is a Decision with Allowed false. A cost
// larger than the limit's capacity is an error (ErrCostExceedsLimit),
// since no wait would ever admit it.
type Counter interface {
	Take(ctx context.Context, key string, cost int) (Decision, error)
	Peek(ctx context.Context, key string, cost int) (Decision, error)
}

// ErrCostExceedsLimit reports a request cost larger than the capacity of a
// limit (its burst, or its count for window algorithms) or a negative cost.
var ErrCostExceedsLimit = errors.New("ratekit: request cost exceeds the limit's capacity")

// A Clock tells the time. Stores take one so that tests can replay exact
// traces; production code uses the system clock.
type Clock interface {
	Now() time.Time
}
