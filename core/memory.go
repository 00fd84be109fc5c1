package core

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The memory store is one component, in the files memory*.go, and a
// decision walks down it once, never back up. Each file calls only into
// the files listed below it:
//
//	memory.go          MemoryStore: its configuration and its tables (Bind,
//	                   release, sweep), TrackedKeys
//	memory_counter.go  memCounter: the entry of the limiter's lanes (decide,
//	                   decideOne, refund) and the Counter methods over it
//	memory_table.go    the table of a set of limits and its shards: lookup,
//	                   insertion, eviction (rebuild); the count-min sketch
//	                   of the keys a full shard has no room for; where each
//	                   limit's state lies in a slot and in a cell; the rings
//	                   that hold the sliding window logs
//	memory_grants.go   the grants of a shard, and a decision that they pay
//	algo.go            the arithmetic of the five algorithms on one key's
//	                   state under one limit (DecideWindow's too)
//	memory_clock.go    the store's time
//
// The Limiter calls memCounter.decide for every decision in a memory
// store (Take's lane for one limit calls decideOne, the form decide takes
// for one limit, which writes the decision in place), and memCounter.refund
// to give one back (TakeAll). decide reads the store's time, has the table
// find the key's slot and lock its shard, runs the algorithms (through the
// grants when the shard holds any) and returns the time of the decision,
// having measured its latency if asked.

// DefaultMaxKeys is the key cap of a MemoryStore whose MaxKeys is zero.
const DefaultMaxKeys = 1 << 20

// MemoryStore keeps counters in this process. It is the default store of
// a Limiter; its zero value is ready to use, and its fields, set before
// the first Bind, configure it:
//
//	store := &core.MemoryStore{MaxKeys: 100_000}
//
// A limiter's limits are kept together: each set of limits bound at once
// has its own table, split into shards with a lock each, whose slots hold
// a key's state under every limit of the set, so that one lock covers a
// whole decision. A key is stored as a 64-bit hash of its text (seeded per
// table, so clients cannot aim for collisions), never as the text itself,
// so a long key costs no more than a short one: a token bucket costs 16
// bytes of slot per key, a window algorithm 24. A decision on a key
// already tracked allocates nothing. Binding the same set of limits again
// (same names, algorithms and periods), from another limiter, after a
// configuration change or for another plan (NewPlanLimiter), shares its
// counters, whatever the counts; a limiter whose set of limits changes
// starts counting afresh.
//
// Grants (Limiter.Grant) are kept beside the slots, at most
// MaxGrantsPerShard outstanding per shard of a set of limits; a shard
// with none costs its decisions nothing.
//
// A table lives while a counter bound to it is reachable (a Limiter that
// uses it); once none is, it is dropped as soon as none of its keys is
// still counting, so limits reloaded without end do not accumulate, and
// dropping a table changes no decision. A set of limits that only blocks
// (every limit of count 0) keeps no state and costs no table.
//
// Memory is bounded. When a shard must grow, keys whose state is back to
// full capacity are dropped first: forgetting them changes no decision.
// Keys still counting are never evicted, because forgetting a client that
// is over its limit would hand it a fresh budget. When a shard holds its
// share of the key cap and every key in it is still counting, new keys in
// that shard are counted in a count-min sketch of fixed size until room
// frees up (see the sketch in memory_table.go): a collision there only makes limiting
// stricter, so a flood of new keys gains nothing, cannot displace the keys
// being limited, and disturbs a newcomer only by the flood spread over the
// sketch's cells. A key counted in the sketch is not tracked: Inspect
// reports it so (with the decision it would get), and Reset finds nothing
// of its own to clear, since its cells are shared with other keys.
//
// Times count from an origin of the store's own, not from the Unix epoch,
// so that the state of a key never seen means no history whatever the
// clock says (before 1970, or past 2262); windows still start at whole
// periods of Unix time.
type MemoryStore struct {
	// MaxKeys caps the keys each set of limits tracks (default
	// DefaultMaxKeys). It is enforced per shard, each holding at most
	// ceil(MaxKeys/Shards) keys.
	MaxKeys int

	// Shards is the number of lock shards per set of limits, rounded up
	// to a power of two, at most 65536 (default 64).
	Shards int

	// Clock, when set, is read for the time instead of the system clock:
	// for tests that replay exact traces.
	Clock func() time.Time

	once sync.Once
	err  error
	base time.Time // the time of the origin: the clock's reading at the first Bind

	mu      sync.Mutex
	tables  map[string]*table // by the IDs of their limits and the layout of their states
	block   *table            // shared by the sets of limits that keep no state
	sweepAt int64             // when the orphaned tables are next checked; 0: there are none
}

func (s *MemoryStore) init() {
	switch {
	case s.MaxKeys < 0:
		s.err = fmt.Errorf("ratekit: memory store: MaxKeys %d must not be negative", s.MaxKeys)
	case s.Shards < 0 || s.Shards > 1<<16:
		s.err = fmt.Errorf("ratekit: memory store: Shards %d must be between 0 (default) and 65536", s.Shards)
	}
	if s.MaxKeys == 0 {
		s.MaxKeys = DefaultMaxKeys
	}
	n := 1
	for n < max(s.Shards, 1) || (s.Shards == 0 && n < 64) {
		n <<= 1
	}
	s.Shards = n
	s.base = time.Now()
	if s.Clock != nil {
		s.base = s.Clock()
	}
	s.tables = map[string]*table{}
}

