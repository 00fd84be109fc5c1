package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// This file holds what the store does while its circuit is open (Redis
// timed out or could not be reached several times in a row; see
// internal/breaker): fail at once, or decide in process (WithFallback).

// ErrUnavailable is the error of a decision while the store's circuit is
// open (Redis timed out or could not be reached several times in a row)
// and no fallback is configured: the decision failed at once, without
// waiting for Redis. The limiter's fail mode decides the request. One
// goroutine probes Redis four times a second meanwhile (loading the
// library again if a restart lost it); the first probe Redis answers
// closes the circuit.
var ErrUnavailable = errors.New("redisstore: Redis unavailable, failing fast until it answers")

// fallback returns the counter of c's limits in the store's memory store,
// shared by the fallback's instances; it is bound on first use.
func (c *counter) fallback() (core.Counter, error) {
	c.localOnce.Do(func() {
		limits := c.limits
		if n := c.store.fallback; n > 1 {
			limits = make([]core.Limit, len(c.limits))
			for i, l := range c.limits {
				if l.Rate.Count > 0 {
					l.Rate.Count = (l.Rate.Count + n - 1) / n
				}
				if l.Burst > 0 {
					l.Burst = (l.Burst + n - 1) / n
				}
				limits[i] = l
			}
		}
		c.localCounter, c.localErr = c.store.local.Bind(limits)
	})
	if c.localErr != nil {
		return nil, fmt.Errorf("redisstore: fallback: %w", c.localErr)
	}
	return c.localCounter, nil
}

// local decides in the fallback: a take (mode argOne) counts there, any
// other mode only decides.
func (c *counter) local(ctx context.Context, key string, cost int, mode any, ds []core.Decision) (time.Time, error) {
	l, err := c.fallback()
	if err != nil {
		return time.Time{}, err
	}
	if mode == argOne {
		return l.Take(ctx, key, cost, ds)
	}
	return time.Time{}, l.Peek(ctx, key, cost, ds)
}

// unavailable decides while the circuit is open: in the fallback, or not
// at all.
func (c *counter) unavailable(ctx context.Context, key string, cost int, mode any, ds []core.Decision) (time.Time, error) {
	if c.store.fallback > 0 {
		return c.local(ctx, key, cost, mode, ds)
	}
	return time.Time{}, ErrUnavailable
}
