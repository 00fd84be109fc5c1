package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/internal/unixtime"
)

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
// frees up (see sketch.go): a collision there only makes limiting
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

// shift returns Params.shift for a period, in nanoseconds: the store's
// time plus shift is a multiple of period exactly when the Unix time is.
func (s *MemoryStore) shift(period int64) int64 {
	return ((unixtime.Mod(s.base, period)-origin)%period + period) % period
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
	offs := make([]int, len(limits)+1)
	offs[0] = 1 // word 0 is the key hash
	keys := make([]string, len(limits))
	for i, l := range limits {
		p, err := l.Params(time.Nanosecond)
		if err != nil {
			return nil, err
		}
		p.shift = s.shift(p.Period)
		ps[i], ids[i] = p, p.ID
		keys[i] = p.ID + "/" + strconv.FormatInt(p.Period, 10)
		offs[i+1] = offs[i] + p.width()
	}
	// A table is keyed by its limits' IDs and periods and the layout of
	// their states in its slots: the same limit, blocking in one binding
	// (no state) and counting in another, cannot share a table. Counts do
	// not enter the key: bindings of the same limits with other counts
	// share the states, which each decision reads with its own limits.
	layout := make([]byte, len(ps))
	for i := range ps {
		layout[i] = '0' + byte(offs[i+1]-offs[i])
	}
	id := strings.Join(keys, "\x00") + "\x00#" + string(layout)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	if offs[len(ps)] == 1 {
		// Every limit blocks: the decisions read no state and write none,
		// so every such set shares one table, which never holds a key.
		if s.block == nil {
			s.block = newTable(s.Shards, s.MaxKeys, 1)
		}
		return &memCounter{store: s, t: s.block, ps: ps, offs: offs}, nil
	}
	t := s.tables[id]
	if t == nil {
		t = newTable(s.Shards, s.MaxKeys, offs[len(ps)])
		t.id, t.ids = id, ids
		s.tables[id] = t
	}
	t.refs++
	t.ps, t.offs = ps, offs
	c := &memCounter{store: s, t: t, ps: ps, offs: offs, cellOffs: cellOffsets(ps)}
	for i := range ps {
		c.logs = c.logs || ps[i].Algorithm == SlidingWindowLog && !ps[i].Block
	}
	// The table is released when the counter becomes unreachable. The
	// cleanup holds the store and the table, neither of which refers to
	// the counter.
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

// MaxLimits is the most limits one Limiter (one Store.Bind) may have.
const MaxLimits = 16

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

// memCounter is a Counter over one table of a memory store.
type memCounter struct {
	store *MemoryStore
	t     *table
	ps    []Params
	offs  []int // limit i's words are slot[offs[i]:offs[i+1]]
	logs  bool  // a sliding window log is among the limits

	cellOffs []int // limit i's words are cell[cellOffs[i]:cellOffs[i+1]] in a sketch
}

// zeroWords is the state of a key never seen, for decisions that do not
// count: read, never written.
var zeroWords [1 + 2*MaxLimits]int64

// Take decides and counts a request; see Counter.
func (c *memCounter) Take(ctx context.Context, key string, cost int, ds []Decision) (time.Time, error) {
	now, err := c.decide(key, cost, true, ds)
	return c.store.timeOf(now), err
}

// Peek decides a request without counting it; see Counter.
func (c *memCounter) Peek(ctx context.Context, key string, cost int, ds []Decision) error {
	_, err := c.decide(key, cost, false, ds)
	return err
}

// Refund gives back a request admitted at time at; see Counter.
func (c *memCounter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []Decision) error {
	if cost <= 0 {
		return nil
	}
	if len(ds) < len(c.ps) {
		return fmt.Errorf("ratekit: %d decisions for %d limits", len(ds), len(c.ps))
	}
	now := c.store.now()
	sh, w, h, over, now := c.t.acquire(key, false, now, c)
	for i := range c.ps {
		switch {
		case ds[i].Granted:
			sh.regrant(h, i, int64(cost), now)
		case w != nil && !over: // a sketch's cells count other keys too: nothing to give back
			c.ps[i].refund(w[c.offs[i]:c.offs[i+1]], &sh.rings, c.store.sinceBase(at), int64(cost))
		}
	}
	sh.mu.Unlock()
	return nil
}

// decide is Take (commit) and Peek, writing limit i's decision to ds[i].
func (c *memCounter) decide(key string, cost int, commit bool, ds []Decision) (int64, error) {
	if len(ds) < len(c.ps) {
		return 0, fmt.Errorf("ratekit: %d decisions for %d limits", len(ds), len(c.ps))
	}
	for i := range c.ps {
		if cost < 0 || int64(cost) > c.ps[i].Capacity && !c.ps[i].Block {
			return 0, fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, cost, c.ps[i].Capacity)
		}
	}
	return c.decideValid(key, cost, commit, ds), nil
}