// Bind returns the counter of a set of limits, sharing state with every
// earlier binding of a set with the same IDs in the same order (a limit
// that changes to or from a count of 0, which keeps no state, starts its
// set afresh).
func (s *MemoryStore) Bind(limits []Limit) (Counter, error) {
	c, err := s.bind(limits)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (s *MemoryStore) bind(limits []Limit) (*memCounter, error) {
	s.once.Do(s.init)
	if s.err != nil {
		return nil, s.err
	}
	if len(limits) == 0 || len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: %d limits; a limiter has 1 to %d", ErrInvalidLimit, len(limits), MaxLimits)
	}
	ps := make([]Params, len(limits))
	ids := make([]string, len(limits))
	keys := make([]string, len(limits))
	for i, l := range limits {
		p, err := l.Params(time.Nanosecond)
		if err != nil {
			return nil, err
		}
		p.shift = s.shift(p.Period)
		ps[i], ids[i] = p, p.ID
		keys[i] = p.ID + "/" + strconv.FormatInt(p.Period, 10)
	}
	lo := newLayout(ps)
	// A table is keyed by its limits' IDs and periods and the layout of
	// their states in its slots: the same limit, blocking in one binding
	// (no state) and counting in another, cannot share a table. Counts do
	// not enter the key: bindings of the same limits with other counts
	// share the states, which each decision reads with its own limits.
	layout := make([]byte, len(ps))
	for i := range ps {
		layout[i] = '0' + byte(lo.offs[i+1]-lo.offs[i])
	}
	id := strings.Join(keys, "\x00") + "\x00#" + string(layout)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	if lo.stride() == 1 {
		// Every limit blocks: the decisions read no state and write none,
		// so every such set shares one table, which never holds a key.
		if s.block == nil {
			s.block = newTable(s.Shards, s.MaxKeys, 1)
		}
		return &memCounter{store: s, t: s.block, layout: lo}, nil
	}
	t := s.tables[id]
	if t == nil {
		t = newTable(s.Shards, s.MaxKeys, lo.stride())
		t.id, t.ids = id, ids
		s.tables[id] = t
	}
	t.refs++
	t.lo = lo
	c := &memCounter{store: s, t: t, layout: lo}
	// The table is released when the counter becomes unreachable. The
	// cleanup holds the store and the table, neither of which refers to
	// the counter (the table's copy of the layout shares only its slices).
	runtime.AddCleanup(c, s.release, t)
	return c, nil
}

// release gives up the reference of a counter on t that became
// unreachable. When it was the last, t is dropped, or, while some of its
// keys are still counting, kept until they are not: a Bind of the same
// limits until then shares their counts.
func (s *MemoryStore) release(t *table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if t.refs--; t.refs == 0 {
		if t.idle(now) {
			if s.tables[t.id] == t {
				delete(s.tables, t.id)
			}
		} else {
			t.recheck = now + t.horizon()
			if s.sweepAt == 0 || t.recheck < s.sweepAt {
				s.sweepAt = t.recheck
			}
		}
	}
	s.sweep(now)
}

// minSweepInterval bounds how often the tables are scanned for orphaned
// tables due for a check.
const minSweepInterval = int64(time.Second)

// sweep drops the orphaned tables (no counter bound to them is reachable)
// whose check is due and whose keys are all back to full, and schedules
// the next check of the others. s.mu is held.
func (s *MemoryStore) sweep(now int64) {
	if s.sweepAt == 0 || now < s.sweepAt {
		return
	}
	next := int64(0)
	for id, t := range s.tables {
		if t.refs > 0 {
			continue
		}
		if t.recheck <= now {
			if t.idle(now) {
				delete(s.tables, id)
				continue
			}
			t.recheck = now + t.horizon()
		}
		if next == 0 || t.recheck < next {
			next = t.recheck
		}
	}
	if next != 0 {
		next = max(next, now+minSweepInterval)
	}
	s.sweepAt = next
}

// horizon returns a time after which the keys of t, counted no more, are
// all back to full: when an orphaned table that is not idle is checked
// again.
func (t *table) horizon() int64 {
	const most = int64(1) << 61 // 73 years: now + most cannot overflow
	h := minSweepInterval
	for i := range t.lo.ps {
		p := &t.lo.ps[i]
		d := most
		if w := int64(p.Window); w < most/4 && p.MaxDelay < most/2/int64(p.Unit) {
			d = 2*w + p.MaxDelay*int64(p.Unit)
		}
		h = max(h, d)
	}
	return h
}

// TrackedKeys returns the number of keys the store tracks for limit l,
// over every set of limits that holds it, including keys whose state is
// full and not yet dropped; 0 for a limit never bound or invalid. It takes
// each shard's lock in turn: call it at metrics-scrape time, not per
// request.
func (s *MemoryStore) TrackedKeys(l Limit) int {
	p, err := l.Params(time.Nanosecond)
	if err != nil {
		return 0
	}
	s.once.Do(s.init)
	s.mu.Lock()
	s.sweep(s.now())
	var ts []*table
	for _, t := range s.tables {
		if slices.Contains(t.ids, p.ID) {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, t := range ts {
		n += t.size()
	}
	return n
}
