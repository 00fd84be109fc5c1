package core

import (
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/internal/episode"
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
// find the key's slot without a lock and lock the slot alone, runs the
// algorithms and returns the time of the decision, having measured its
// latency if asked. A key not yet tracked, a shard that holds grants and
// a set of limits with a log take the shard's lock as well (the insertion,
// the sketch, the grants, the logs).

// DefaultMaxKeys is the key cap of a MemoryStore whose MaxKeys is zero.
const DefaultMaxKeys = 1 << 20

// DefaultMaxLogBytes is the memory budget of the sliding window logs of a
// MemoryStore whose MaxLogBytes is zero: 256 MiB.
const DefaultMaxLogBytes = 256 << 20

// MaxOverflow is the largest Overflow of a MemoryStore: a billion
// requests per second.
const MaxOverflow = 1_000_000_000

// MemoryStore keeps counters in this process. It is the default store of
// a Limiter; its zero value is ready to use, and its fields, set before
// the first Bind, configure it:
//
//	store := &core.MemoryStore{MaxKeys: 100_000}
//
// A limiter's limits are kept together: each set of limits bound at once
// has its own table, split into shards, whose slots hold a key's state
// under every limit of the set, so that one lock covers a whole decision:
// the slot's own, a bit of its first word. A decision on a key already
// tracked finds its slot without a lock and writes nothing but the slot,
// so that decisions on different keys on different cores do not contend;
// each shard has a lock too, for inserting keys, rebuilding, the sketch,
// the logs and the grants. A key is stored as a 64-bit hash of its text (seeded per
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
// A sliding window log keeps an entry per instant it admitted a request
// at, up to its count, so its memory grows with the limit, not with the
// keys: a million keys at 1000 per hour would hold 8 GiB. The logs of all
// the store's keys are therefore held to a budget, MaxLogBytes: a key's
// log is charged 96 bytes, plus 12 bytes per entry it has room for (at
// least 4), while the key is tracked. At the budget, nothing is allocated
// beyond it: a new key that needs a log is counted in its shard's sketch,
// as a key the shard has no room for (held to the counts of its last two
// windows, stricter than the log), and a log that is full and may not
// grow merges a new request into its newest entry and moves that entry's
// time to now, so that its requests expire with the newest of them: later
// than they would, never earlier, stricter than the log and never looser.
// When the budget is spent, a shard that needs room drops its keys back to
// full (at most every 100 ms) to free their logs. Reaching the budget and
// leaving it are logged once per episode.
//
// Overflow chooses what the store does with a request of a key in the
// sketch that the sketch denies: with 0, the default, it is denied, as
// the sketch says; with a positive Overflow it is admitted while a budget
// of Overflow such requests per second, over the whole store, has room
// (a bucket refilled continuously that holds a second's worth), and
// denied once the budget is spent. A request admitted from the budget is
// counted by the budget alone, not by the key's cells: with Overflow, a
// client in the sketch over its limit may be admitted beyond it, by at
// most Overflow requests per second for every client together. The
// sketch coming into use is logged once per episode, with the choice.
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

	// MaxLogBytes is the memory budget of the sliding window logs of all
	// the store's keys, in bytes (default DefaultMaxLogBytes); see above
	// for what happens at the budget.
	MaxLogBytes int64

	// Overflow is what the store does with a request that the sketch of
	// a full shard denies: 0 (the default) denies it; a positive number,
	// at most MaxOverflow, admits such requests up to Overflow per second
	// over the whole store, and denies the rest. See above.
	Overflow int

	// Logger receives the store's episodes (a shard at its key cap, the
	// logs at their budget), one line when each starts and one when it
	// ends (default slog.Default()).
	Logger *slog.Logger

	// Clock, when set, is read for the time instead of the system clock:
	// for tests that replay exact traces.
	Clock func() time.Time

	once  sync.Once
	err   error
	base  time.Time // the time of the origin: the clock's reading at the first Bind
	press *pressure // the budgets the store's tables share

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
	case s.MaxLogBytes < 0:
		s.err = fmt.Errorf("ratekit: memory store: MaxLogBytes %d must not be negative", s.MaxLogBytes)
	case s.Overflow < 0 || s.Overflow > MaxOverflow:
		s.err = fmt.Errorf("ratekit: memory store: Overflow %d must be between 0 (deny) and %d requests per second", s.Overflow, MaxOverflow)
	}
	if s.MaxKeys == 0 {
		s.MaxKeys = DefaultMaxKeys
	}
	if s.MaxLogBytes == 0 {
		s.MaxLogBytes = DefaultMaxLogBytes
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
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
	s.press = &pressure{log: s.Logger, maxKeys: s.MaxKeys, maxLog: s.MaxLogBytes, overflow: s.Overflow}
	if s.Overflow > 0 {
		s.press.emission = int64(time.Second) / int64(s.Overflow)
	}
	if s.Clock != nil {
		s.press.logs.Now, s.press.full.Now = s.Clock, s.Clock
	}
}

