package core

import (
	"time"

	"github.com/ratekit/ratekit/internal/unixtime"
)

// This file holds the memory store's time: nanoseconds from an origin of
// its own, read from its Clock or the monotonic clock. The store and its
// counters read it; it calls nothing of the store.

// origin is the store's time at s.base. The store counts time in
// nanoseconds from origin before s.base, not from the Unix epoch, so that
// every time it sees is positive and the all-zero state of a key never
// seen always reads as no history: a clock before 1970, at 1970 or past
// 2262 (beyond int64 nanoseconds since the epoch) decides as any other.
// A clock that moves more than origin (36 years) away from its first
// reading stands still there; the algorithms' arithmetic, which adds at
// most two refill times of 100 years, cannot overflow.
const origin = int64(1) << 60

// now returns the store's time. The system clock is read through the
// monotonic clock, anchored at the store's first use, so a wall-clock step
// does not disturb the counters.
func (s *MemoryStore) now() int64 {
	if s.Clock != nil {
		return s.sinceBase(s.Clock())
	}
	return origin + min(int64(time.Since(s.base)), origin)
}

// elapsed returns the time since the store read its time n from the
// system clock (its Clock is nil), at least 0: n may have been raised to
// a concurrent decision's later reading.
func (s *MemoryStore) elapsed(n int64) time.Duration {
	return max(time.Since(s.base)-time.Duration(n-origin), 0)
}

// sinceBase returns the store's time of t.
func (s *MemoryStore) sinceBase(t time.Time) int64 {
	return origin + min(max(int64(t.Sub(s.base)), 1-origin), origin)
}

// timeOf returns the time.Time of the store's time n.
func (s *MemoryStore) timeOf(n int64) time.Time {
	return s.base.Add(time.Duration(n - origin))
}

// monoBase anchors monotonic.
var monoBase = time.Now()

// monotonic returns the time since monoBase by the monotonic clock: one
// clock reading, where time.Now takes two (the wall clock too). It times
// the decisions of a store whose Clock is injected (and may stand still).
func monotonic() time.Duration { return time.Since(monoBase) }

// shift returns Params.shift for a period, in nanoseconds: the store's
// time plus shift is a multiple of period exactly when the Unix time is.
func (s *MemoryStore) shift(period int64) int64 {
	return ((unixtime.Mod(s.base, period)-origin)%period + period) % period
}
