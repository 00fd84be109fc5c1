package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// plans are the part of a limiter of NewPlanLimiter that chooses the
// limiter of a request: the plan function, the options each plan's
// limiter is built with, and the limiters of the plans met so far.
type plans struct {
	choose func(ctx context.Context, key string) (Limit, error)
	opts   []Option
	bound  atomic.Pointer[map[Limit]*Limiter]
	mu     sync.Mutex // held to add to bound
}

// MaxPlans is how many distinct limits a limiter of NewPlanLimiter keeps
// bound at once. A plan function that returns more distinct limits than
// that still works: past MaxPlans, the limiter forgets the limits it has
// bound and binds each again when it is next returned, which costs an
// allocation and a store binding but no counts, since counters live in the
// store under the limit's name, algorithm and period.
const MaxPlans = 256

// ErrPlan is wrapped by the errors of a plan function (NewPlanLimiter) and
// of the limits it returns: middleware answers them with 500 Internal
// Server Error (400 when the error also wraps ErrMissingKey), never as a
// store failure, so a broken plan lookup neither admits nor rejects.
var ErrPlan = errors.New("ratekit: no usable plan for the request")

// NewPlanLimiter returns a limiter whose limit is chosen for each request
// by plan, from the request's key and context: the plan a customer is on,
// looked up from the authenticated user. Middleware takes it as it takes
// any limiter:
//
//	free := core.Limit{Name: "api", Rate: core.PerMinute(100)}
//	paid := core.Limit{Name: "api", Rate: core.PerMinute(1000)}
//	lim, err := core.NewPlanLimiter(func(ctx context.Context, user string) (core.Limit, error) {
//		if accounts.IsPaid(ctx, user) {
//			return paid, nil
//		}
//		return free, nil
//	})
//
// Every limit plan returns is validated and bound once, with opts, and
// kept (up to MaxPlans distinct limits); the options apply to every plan
// (WithLimit adds a limit that every plan's requests must also pass).
// Decisions carry the plan's limit, so the response's rate-limit headers
// describe the plan the client is on.
//
// A client that changes plans keeps its counts when the plans share a
// limit name, algorithm and period and differ in count or burst, as in the
// example: a window keeps the requests counted (80 used of 100 is 80 used
// of 1000 after an upgrade), a bucket the time it needs to refill (80 used
// of 100 per minute is 48 seconds of refill: 800 used of 1000). Plans with
// different names count separately; the header fields then also name the
// plan.
//
// An error of plan, or a limit it returns that is invalid, fails the
// request with an error wrapping ErrPlan (500 in middleware, logged once
// per episode); the request is not counted. plan runs on every request,
// so it must be fast (an in-memory lookup) and safe for concurrent use.
// The operator's controls (Inspect, Reset, Grant) call it too, with the
// operator's context.
func NewPlanLimiter(plan func(ctx context.Context, key string) (Limit, error), opts ...Option) (*Limiter, error) {
	if plan == nil {
		return nil, errors.New("ratekit: NewPlanLimiter(nil)")
	}
	l := newLimiter()
	l.plans = &plans{choose: plan}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.counts.store == nil {
		l.counts.store = &MemoryStore{}
	}
	// Every plan's limiter shares the store, and its limiter options.
	l.plans.opts = append(append([]Option(nil), opts...), WithStore(l.counts.store))
	l.plans.bound.Store(&map[Limit]*Limiter{})
	return l, nil
}

// forPlan returns the limiter of the plan of key.
func (l *Limiter) forPlan(ctx context.Context, key string) (*Limiter, error) {
	if key == "" {
		return nil, errEmptyKey
	}
	ps := l.plans
	lim, err := ps.choose(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	if sub := (*ps.bound.Load())[lim]; sub != nil {
		return sub, nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	old := *ps.bound.Load()
	if sub := old[lim]; sub != nil {
		return sub, nil
	}
	sub, err := NewLimiter(lim, ps.opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	plans := make(map[Limit]*Limiter, len(old)+1)
	if len(old) < MaxPlans {
		for k, v := range old {
			plans[k] = v
		}
	}
	plans[lim] = sub
	ps.bound.Store(&plans)
	return sub, nil
}