// decideValid is decide for a cost every limit can take and ds of one
// decision per limit: what a Limiter has checked already.
func (c *memCounter) decideValid(key string, cost int, commit bool, ds []Decision) int64 {
	ds = ds[:len(c.ps)]
	now := c.store.now()
	commit = commit && cost > 0 && c.t.stride > 1 // a block-only set keeps no state
	sh, w, h, over, now := c.t.acquire(key, commit, now, c)
	if w == nil {
		w = zeroWords[:c.t.stride]
		commit = false
	}
	rs := &sh.rings
	if over {
		rs = nil // the sketch's logs are window counts
	}
	switch {
	case len(sh.grants) != 0:
		c.decideGranted(sh, rs, h, w, now, int64(cost), commit, ds)
	case len(c.ps) == 1:
		c.ps[0].take(w[c.offs[0]:c.offs[1]], rs, now, int64(cost), commit, &ds[0])
	case commit && !c.logs && c.t.stride <= 8:
		// One pass, counting on a copy of the slot, which is written back
		// only if every limit admitted the request.
		var buf [8]int64
		tmp := buf[:c.t.stride]
		copy(tmp, w)
		all := true
		for i := range c.ps {
			c.ps[i].take(tmp[c.offs[i]:c.offs[i+1]], nil, now, int64(cost), true, &ds[i])
			all = all && ds[i].Allowed
		}
		if all {
			copy(w, tmp)
		}
	default:
		// A log is counted in its ring, not in the slot: ask every limit
		// first, then count.
		all := true
		for i := range c.ps {
			c.ps[i].take(w[c.offs[i]:c.offs[i+1]], rs, now, int64(cost), false, &ds[i])
			all = all && ds[i].Allowed
		}
		if all && commit {
			for i := range c.ps {
				c.ps[i].take(w[c.offs[i]:c.offs[i+1]], rs, now, int64(cost), true, &ds[i])
			}
		}
	}
	if over && commit {
		c.settle(sh.sketch, h, now)
	}
	sh.mu.Unlock()
	return now
}

// takeOne is decide with commit for a counter of one limit, writing the
// decision in place: the lane of most requests. The cost is valid.
func (c *memCounter) takeOne(key string, cost int, d *Decision) {
	p := &c.ps[0]
	now := c.store.now()
	commit := cost > 0 && c.t.stride > 1
	sh, w, h, over, now := c.t.acquire(key, commit, now, c)
	if w == nil {
		w = zeroWords[:c.t.stride]
		commit = false
	}
	rs := &sh.rings
	if over {
		rs = nil
	}
	if len(sh.grants) != 0 {
		var ds [1]Decision
		c.decideGranted(sh, rs, h, w, now, int64(cost), commit, ds[:])
		*d = ds[0]
	} else {
		p.take(w[1:], rs, now, int64(cost), commit, d)
	}
	if over && commit {
		c.settle(sh.sketch, h, now)
	}
	sh.mu.Unlock()
}

// full reports whether slot w is back to full capacity under every limit.
func (c *memCounter) full(w []int64, rs *rings, now int64) bool {
	for i := range c.ps {
		if !c.ps[i].full(w[c.offs[i]:c.offs[i+1]], rs, now) {
			return false
		}
	}
	return true
}

