// Package limits holds what the exact store (redisstore) and the hybrid
// store (redisstore/hybrid) check alike about the limits a limiter binds
// and the requests it decides, and the answer of a limit of 0 requests,
// which neither store asks Redis about.
package limits

import (
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// CheckCount reports a number of limits that one counter cannot bind:
// none, or more than core.MaxLimits.
func CheckCount(n int) error {
	if n == 0 || n > core.MaxLimits {
		return fmt.Errorf("redisstore: %w: %d limits; a counter has 1 to %d", core.ErrInvalidLimit, n, core.MaxLimits)
	}
	return nil
}

// CheckDistinct reports a limit p whose ID (name and algorithm) is that of
// a limit bound before it in the same counter.
func CheckDistinct(bound []core.Params, p *core.Params) error {
	for i := range bound {
		if bound[i].ID == p.ID {
			return fmt.Errorf("redisstore: %w: two limits with the ID %q", core.ErrInvalidLimit, p.ID)
		}
	}
	return nil
}

// MinWindow is the shortest period of a window limit: Redis keys expire
// by the millisecond.
const MinWindow = time.Millisecond

// CheckWindow reports a fixed window or sliding window counter (other than
// a limit of 0 requests) whose period is shorter than MinWindow.
func CheckWindow(p *core.Params) error {
	period := time.Duration(p.Period * int64(p.Unit))
	if !p.Block && (p.Algorithm == core.FixedWindow || p.Algorithm == core.SlidingWindowCounter) && period < MinWindow {
		return fmt.Errorf("redisstore: %w: a window of %s is shorter than the millisecond Redis keys expire by",
			core.ErrInvalidLimit, period)
	}
	return nil
}

// CheckRequest reports a request that a counter of n limits, whose
// smallest capacity is capacity, cannot decide: fewer decisions than
// limits, or a cost that is negative or beyond the capacity
// (core.ErrCostExceedsLimit).
func CheckRequest(ds []core.Decision, n, cost int, capacity int64) error {
	if len(ds) < n {
		return fmt.Errorf("redisstore: %d decisions for %d limits", len(ds), n)
	}
	if cost < 0 || int64(cost) > capacity {
		return fmt.Errorf("%w: cost %d, capacity %d", core.ErrCostExceedsLimit, cost, max(capacity, 0))
	}
	return nil
}

// CheckInspect reports an inspection of a counter of n limits with fewer
// decisions or grants than limits.
func CheckInspect(ds []core.Decision, gs []core.Grant, n int) error {
	if len(ds) < n || len(gs) < n {
		return fmt.Errorf("redisstore: %d decisions and %d grants for %d limits", len(ds), len(gs), n)
	}
	return nil
}

// Block writes the decision of a limit of 0 requests (p.Block): a
// rejection, to retry after one period. Such a limit keeps no state.
func Block(p *core.Params, d *core.Decision) {
	period := time.Duration(p.Period) * p.Unit
	*d = core.Decision{Name: p.Name, Window: p.Window, ResetAfter: period, RetryAfter: period}
}
