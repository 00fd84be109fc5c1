package core

import (
	"context"
	"errors"
	"time"
)

// A Store keeps the counters of limits: MemoryStore in this process, the
// Redis store (package redisstore) shared between servers.
//
// Bind is called when a Limiter is built, with all of its limits, which
// the store turns into numbers with Limit.Params in the time unit it
// works in; the Counter it returns decides every request of the limiter,
// for any key. Limits with the same ID (name and algorithm, Params.ID)
// share counters:
// a limit whose count or burst changes keeps its counts (a client that
// used 3 of 5 has 3 left of 6); a bucket whose period changes keeps its
// level in tokens, capped at the new burst; a window limit whose period
// changes starts counting afresh. (The memory store keeps a limiter's
// limits together, so it shares counters between bindings of the same
// set of limits; see MemoryStore.)
type Store interface {
	Bind(limits []Limit) (Counter, error)
}

// A Counter decides requests for one set of limits, per key. It is safe
// for concurrent use.
//
// Take decides a request of the given cost by every limit at once and
// writes limit i's decision to ds[i]. All or nothing, atomically: when
// every limit admits the request, every limit counts it; otherwise none
// does, and concurrent calls on one key never admit more than a limit
// allows. Cost 0 reports the state without counting. Take returns the
// store's time of the decision, which Refund needs.
//
// Peek answers what Take would, without counting anything.
//
// Refund gives back a request of the given cost that Take admitted at
// time at, as far as the algorithm can: a bucket gets its tokens back, a
// window its count if the window has not passed, a log loses the
// request's entries. TakeAll uses it when a limit on another key rejects
// a request that this counter admitted.
//
// The error is non-nil only when the store failed (an unreachable server,
// a cancelled context); a rejection is a Decision with Allowed false.
type Counter interface {
	Take(ctx context.Context, key string, cost int, ds []Decision) (at time.Time, err error)
	Peek(ctx context.Context, key string, cost int, ds []Decision) error
	Refund(ctx context.Context, key string, cost int, at time.Time) error
}

// ErrCostExceedsLimit reports a request cost larger than the capacity of a
// limit (its burst, or its count for window algorithms) or a negative cost:
// no wait would ever admit it. It is a programming error, not a denial.
var ErrCostExceedsLimit = errors.New("ratekit: request cost exceeds the limit's capacity")

// ErrMissingKey is wrapped by the errors that mean a request has no key to
// be limited by: an empty key, or a key function that found no value to
// make one of (no API-key header, no user in the context). Middleware
// answers them with 400 Bad Request.
var ErrMissingKey = errors.New("ratekit: request has no rate-limit key")
