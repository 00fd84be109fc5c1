package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxLimits is the most limits one Limiter (one Store.Bind) may have.
const MaxLimits = 16

// A Store keeps the counters of limits: MemoryStore in this process, the
// Redis store (package redisstore) shared between servers.
//
// Bind is called when a Limiter is built, with all of its limits, which
// the store turns into numbers with Limit.Params in the time unit it
// works in; the Counter it returns decides every request of the limiter,
// for any key. Limits with the same name, algorithm and period share
// counters, even bound at the same time with different counts (two
// servers mid-deploy, or the plans of NewPlanLimiter): a window keeps its
// counts (a client that used 3 of 5 has 3 left of 6), a bucket the time
// it needs to refill, capped at the burst of the limit deciding (3 of 5
// used is 3/5 of the bucket: 2 left of 6). A limit whose period changes
// starts counting afresh. (The memory store keeps a limiter's limits
// together, so it shares counters between bindings of the same set of
// limits; see MemoryStore.)
type Store interface {
	Bind(limits []Limit) (Counter, error)
}

// A Counter decides requests for one set of limits, per key, and lets an
// operator act on one key. It is safe for concurrent use.
//
// Take decides a request of the given cost by every limit at once and
// writes limit i's decision to ds[i]. All or nothing, atomically: when
// every limit admits the request, every limit counts it; otherwise none
// does, and concurrent calls on one key never admit more than a limit
// allows. Cost 0 reports the state without counting. Take returns the
// store's time of the decision, which Refund needs.
//
// A key may hold a grant under a limit (see Grant): a request whose cost
// the grant covers is paid from it, not counted by the limit, and its
// decision by that limit has Granted set; Remaining counts the grant too.
//
// Peek answers what Take would, without counting anything.
//
// Refund gives back a request of the given cost that Take admitted at
// time at with the decisions ds, as far as the algorithm can: a bucket
// gets its tokens back, a window its count if the window has not passed,
// a log loses the request's entries, and a limit whose decision was
// Granted gets the cost back in its grant, if it has not expired. TakeAll
// uses it when a limit on another key rejects a request that this counter
// admitted.
//
// Inspect writes to ds what Peek of a request of cost 1 would, and to gs
// each limit's grant; it reports whether the store holds any state for
// the key.
//
// Reset puts the key back to full capacity under every limit, as if it
// had never been seen, grants included, and reports whether there was
// anything to reset.
//
// Grant adds amount to the key's grant under every limit, for ttl: until
// then, requests are paid from the grant before the limit counts them.
// Granting again adds to what is left and starts the ttl afresh. A grant
// that would leave more than a limit's capacity granted is an error
// wrapping ErrInvalidGrant, as is an amount below 1 and a limit that
// blocks every request.
//
// An error is non-nil only when the store failed (an unreachable server,
// a cancelled context) or an argument is impossible; a rejection is a
// Decision with Allowed false.
type Counter interface {
	Take(ctx context.Context, key string, cost int, ds []Decision) (at time.Time, err error)
	Peek(ctx context.Context, key string, cost int, ds []Decision) error
	Refund(ctx context.Context, key string, cost int, at time.Time, ds []Decision) error
	Inspect(ctx context.Context, key string, ds []Decision, gs []Grant) (tracked bool, err error)
	Reset(ctx context.Context, key string) (found bool, err error)
	Grant(ctx context.Context, key string, amount int, ttl time.Duration) error
}

// A Grant is extra budget an operator gave one key under one limit
// (Limiter.Grant): Amount requests of cost 1, used before the limit counts
// any, for ExpiresIn more.
type Grant struct {
	Amount    int
	ExpiresIn time.Duration
}

// ErrInvalidGrant is wrapped by the errors of a grant that cannot be
// given: an amount below 1, more than a limit's capacity outstanding, or a
// limit that blocks every request.
var ErrInvalidGrant = errors.New("ratekit: invalid grant")

// ErrCostExceedsLimit reports a request cost larger than the capacity of a
// limit (its burst, or its count for window algorithms) or a negative cost:
// no wait would ever admit it. It is a programming error, not a denial.
var ErrCostExceedsLimit = errors.New("ratekit: request cost exceeds the limit's capacity")

// ErrMissingKey is wrapped by the errors that mean a request has no key to
// be limited by: an empty key, or a key function that found no value to
// make one of (no API-key header, no user in the context). Middleware
// answers them with 400 Bad Request.
var ErrMissingKey = errors.New("ratekit: request has no rate-limit key")

// CheckGrant returns the error a store returns for a grant of amount for
// ttl under limits ps (the bound limits' Params): nil when the grant may
// be given. Every store calls it first in Counter.Grant.
func CheckGrant(ps []Params, amount int, ttl time.Duration) error {
	if amount < 1 {
		return fmt.Errorf("%w: amount %d must be at least 1", ErrInvalidGrant, amount)
	}
	if ttl <= 0 || ttl > 2*MaxPeriod {
		return fmt.Errorf("%w: duration %s must be positive and at most %s", ErrInvalidGrant, ttl, 2*MaxPeriod)
	}
	for i := range ps {
		if ps[i].Block {
			return fmt.Errorf("%w: limit %q blocks every request; a grant cannot open it", ErrInvalidGrant, ps[i].Name)
		}
		if int64(amount) > ps[i].Capacity {
			return fmt.Errorf("%w: amount %d exceeds the capacity %d of limit %q", ErrInvalidGrant, amount, ps[i].Capacity, ps[i].Name)
		}
	}
	return nil
}
