package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// ErrUnavailable is the error of a decision while the store's circuit is
// open (Redis timed out or could not be reached several times in a row)
// and no fallback is configured: the decision failed at once, without
// waiting for Redis. The limiter's fail mode decides the request.
var ErrUnavailable = errors.New("redisstore: Redis unavailable, failing fast until it answers")

// The circuit breaker. After tripAfter failed calls in a row that say
// Redis is down, slow or unreachable (timeouts, refused or broken
// connections, LOADING, BUSY, MASTERDOWN, CLUSTERDOWN), the circuit opens:
// decisions stop waiting for Redis and fail at once (or go to the
// fallback), and one goroutine probes Redis every probeEvery. When a
// probe answers (and has loaded the function library again, which a
// restarted Redis has lost), the circuit closes and decisions go back to
// Redis. Errors about one key or one call (WRONGTYPE, a script error) do
// not count: they are returned as they are.
const (
	tripAfter  = 3
	probeEvery = 250 * time.Millisecond
)

type circuit struct {
	fails atomic.Int32 // outage failures in a row
	open  atomic.Bool
}

func (c *circuit) isOpen() bool { return c.open.Load() }

// answered records a call that Redis answered.
func (c *circuit) answered() {
	if c.fails.Load() != 0 {
		c.fails.Store(0)
	}
}

// failed records a failed call and reports whether the circuit is open.
func (c *circuit) failed(s *Store, err error) bool {
	if outage(err) && c.fails.Add(1) >= tripAfter {
		c.trip(s)
	}
	return c.open.Load()
}

// trip opens the circuit, and starts probing unless it was open already.
func (c *circuit) trip(s *Store) {
	if c.open.CompareAndSwap(false, true) {
		go s.probe()
	}
}

// probe runs while the circuit is open: it gets Redis ready again (the
// function library and connections, as New does) every probeEvery, and
// closes the circuit when that works. It stops for good when the client
// has been closed.
func (s *Store) probe() {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, probeEvery))
		err := s.ready(ctx)
		cancel()
		if err == nil {
			s.circuit.fails.Store(0)
			s.circuit.open.Store(false)
			return
		}
		if errors.Is(err, redis.ErrClosed) {
			return
		}
	}
}

// outage reports an error that says Redis is down, slow or unreachable,
// rather than that one call went wrong.
func outage(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false // the caller gave up
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"} {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return false
	}
	return true
}

// WithFallback makes the store decide on an in-process memory store while
// its circuit is open, instead of failing every decision until Redis
// answers (which the limiter's fail mode turns into admissions, or 503s).
// Each limit's count and burst are divided by instances (rounded up):
// with the number of servers sharing the limit, the fleet as a whole
// admits about the limit while Redis is away, each server up to its
// share. Counts made in the fallback stay there: when Redis answers
// again, decisions go back to the counts in Redis, as they were.
//
// Without this option, the fallback still decides one thing: a request
// whose client has no key yet while Redis is out of memory (see the
// package documentation), with each server admitting up to the full limit.
func WithFallback(instances int) Option {
	return func(s *Store) error {
		if instances < 1 || instances > 100_000 {
			return fmt.Errorf("redisstore: fallback instances %d must be 1 to 100000", instances)
		}
		s.fallback = instances
		return nil
	}
}

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