// table is an open-addressing hash table of per-key states, split into
// shards. A slot is stride words: the 64-bit hash of the key (0 marks an
// empty slot), then the state of each limit. Collisions are resolved by
// linear probing.
type table struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint // hash >> shift selects the shard
	maxShard int  // the key cap of one shard
	stride   int

	// The fields below are guarded by MemoryStore.mu.

	id      string   // the table's key in MemoryStore.tables
	ids     []string // the IDs of its limits
	refs    int      // the reachable counters bound to the table
	ps      []Params // the limits of the last Bind, which tell when a key is full
	offs    []int    // and their offsets
	recheck int64    // with refs 0: when to check again whether every key is full
}

type shard struct {
	// A cache line of padding keeps the fields of two neighbouring shards
	// on different cache lines.
	_ [64]byte

	mu    sync.Mutex
	words []int64 // slots, stride words each
	n     int     // used slots
	rings rings

	// While every key of a full shard is still counting, new keys are
	// counted in the sketch; nil until then.
	sketch *sketch
	// The latest time a decision of the shard was taken at.
	last int64
	// No new sweep of a full shard before this time.
	sweepAfter int64

	// The grants outstanding, by key hash and limit; nil when none ever
	// was.
	grants map[grantKey]grantValue
}

func newTable(shards, maxKeys, stride int) *table {
	bitsN := uint(0)
	for 1<<bitsN < shards {
		bitsN++
	}
	return &table{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, shards),
		shift:    64 - bitsN,
		maxShard: (maxKeys + shards - 1) / shards,
		stride:   stride,
	}
}

