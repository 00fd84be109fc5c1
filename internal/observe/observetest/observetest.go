// Package observetest holds the stores and options that the tests of
// ratekit's metrics exporters drive limiters with: a store that always
// fails, one that hides the memory store, and a fail mode.
package observetest

import (
	"context"
	"time"

	"github.com/ratekit/ratekit/core"
)

// FailingStore is a store whose counters fail every call with Err.
type FailingStore struct{ Err error }

// Bind returns a counter that fails every call with s.Err.
func (s FailingStore) Bind([]core.Limit) (core.Counter, error) { return failingCounter(s), nil }

// failingCounter is the core.Counter of a FailingStore.
type failingCounter FailingStore

func (c failingCounter) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, c.Err
}

func (c failingCounter) Peek(context.Context, string, int, []core.Decision) error { return c.Err }

func (c failingCounter) Refund(context.Context, string, int, time.Time, []core.Decision) error {
	return c.Err
}

func (c failingCounter) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, c.Err
}

func (c failingCounter) Reset(context.Context, string) (bool, error) { return false, c.Err }

func (c failingCounter) Grant(context.Context, string, int, time.Duration) error { return c.Err }

// Remote wraps a store so that neither a limiter nor a rules engine can
// tell it is the memory store: a limiter calls it as a store across the
// network, and an engine cannot count its keys.
type Remote struct{ core.Store }

// Bind binds the wrapped store's counter, hidden.
func (r Remote) Bind(ls []core.Limit) (core.Counter, error) {
	c, err := r.Store.Bind(ls)
	return struct{ core.Counter }{c}, err
}

// FailMode is the option of a fail mode: core.WithFailClosed, or none
// (open).
func FailMode(closed bool) core.Option {
	if closed {
		return core.WithFailClosed()
	}
	return func(*core.Limiter) error { return nil }
}
