package storetest

import (
	"context"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Slow returns s behind latency on every call of its counters, as a store
// across a network is: a limiter cannot tell it from a remote store, and
// the time in between lets concurrent requests interleave with every step
// of a decision. The store itself stays real.
func Slow(s core.Store, latency time.Duration) core.Store { return slow{s, latency} }

type slow struct {
	s       core.Store
	latency time.Duration
}

func (s slow) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.s.Bind(limits)
	if err != nil {
		return nil, err
	}
	return slowCounter{c, s.latency}, nil
}

type slowCounter struct {
	c       core.Counter
	latency time.Duration
}

func (c slowCounter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	time.Sleep(c.latency)
	return c.c.Take(ctx, key, cost, ds)
}

func (c slowCounter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	time.Sleep(c.latency)
	return c.c.Peek(ctx, key, cost, ds)
}

func (c slowCounter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	time.Sleep(c.latency)
	return c.c.Refund(ctx, key, cost, at, ds)
}

func (c slowCounter) Inspect(ctx context.Context, key string, ds []core.Decision, gs []core.Grant) (bool, error) {
	time.Sleep(c.latency)
	return c.c.Inspect(ctx, key, ds, gs)
}

func (c slowCounter) Reset(ctx context.Context, key string) (bool, error) {
	time.Sleep(c.latency)
	return c.c.Reset(ctx, key)
}

func (c slowCounter) Grant(ctx context.Context, key string, amount int, ttl time.Duration) error {
	time.Sleep(c.latency)
	return c.c.Grant(ctx, key, amount, ttl)
}
