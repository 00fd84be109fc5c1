// Package storetest is the conformance suite of core.Store: exact decision
// traces for each of the five algorithms and properties that every store,
// the memory store and the Redis store alike, must satisfy.
//
// A store's tests call Run with a function that builds a fresh store whose
// time comes from the given clock:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, c *storetest.Clock) core.Store {
//			return &core.MemoryStore{Clock: c.Now}
//		})
//	}
package storetest

import (
	"sync"
	"time"
)

// Clock is a manual clock for tests: it stands still until told to move.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Epoch is the start time of the traces: a Monday at midnight UTC, so that
// it is aligned to every second, minute, hour and day window.
var Epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
