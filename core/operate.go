package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// This file holds the operator's controls of a Limiter: Inspect, Reset
// and Grant, one key at a time.

// A State is what Inspect reports of one key under a limiter.
type State struct {
	// Tracked reports whether the store holds anything for the key: counts
	// or a grant. A key it does not track is at full capacity.
	Tracked bool

	// Decision is what the limiter would decide for a request of cost 1
	// now, by its most restrictive limit; nothing is counted. Shadow mode
	// does not apply: a key over a limit in shadow mode shows as rejected.
	Decision Decision

	// Limits holds each limit's part, in the limiter's order.
	Limits []LimitState
}

// A LimitState is one limit's part of a State.
type LimitState struct {
	// Decision is the limit's answer to a request of cost 1 now: Allowed,
	// Remaining (grant included), ResetAfter, RetryAfter.
	Decision Decision

	// Grant is what is left of the key's grant under the limit, zero when
	// there is none.
	Grant Grant
}

// ActionKind says what an operator did to a key.
type ActionKind string

// The actions of Reset and Grant.
const (
	ActionReset ActionKind = "reset"
	ActionGrant ActionKind = "grant"
)

// An Action is an operator's change to one key's counters, for audit logs
// and metrics (WithActionObserver). Like an Event, it carries no client
// key.
type Action struct {
	Kind   ActionKind
	Limit  string // the name of the limiter's first limit
	Amount int    // a grant's amount
	Found  bool   // a reset found something to reset
	Reason string // the operator's reason, as given
	Err    error  // why the action failed; nil when it took effect
}

// WithActionObserver adds an observer of the operator's actions on the
// limiter's keys (Reset and Grant), called once per action, failed ones
// included. Package prometheus counts them.
func WithActionObserver(observe func(Action)) Option {
	return func(l *Limiter) error {
		if observe == nil {
			return errors.New("ratekit: WithActionObserver(nil)")
		}
		l.watch.actions = append(l.watch.actions, observe)
		return nil
	}
}

// Inspect reports the state of key under every limit of the limiter,
// without counting anything: what a request of cost 1 would get, and each
// limit's grant. It asks the store once (one round trip to Redis).
func (l *Limiter) Inspect(ctx context.Context, key string) (State, error) {
	l, err := l.operand(ctx, key)
	if err != nil {
		return State{}, err
	}
	ds := make([]Decision, len(l.limits))
	gs := make([]Grant, len(l.limits))
	tracked, err := l.counts.counter.Inspect(ctx, key, ds, gs)
	if err != nil {
		return State{}, fmt.Errorf("ratekit: limit %q: inspect: %w", l.limits[0].Name, err)
	}
	st := State{Tracked: tracked, Decision: l.merge(ds), Limits: make([]LimitState, len(ds))}
	for i := range ds { // as merge left them, soft throttling applied
		st.Limits[i] = LimitState{Decision: ds[i], Grant: gs[i]}
	}
	return st, nil
}

// Reset puts key back to full capacity under every limit of the limiter,
// as if it had never been seen, its grants included, atomically with the
// decisions around it; it reports whether there was anything to reset (a
// key the store does not track is not an error). The counters are shared
// with every limiter that binds the same limits (same name, algorithm and
// period) in the same store, on every server of a shared store. reason,
// if given, goes to the log line and the action observers.
func (l *Limiter) Reset(ctx context.Context, key, reason string) (bool, error) {
	l, err := l.operand(ctx, key)
	if err != nil {
		return false, err
	}
	found, err := l.counts.counter.Reset(ctx, key)
	if err != nil {
		err = fmt.Errorf("ratekit: limit %q: reset: %w", l.limits[0].Name, err)
	}
	l.acted(Action{Kind: ActionReset, Limit: l.limits[0].Name, Found: found, Reason: reason, Err: err}, key, 0)
	return found, err
}

// Grant gives key an extra budget of amount requests of cost 1 under
// every limit of the limiter, used before the limits count anything:
// while the grant lasts, a request it covers is admitted and paid from it
// (Decision.Granted), even when the key is over its limits. It expires
// one window after it is given (the longest Decision.Window of the
// limits: the period of a window limit, the refill time of a bucket);
// granting again adds to what is left and starts that time afresh.
//
// amount must be at least 1 and, with what is already granted, at most
// the capacity of every limit (its burst, or its count); a limit of 0
// requests takes no grant. Those errors wrap ErrInvalidGrant. reason, if
// given, goes to the log line and the action observers.
func (l *Limiter) Grant(ctx context.Context, key string, amount int, reason string) error {
	l, err := l.operand(ctx, key)
	if err != nil {
		return err
	}
	ttl := time.Duration(0)
	for i := range l.limits {
		ttl = max(ttl, l.limits[i].Window)
	}
	err = l.counts.counter.Grant(ctx, key, amount, ttl)
	if err != nil {
		err = fmt.Errorf("ratekit: limit %q: grant: %w", l.limits[0].Name, err)
	}
	l.acted(Action{Kind: ActionGrant, Limit: l.limits[0].Name, Amount: amount, Reason: reason, Err: err}, key, ttl)
	return err
}

// operand returns the limiter that holds key's counters: l, or the
// limiter of key's plan.
func (l *Limiter) operand(ctx context.Context, key string) (*Limiter, error) {
	if l.plans != nil {
		return l.forPlan(ctx, key)
	}
	if key == "" {
		return nil, errEmptyKey
	}
	return l, nil
}

// acted logs an action and tells the observers. The log names the key by
// a hash, which a support ticket can quote without the client's data.
func (l *Limiter) acted(a Action, key string, ttl time.Duration) {
	for _, o := range l.watch.actions {
		o(a)
	}
	attrs := []any{"limit", a.Limit, "key_hash", KeyHash(key), "reason", a.Reason}
	switch {
	case a.Err != nil:
		l.watch.log.Warn("ratekit: operator "+string(a.Kind)+" failed", append(attrs, "error", a.Err)...)
	case a.Kind == ActionReset:
		l.watch.log.Info("ratekit: key reset", append(attrs, "found", a.Found)...)
	default:
		l.watch.log.Info("ratekit: key granted extra requests", append(attrs, "amount", a.Amount, "expires_in", ttl)...)
	}
}

// KeyHash returns the short hash by which logs name a client key: the
// first 16 hex digits of its SHA-256. It lets an operator match a log
// line to a key they hold without logs holding client data.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}
