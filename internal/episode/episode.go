// Package episode bounds failure logs by time: one line when a run of
// failures (an episode) starts and one, with the count, when it ends,
// however often the failures come and however they alternate with
// successes.
//
// A caller counts every failure with Fail and every success with Recover,
// and writes a line only when told to. An episode that starts within Quiet
// of the last start logged (a dependency failing on some calls and
// answering others) goes on silently, its failures counted into the next
// line; if it is still going on Quiet after that last line, it is logged
// then, so that a failure that persists is never hidden behind a recovery
// line. At most two lines per Quiet therefore, for any pattern of failures.
//
// Fail and Recover are safe for concurrent use and never allocate: the
// caller builds the log line. Recover costs one atomic load when no
// episode is under way, Fail one atomic add and load during a logged
// episode (a silent one takes a lock and reads the clock).
package episode

import (
	"sync"
	"sync/atomic"
	"time"
)

// Quiet is the least time between two lines that say an episode started.
const Quiet = 10 * time.Second

// A Log tracks the episodes of one kind of failure. Its zero value is
// ready to use.
type Log struct {
	// Now, when set, is read instead of the system clock, for tests.
	Now func() time.Time

	loud     atomic.Bool  // an episode is under way and was logged
	failing  atomic.Bool  // an episode is under way
	failures atomic.Int64 // failures not yet reported

	mu   sync.Mutex
	last time.Time // when a start was last logged
}

func (e *Log) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Fail counts a failure and reports whether the caller should log now
// that an episode started; n is the failures counted since the last
// recovery line, including this one.
func (e *Log) Fail() (start bool, n int64) {
	n = e.failures.Add(1)
	if e.loud.Load() {
		return false, n
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.loud.Load() {
		return false, n
	}
	e.failing.Store(true)
	now := e.now()
	if !e.last.IsZero() && now.Sub(e.last) < Quiet {
		return false, n
	}
	e.last = now
	e.loud.Store(true)
	return true, n
}

// Recover ends the episode under way, if any, and reports whether the
// caller should log that it ended, with n failures since the last
// recovery line (those of silent episodes before it included).
func (e *Log) Recover() (end bool, n int64) {
	if !e.failing.Load() {
		return false, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.failing.Load() {
		return false, 0
	}
	e.failing.Store(false)
	if !e.loud.Swap(false) {
		return false, 0 // silent: its failures go into the next line
	}
	return true, e.failures.Swap(0)
}

// Failing reports whether an episode is under way.
func (e *Log) Failing() bool { return e.failing.Load() }
