// Package breaker is the circuit breaker of the Redis stores. After
// TripAfter failed calls in a row that say Redis is down, slow or
// unreachable (Outage: timeouts, refused or broken connections, LOADING,
// BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN), the circuit opens: the store
// stops waiting for Redis (the exact store fails or falls back at once,
// the hybrid store decides within its servers' shares), and one goroutine
// gets Redis ready again every ProbeEvery, with the store's own function
// (loading its code, which a restarted Redis has lost, and opening
// connections). When that works, the circuit closes. Errors about one key
// or one call (WRONGTYPE, a script error) do not count.
package breaker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// TripAfter is the number of outage errors in a row that open the
	// circuit.
	TripAfter = 3
	// ProbeEvery is the pause between two probes of an open circuit.
	ProbeEvery = 250 * time.Millisecond
)

// A Circuit records the calls of one store. Its methods are safe for
// concurrent use.
type Circuit struct {
	fails   atomic.Int32 // outage failures in a row
	open    atomic.Bool
	ready   func(context.Context) error
	timeout time.Duration
}

// New returns a closed circuit whose probe calls ready, bounded by
// timeout (at least ProbeEvery), until it answers nil.
func New(ready func(context.Context) error, timeout time.Duration) *Circuit {
	return &Circuit{ready: ready, timeout: max(timeout, ProbeEvery)}
}

// IsOpen reports whether the circuit is open: Redis is taken to be away.
func (c *Circuit) IsOpen() bool { return c.open.Load() }

// Answered records a call that Redis answered.
func (c *Circuit) Answered() {
	if c.fails.Load() != 0 {
		c.fails.Store(0)
	}
}

// Failed records a failed call, and reports whether the circuit is open.
func (c *Circuit) Failed(err error) bool {
	if Outage(err) && c.fails.Add(1) >= TripAfter {
		c.Trip()
	}
	return c.open.Load()
}

// Trip opens the circuit, and starts probing unless it was open already.
func (c *Circuit) Trip() {
	if c.open.CompareAndSwap(false, true) {
		go c.probe()
	}
}

// probe runs while the circuit is open: it calls ready every ProbeEvery,
// and closes the circuit when that works. It stops for good when the
// client has been closed.
func (c *Circuit) probe() {
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		err := c.ready(ctx)
		cancel()
		if err == nil {
			c.fails.Store(0)
			c.open.Store(false)
			return
		}
		if errors.Is(err, redis.ErrClosed) {
			return
		}
	}
}

// Outage reports an error that says Redis is down, slow or unreachable,
// rather than that one call went wrong.
func Outage(err error) bool {
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