func (t *table) size() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// idle reports whether no key of t is still counting at time now, under
// the limits of its last Bind: whether dropping t would change no
// decision. It takes each shard's lock in turn.
func (t *table) idle(now int64) bool {
	c := &memCounter{t: t, ps: t.ps, offs: t.offs, cellOffs: cellOffsets(t.ps)}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		ok := (sh.sketch == nil || c.sketchIdle(sh.sketch, now)) && !sh.granting(now)
		for j := 0; ok && sh.n > 0 && j < len(sh.words); j += t.stride {
			ok = sh.words[j] == 0 || c.full(sh.words[j:j+t.stride], &sh.rings, now)
		}
		sh.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// horizon returns a time after which the keys of t, counted no more, are
// all back to full: when an orphaned table that is not idle is checked
// again.
func (t *table) horizon() int64 {
	const most = int64(1) << 61 // 73 years: now + most cannot overflow
	h := minSweepInterval
	for i := range t.ps {
		p := &t.ps[i]
		d := most
		if w := int64(p.Window); w < most/4 && p.MaxDelay < most/2/int64(p.Unit) {
			d = 2*w + p.MaxDelay*int64(p.Unit)
		}
		h = max(h, d)
	}
	return h
}

// slots returns the number of slots of sh.
func (t *table) slots(sh *shard) int { return len(sh.words) / t.stride }

// fullSweepCooldown is how long a shard at its key cap waits between two
// sweeps that found no key to drop.
const fullSweepCooldown = int64(100 * time.Millisecond)

// acquire locks the shard of key and returns it with the key's slot and
// the time to decide at: now, or the latest time a decision of the shard
// was taken at, if later, so that two requests whose clock readings cross
// a window's end in the other order than they take the lock never roll a
// window back. With insert, a key not yet tracked is inserted with the
// zero state (or what the sketch holds for it) — or, when the shard is at
// its cap with every key still counting, over is true and the slot is the
// key's estimate in the shard's sketch, which the caller settles after
// counting in it. Without insert, the slot of an untracked key is nil, or
// its estimate while the shard has a sketch: what Take would start it
// from. The caller unlocks sh.mu.
func (t *table) acquire(key string, insert bool, now int64, c *memCounter) (sh *shard, w []int64, h uint64, over bool, at int64) {
	sh, h, i, found := t.lookup(key)
	if now < sh.last {
		now = sh.last
	} else {
		sh.last = now
	}
	if found {
		return sh, sh.words[i : i+t.stride], h, false, now
	}
	if !insert {
		if sh.sketch != nil {
			return sh, c.estimate(sh.sketch, h, now), h, true, now // what Take would start from
		}
		return sh, nil, h, false, now
	}
	if sh.n >= t.maxShard || sh.n+1 > t.slots(sh)*4/5 {
		if !t.rebuild(sh, c, now) {
			// Every key is counting and the shard is at its cap.
			if sh.sketch == nil {
				sh.sketch = c.newSketch()
			}
			return sh, c.estimate(sh.sketch, h, now), h, true, now
		}
		i, _ = t.find(sh, h)
	}
	sh.words[i] = int64(h)
	sh.n++
	w = sh.words[i : i+t.stride]
	if sh.sketch != nil {
		c.seed(sh, h, now, w)
	}
	return sh, w, h, false, now
}

// lookup locks the shard of key and returns it with the key's hash and
// the word index of its slot: where it is when found, where it belongs
// otherwise. The caller unlocks sh.mu.
func (t *table) lookup(key string) (sh *shard, h uint64, i int, found bool) {
	h = maphash.String(t.seed, key)
	if h == 0 {
		h = 1
	}
	if t.shift == 64 {
		sh = &t.shards[0]
	} else {
		sh = &t.shards[h>>t.shift]
	}
	sh.mu.Lock()
	i, found = t.find(sh, h)
	return sh, h, i, found
}

// find returns the word index of the slot holding h, or of the empty slot
// where h belongs.
func (t *table) find(sh *shard, h uint64) (int, bool) {
	n := t.slots(sh)
	if n == 0 {
		return 0, false
	}
	i := int((h & 0xffffffff) * uint64(n) >> 32)
	for {
		k := uint64(sh.words[i*t.stride])
		if k == h {
			return i * t.stride, true
		}
		if k == 0 {
			return i * t.stride, false
		}
		if i++; i == n {
			i = 0
		}
	}
}

// rebuild rehashes the shard into a table sized for its live keys, dropping
// the keys whose state is full (and their logs), so that there is room for
// one more key. It reports false when the shard is at its cap with no key
// to drop.
func (t *table) rebuild(sh *shard, c *memCounter, now int64) bool {
	capN := t.maxShard
	if sh.n >= capN && now < sh.sweepAfter {
		return false
	}
	live := 0
	for j := 0; j < len(sh.words); j += t.stride {
		if sh.words[j] != 0 && !c.full(sh.words[j:j+t.stride], &sh.rings, now) {
			live++
		}
	}
	if live >= capN {
		sh.sweepAfter = now + fullSweepCooldown
		return false
	}
	if sh.n >= capN && live > capN-capN/8 {
		// Little room was freed: let the next sweep wait, so that a stream
		// of new keys at the cap does not rehash the shard every time.
		sh.sweepAfter = now + fullSweepCooldown
	}
	var rs rings
	if sh.sketch != nil && c.sketchIdle(sh.sketch, now) {
		sh.sketch = nil
	}
	size := max(2*(live+1), 16)
	if limit := capN + capN/4 + 1; size > limit && limit > live+1 {
		size = limit
	}
	old := sh.words
	sh.words = make([]int64, size*t.stride)
	sh.n = 0
	for j := 0; j < len(old); j += t.stride {
		w := old[j : j+t.stride]
		if w[0] == 0 || c.full(w, &sh.rings, now) {
			continue
		}
		c.moveRings(w, &sh.rings, &rs)
		k, _ := t.find(sh, uint64(w[0]))
		copy(sh.words[k:k+t.stride], w)
		sh.n++
	}
	sh.rings = rs
	return true
}

// moveRings moves the logs of slot w from one ring list to another,
// rewriting the slot's references.
func (c *memCounter) moveRings(w []int64, from, to *rings) {
	for i := range c.ps {
		if p := &c.ps[i]; p.Algorithm == SlidingWindowLog && !p.Block {
			if r := from.get(w[c.offs[i]]); r != nil {
				w[c.offs[i]] = to.add(r)
			}
		}
	}
}