// pressure is what the tables of a store share: the budget of the
// sliding window logs, the overflow budget, and the episodes of both.
type pressure struct {
	log      *slog.Logger
	maxKeys  int
	maxLog   int64
	overflow int   // MemoryStore.Overflow
	emission int64 // the overflow budget's interval between two requests; 0: deny

	logBytes atomic.Int64 // charged to the logs
	logs     episode.Log  // of the logs at their budget

	sketches atomic.Int64 // shards with a sketch, over every table
	full     episode.Log  // of the sketches in use
	tat      atomic.Int64 // the overflow budget, as a bucket's theoretical arrival time
}

// Charges of a sliding window log against the budget: the ring and its
// reference, and each entry it has room for (its time and, should it need
// one, its cost), at least minEntries.
const (
	ringBytes  = 96
	entryBytes = 12
	minEntries = 4
)

// ringCharge is what ring r is charged.
func ringCharge(r *logRing) int64 {
	return ringBytes + entryBytes*int64(max(len(r.ts), minEntries))
}

// reserve charges n bytes to the logs, if the budget has room, and
// reports whether it did.
func (p *pressure) reserve(n int64) bool {
	if p == nil || n <= 0 {
		return true
	}
	if p.logBytes.Add(n) > p.maxLog {
		p.logBytes.Add(-n)
		if start, _ := p.logs.Fail(); start {
			p.log.Warn("ratekit: memory store: sliding window logs at their memory budget: new keys are counted in the sketch, full logs merge new requests into their newest entry (stricter)",
				"max_log_bytes", p.maxLog)
		}
		return false
	}
	if end, n := p.logs.Recover(); end {
		p.log.Info("ratekit: memory store: sliding window logs below their memory budget again", "refused", n)
	}
	return true
}

// free gives n bytes back to the logs' budget.
func (p *pressure) free(n int64) {
	if p != nil && n > 0 {
		p.logBytes.Add(-n)
	}
}

// sketched counts a decision of a new key in a sketch, and logs the start
// of an episode.
func (p *pressure) sketched() {
	if start, _ := p.full.Fail(); start {
		policy := "denied when its estimate says so"
		if p.emission != 0 {
			policy = "denied when its estimate says so, beyond an overflow budget of " + strconv.Itoa(p.overflow) + " requests per second"
		}
		p.log.Warn("ratekit: memory store: a shard is at its key cap with every key counting: new keys are counted in the sketch, "+policy,
			"max_keys", p.maxKeys, "overflow_per_second", p.overflow)
	}
}

// sketchAdded counts a sketch created, and sketchDropped one dropped,
// which ends the episode when it was the last.
func (p *pressure) sketchAdded() { p.sketches.Add(1) }

func (p *pressure) sketchDropped() {
	if p.sketches.Add(-1) == 0 {
		if end, n := p.full.Recover(); end {
			p.log.Info("ratekit: memory store: every shard has room again, no sketch in use", "decisions_in_sketch", n)
		}
	}
}

// spill reports whether the overflow budget admits a request at time now
// (the store's), taking it from the budget when commit is set.
func (p *pressure) spill(now int64, commit bool) bool {
	if p.emission == 0 {
		return false
	}
	for {
		old := p.tat.Load()
		next := max(old, now) + p.emission
		if next-now > int64(time.Second) {
			return false
		}
		if !commit || p.tat.CompareAndSwap(old, next) {
			return true
		}
	}
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
			s.block = newTable(s.Shards, s.MaxKeys, 1, nil)
		}
		return &memCounter{store: s, t: s.block, layout: lo}, nil
	}
	t := s.tables[id]
	if t == nil {
		t = newTable(s.Shards, s.MaxKeys, lo.stride(), s.press)
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
				t.drop()
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
				t.drop()
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
