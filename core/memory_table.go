package core

import (
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the memory store's table and what it calls down into,
// each part below the one that calls it: the table, the sketch, the
// layout and the sliding window logs.
//
// The table: the slots of the keys of one set of limits, split into
// shards with a lock each. The table finds and
// inserts keys and drops those back to full; it calls down into the
// sketch (for the keys a full shard has no room for), the grants and the
// layout (to tell a shard or a key that can be dropped), never up into
// the counter.

// table is an open-addressing hash table of per-key states, split into
// shards. A slot is stride words: the 64-bit hash of the key (0 marks an
// empty slot), then the state of each limit. Collisions are resolved by
// linear probing.
//
// A decision on a key already tracked takes no shard-wide lock and writes
// nothing shard-wide: it finds the key's slot reading the shard's slots
// without a lock, and locks the slot itself, by the low bit of its hash
// word (a key's hash always has that bit clear), with a compare-and-swap
// on the slot's own cache line (a decision that has to wait for the slot
// waits in the shard's mutex). The slot's state is read and written only
// under its lock. The shard's mutex guards the rest: inserting a key (the
// slots only ever go from empty to a key in place), a rebuild (which
// publishes a new array of slots after locking each slot of the old one
// for good, so that a decision spinning on a slot of an old array moves on
// to the new one), the sketch, the logs and the grants. Whoever holds the
// shard's mutex may take a slot's lock; a slot's holder never waits for the
// mutex.
type table struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint // hash >> shift selects the shard
	maxShard int  // the key cap of one shard
	stride   int
	press    *pressure // the store's budgets; nil for a table that keeps no state

	// The fields below are guarded by MemoryStore.mu.

	id      string   // the table's key in MemoryStore.tables
	ids     []string // the IDs of its limits
	refs    int      // the reachable counters bound to the table
	lo      layout   // the limits of the last Bind, which tell when a key is full
	recheck int64    // with refs 0: when to check again whether every key is full
}

type shard struct {
	// A cache line of padding keeps the fields of two neighbouring shards
	// on different cache lines.
	_ [64]byte

	// Read by every decision, written only under mu, and seldom: on their
	// own cache line, which decisions therefore share among the cores.

	arr     atomic.Pointer[[]int64] // the slots, stride words each
	granted atomic.Bool             // grants may be outstanding: decisions take mu

	_ [48]byte

	mu    sync.Mutex
	n     int // used slots
	rings rings

	// While every key of a full shard is still counting, new keys are
	// counted in the sketch; nil until then.
	sketch *sketch
	// The latest time a decision of the shard under mu was taken at.
	last int64
	// No new sweep of a full shard before this time.
	sweepAfter int64
	// No new sweep for the logs' budget before this time.
	logSweepAfter int64

	// The grants outstanding, by key hash and limit; nil when none ever
	// was.
	grants map[grantKey]grantValue
}

func newTable(shards, maxKeys, stride int, press *pressure) *table {
	bitsN := uint(0)
	for 1<<bitsN < shards {
		bitsN++
	}
	t := &table{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, shards),
		shift:    64 - bitsN,
		maxShard: (maxKeys + shards - 1) / shards,
		stride:   stride,
		press:    press,
	}
	for i := range t.shards {
		t.shards[i].rings.press = press
		t.shards[i].arr.Store(&noSlots)
	}
	return t
}

// noSlots is the slots of a shard that holds no key yet.
var noSlots []int64

// words returns the shard's slots.
func (sh *shard) words() []int64 { return *sh.arr.Load() }

// lockBit is the low bit of a slot's hash word: set while a decision
// holds the slot.
const lockBit = 1

// hash returns the hash of key in t: never 0 (an empty slot), low bit
// clear (the slot's lock).
func (t *table) hash(key string) uint64 {
	h := maphash.String(t.seed, key) &^ lockBit
	if h == 0 {
		h = 2
	}
	return h
}

// shardOf returns the shard of hash h.
func (t *table) shardOf(h uint64) *shard {
	if t.shift == 64 {
		return &t.shards[0]
	}
	return &t.shards[h>>t.shift]
}

// spinLimit is how many times a decision retries a slot that another
// holds before it queues (see held) or yields the processor.
const spinLimit = 16

// lockSlot locks the slot of hash h at word i of ws, the shard's current
// slots, and returns it; sh.mu is held, so ws stays current.
func lockSlot(ws []int64, i int, h uint64, stride int) []int64 {
	for !atomic.CompareAndSwapInt64(&ws[i], int64(h), int64(h|lockBit)) {
		wait(&ws[i], h)
	}
	return ws[i : i+stride]
}

// wait waits until the slot whose hash word is at p looks unlocked,
// reading it (the line stays shared while the holder finishes, where a
// compare-and-swap would take it away), at most spinLimit times before
// yielding the processor. It reports whether it saw the slot unlocked.
func wait(p *int64, h uint64) bool {
	for spins := 0; atomic.LoadInt64(p) != int64(h); spins++ {
		if spins >= spinLimit {
			runtime.Gosched()
			return false
		}
	}
	return true
}

// unlockSlot unlocks slot w of hash h, locked by lockSlot or a decision.
func unlockSlot(w []int64, h uint64) { atomic.StoreInt64(&w[0], int64(h)) }

// held locks the slot of hash h in sh, if sh holds it, and returns it, or
// nil when sh does not hold it. It takes sh.mu only while it waits for a
// slot another decision holds (see below). The caller unlocks the slot
// (unlockSlot).
//
// It probes with a compare-and-swap first and reads only after one fails:
// the slot's line was most likely last written by another core, and a
// read before the compare-and-swap would fetch it twice, shared and then
// exclusive, where the compare-and-swap fetches it once. A slot probed in
// vain leaves the line here, where the next probe (most often in the same
// line) reads it.
//
// A decision that waits for the slot longer than a spin queues on the
// shard's mutex, and waits for the slot holding it: of all the decisions
// waiting for a hot key, one spins on its slot and the others sleep in the
// mutex, so that many cores on one key do not all read the line its holder
// writes, nor all yield to the scheduler over and over.
func (t *table) held(sh *shard, h uint64) []int64 {
	queued := false
	for {
		w, busy := t.probe(sh.words(), h)
		if busy == nil {
			if queued {
				sh.mu.Unlock()
			}
			return w
		}
		// Another decision holds it, or a rebuild moved it to a new
		// array (which the next reading finds).
		if !wait(&busy[0], h) && !queued {
			sh.mu.Lock()
			queued = true
		}
	}
}

// probe locks the slot of hash h in ws and returns it, or nil when ws
// does not hold h, or, when another holds the slot, nil and the slot as
// busy.
func (t *table) probe(ws []int64, h uint64) (w, busy []int64) {
	n := t.slots(ws)
	if n == 0 {
		return nil, nil
	}
	for i := int((h & 0xffffffff) * uint64(n) >> 32); ; {
		j := i * t.stride
		if atomic.CompareAndSwapInt64(&ws[j], int64(h), int64(h|lockBit)) {
			return ws[j : j+t.stride], nil
		}
		switch k := uint64(atomic.LoadInt64(&ws[j])); {
		case k&^lockBit == h:
			return nil, ws[j : j+t.stride]
		case k == 0:
			return nil, nil
		}
		if i++; i == n {
			i = 0
		}
	}
}

// drop gives back what the table was charged, when the store drops it:
// its logs' bytes and its sketches.
func (t *table) drop() {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, r := range sh.rings.list {
			t.press.free(ringCharge(r))
		}
		sh.rings.list = nil
		if sh.sketch != nil {
			sh.sketch = nil
			t.press.sketchDropped()
		}
		sh.mu.Unlock()
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
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		ok := (sh.sketch == nil || sh.sketch.idle(&t.lo, now)) && !sh.granting(now)
		ws := sh.words()
		for j := 0; ok && sh.n > 0 && j < len(ws); j += t.stride {
			if k := uint64(atomic.LoadInt64(&ws[j])) &^ lockBit; k != 0 {
				w := lockSlot(ws, j, k, t.stride)
				ok = t.lo.full(w, &sh.rings, now)
				unlockSlot(w, k)
			}
		}
		sh.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// slots returns the number of slots of ws.
func (t *table) slots(ws []int64) int { return len(ws) / t.stride }

// fullSweepCooldown is how long a shard at its key cap waits between two
// sweeps that found no key to drop.
const fullSweepCooldown = int64(100 * time.Millisecond)

// acquire locks the shard of key hash h and returns it with the key's
// slot, locked, and the time to decide at: now, or the latest time a
// decision of the shard under its lock was taken at, if later, so that
// two requests whose clock readings cross a window's end in the other
// order than they take the lock never roll a window of the sketch back
// (a slot's windows are kept from rolling back by clamp). With insert, a
// key not yet tracked is inserted with the zero state (or what the sketch
// holds for it) — or, when the shard is at its cap with every key still
// counting, over is true and the slot is the key's estimate in the
// shard's sketch (its word 0 is h), which the caller settles after
// counting in it. Without insert, the slot of an untracked key is nil, or
// its estimate while the shard has a sketch: what Take would start it
// from. lo is the layout of the caller's limits. The caller unlocks the
// slot, when not nil (unlockSlot), then sh.mu.
func (t *table) acquire(h uint64, insert bool, now int64, lo *layout) (sh *shard, w []int64, over bool, at int64) {
	sh = t.shardOf(h)
	sh.mu.Lock()
	if now < sh.last {
		now = sh.last
	} else {
		sh.last = now
	}
	ws := sh.words()
	i, found := t.find(ws, h)
	if found {
		return sh, lockSlot(ws, i, h, t.stride), false, now
	}
	if !insert {
		if sh.sketch != nil {
			return sh, sh.sketch.estimate(lo, h, now), true, now // what Take would start from
		}
		return sh, nil, false, now
	}
	if sh.n >= t.maxShard || sh.n+1 > t.slots(ws)*4/5 {
		if !t.rebuild(sh, lo, now) {
			// Every key is counting and the shard is at its cap.
			return t.overflow(sh, lo, h, now)
		}
	}
	if lo.logs && !t.reserveLogs(sh, lo, now) {
		// No room in the budget for the key's logs.
		return t.overflow(sh, lo, h, now)
	}
	ws = sh.words() // rebuild and reserveLogs may have rebuilt the shard
	i, _ = t.find(ws, h)
	w = ws[i : i+t.stride]
	// The slot goes from empty to the key, locked: a decision that finds
	// it waits for the state written below.
	atomic.StoreInt64(&w[0], int64(h|lockBit))
	sh.n++
	if lo.logs {
		for j := range lo.ps {
			if p := &lo.ps[j]; p.Algorithm == SlidingWindowLog && !p.Block {
				w[lo.offs[j]] = sh.rings.add(&logRing{})
			}
		}
	}
	if sh.sketch != nil {
		sh.sketch.seed(lo, &sh.rings, h, now, w)
	}
	return sh, w, false, now
}

// reserveLogs charges the logs of a new key in shard sh to the store's
// budget, and reports whether it could. When the budget is spent, the
// shard drops its keys back to full, whose logs are charged still (at
// most once per fullSweepCooldown), and tries again.
func (t *table) reserveLogs(sh *shard, lo *layout, now int64) bool {
	n := lo.logCharge()
	if t.press.reserve(n) {
		return true
	}
	if now < sh.logSweepAfter {
		return false
	}
	sh.logSweepAfter = now + fullSweepCooldown
	return t.rebuild(sh, lo, now) && t.press.reserve(n)
}

// overflow returns what acquire does with a new key of hash h that the
// shard has no room for: its estimate in the shard's sketch, created when
// the shard has none.
func (t *table) overflow(sh *shard, lo *layout, h uint64, now int64) (*shard, []int64, bool, int64) {
	if sh.sketch == nil {
		sh.sketch = newSketch(lo, t.maxShard)
		t.press.sketchAdded()
	}
	t.press.sketched()
	return sh, sh.sketch.estimate(lo, h, now), true, now
}

// lookup locks the shard of key and returns it with the key's hash and
// its slot, locked, or nil when the shard does not hold the key. The
// caller unlocks the slot, when not nil (unlockSlot), then sh.mu.
func (t *table) lookup(key string) (sh *shard, h uint64, w []int64) {
	h = t.hash(key)
	sh = t.shardOf(h)
	sh.mu.Lock()
	ws := sh.words()
	if i, found := t.find(ws, h); found {
		w = lockSlot(ws, i, h, t.stride)
	}
	return sh, h, w
}

// find returns the word index of the slot of ws holding h, or of the
// empty slot where h belongs. It reads the hash words atomically: it
// takes no lock, and a slot may be inserted or locked meanwhile.
func (t *table) find(ws []int64, h uint64) (int, bool) {
	n := t.slots(ws)
	if n == 0 {
		return 0, false
	}
	i := int((h & 0xffffffff) * uint64(n) >> 32)
	for {
		k := uint64(atomic.LoadInt64(&ws[i*t.stride])) &^ lockBit
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
// the keys whose state is full under the limits of lo (and their logs), so
// that there is room for one more key. It reports false when the shard is
// at its cap with no key to drop. sh.mu is held; the slots of the old
// array are left locked, for good, once copied, and the new array is
// published when every slot is in it.
func (t *table) rebuild(sh *shard, lo *layout, now int64) bool {
	capN := t.maxShard
	if sh.n >= capN && now < sh.sweepAfter {
		return false
	}
	old := sh.words()
	live := 0
	for j := 0; j < len(old); j += t.stride {
		if k := uint64(atomic.LoadInt64(&old[j])) &^ lockBit; k != 0 {
			w := lockSlot(old, j, k, t.stride)
			if !lo.full(w, &sh.rings, now) {
				live++
			}
			unlockSlot(w, k)
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
	if sh.sketch != nil && sh.sketch.idle(lo, now) {
		sh.sketch = nil
		t.press.sketchDropped()
	}
	// Every slot of the old array is locked for good, so that the states
	// copied are the last; decisions on them wait for the new array. A
	// decision between the count above and here may have made a key live.
	live = 0
	for j := 0; j < len(old); j += t.stride {
		if k := uint64(atomic.LoadInt64(&old[j])) &^ lockBit; k != 0 {
			if w := lockSlot(old, j, k, t.stride); !lo.full(w, &sh.rings, now) {
				live++
			}
		}
	}
	size := max(2*(live+1), 16)
	if limit := capN + capN/4 + 1; size > limit && limit > live+1 {
		size = limit
	}
	rs := rings{press: sh.rings.press}
	words := make([]int64, size*t.stride)
	sh.n = 0
	for j := 0; j < len(old); j += t.stride {
		w := old[j : j+t.stride]
		k := uint64(atomic.LoadInt64(&w[0])) &^ lockBit // locked above, for good
		if k == 0 {
			continue
		}
		if lo.full(w, &sh.rings, now) {
			lo.freeRings(w, &sh.rings)
			continue
		}
		lo.moveRings(w, &sh.rings, &rs)
		i, _ := t.find(words, k)
		copy(words[i+1:i+t.stride], w[1:])
		words[i] = int64(k)
		sh.n++
	}
	sh.rings = rs
	sh.arr.Store(&words)
	return live < capN
}

// The sketch. The table calls it; it calls down into the log rings and
// the window arithmetic, nothing else.

// A sketch counts the keys that a shard at its key cap has no room for, in
// the manner of a count-min sketch with conservative update: sketchRows
// rows of cells, each cell a key's state under every limit of the set. A
// key maps to one cell per row, by its hash (seeded per table, so clients
// cannot aim for a cell). Its state is read as the least-used of its cells
// (the earliest bucket, the lowest counts), and a request it admits raises
// each of its cells to at least the key's new state, never lower.
//
// Every cell therefore stays at least as used as each key that maps to it,
// and a key's estimate is at least its own use: a collision can only make
// limiting stricter, never looser. A flood of F new keys raises each cell
// by about F/width per window, so a newcomer is disturbed in proportion to
// the flood spread over the cells, not limited together with the flood as
// one client.
//
// A sliding window log has no room in a cell for its entries: there it is
// counted as the counts of the current window and the one before, which
// admit a request only if the log would (see takeLogPair).
type sketch struct {
	width   int     // cells per row
	stride  int     // words per cell
	cells   []int64 // sketchRows x width cells
	scratch []int64 // the slot of the key being decided: its estimate

	estimates int64 // the decisions made in the sketch, for tests
}

// sketchRows is the number of cells a key maps to.
const sketchRows = 2

// sketchWidth returns the cells per row of a shard with a key cap of
// maxShard: a quarter of the cap, at least 64 and at most 65536.
func sketchWidth(maxShard int) int { return min(max(64, maxShard/4), 1<<16) }

// newSketch returns the sketch of a shard with a key cap of maxShard for
// the limits of lo.
func newSketch(lo *layout, maxShard int) *sketch {
	width, stride := sketchWidth(maxShard), lo.cellOffs[len(lo.ps)]
	return &sketch{
		width:   width,
		stride:  stride,
		cells:   make([]int64, sketchRows*width*stride),
		scratch: make([]int64, lo.stride()),
	}
}

// cell returns the cell of key hash h in row r.
func (sk *sketch) cell(r int, h uint64) []int64 {
	x := uint32(h)
	if r > 0 {
		x = uint32((h * 0x9e3779b97f4a7c15) >> 32)
	}
	i := (r*sk.width + int(uint64(x)*uint64(sk.width)>>32)) * sk.stride
	return sk.cells[i : i+sk.stride]
}

// estimate writes to the sketch's scratch slot the state of key hash h at
// time now under the limits of lo, the least used of its cells under each
// limit, and returns it. A log's word in the slot is its counts, packed
// (takeLogPair).
func (sk *sketch) estimate(lo *layout, h uint64, now int64) []int64 {
	w := sk.scratch
	w[0] = int64(h)
	sk.estimates++
	for i := range lo.ps {
		p, st := &lo.ps[i], w[lo.offs[i]:lo.offs[i+1]]
		a := sk.cell(0, h)[lo.cellOffs[i]:lo.cellOffs[i+1]]
		b := sk.cell(1, h)[lo.cellOffs[i]:lo.cellOffs[i+1]]
		switch {
		case p.Block:
		case p.Emission != 0:
			st[0] = min(a[0], b[0])
		default:
			win := floorDiv(now+p.shift, p.Period)
			ac, ap := roll(a, win)
			bc, bp := roll(b, win)
			packed := pack(min(ac, bc), min(ap, bp))
			if p.Algorithm == SlidingWindowLog {
				st[0] = packed
			} else {
				st[0], st[1] = win, packed
			}
		}
	}
	return w
}

// settle raises each cell of key hash h to at least the key's state in
// the scratch slot, after a decision at time now under the limits of lo
// counted it there.
func (sk *sketch) settle(lo *layout, h uint64, now int64) {
	w := sk.scratch
	for r := range sketchRows {
		cell := sk.cell(r, h)
		for i := range lo.ps {
			p, st, x := &lo.ps[i], w[lo.offs[i]:lo.offs[i+1]], cell[lo.cellOffs[i]:lo.cellOffs[i+1]]
			switch {
			case p.Block:
			case p.Emission != 0:
				x[0] = max(x[0], st[0])
			default:
				win := floorDiv(now+p.shift, p.Period)
				var cur, prev int64
				if p.Algorithm == SlidingWindowLog {
					cur, prev = unpack(st[0])
				} else {
					cur, prev = roll(st, win)
				}
				xc, xp := roll(x, win)
				x[0], x[1] = win, pack(max(xc, cur), max(xp, prev))
			}
		}
	}
}

// seed starts the slot w of key hash h, newly tracked, from the key's
// estimate in the sketch, so that a key that was counted there keeps what
// it used. A log starts with the counts of its two windows as two entries
// that expire no earlier than the requests they stand for: the previous
// window's at the start of the current one, the current one's now; its
// ring goes to rs, the shard's.
func (sk *sketch) seed(lo *layout, rs *rings, h uint64, now int64, w []int64) {
	est := sk.estimate(lo, h, now)
	for i := range lo.ps {
		p := &lo.ps[i]
		switch {
		case p.Block:
		case p.Algorithm == SlidingWindowLog:
			// A log never holds more than its count: keep the current
			// window's requests first (they expire last), then what of
			// the previous window's fits. The key's own log, never over
			// the count, is no fuller at any later time.
			cur, prev := unpack(est[lo.offs[i]])
			cur = min(cur, p.Count)
			prev = min(prev, p.Count-cur)
			if cur+prev == 0 {
				continue
			}
			r := rs.get(w[lo.offs[i]]) // the key's, empty: acquire made it
			if prev > 0 {
				r.push(floorDiv(now+p.shift, p.Period)*p.Period-p.shift, prev, p.Count, rs.press)
			}
			if cur > 0 {
				r.push(now, cur, p.Count, rs.press)
			}
		default:
			copy(w[lo.offs[i]:lo.offs[i+1]], est[lo.offs[i]:lo.offs[i+1]])
		}
	}
}

// idle reports whether every cell is back to full capacity at time now
// under the limits of lo, so that the sketch can be dropped without
// changing any decision.
func (sk *sketch) idle(lo *layout, now int64) bool {
	for j := 0; j < len(sk.cells); j += sk.stride {
		cell := sk.cells[j : j+sk.stride]
		for i := range lo.ps {
			p, x := &lo.ps[i], cell[lo.cellOffs[i]:lo.cellOffs[i+1]]
			switch {
			case p.Block:
			case p.Emission != 0:
				if x[0] > now {
					return false
				}
			default:
				cur, prev := roll(x, floorDiv(now+p.shift, p.Period))
				if cur != 0 || prev != 0 {
					return false
				}
			}
		}
	}
	return true
}

// The layout: where the state of each limit of a set lies in the
// memory store: in a slot of the table and in a cell of the sketch. It
// calls down into the algorithms and the log rings.

// A layout is where the state of each limit of a set lies: in a slot of
// the table, after the key's hash, and in a cell of the sketch. The
// functions of the table and the sketch that read a key's state take the
// layout of the limits they read it with: the deciding counter's, or, to
// tell whether a key can be dropped, the table's latest.
type layout struct {
	ps       []Params
	offs     []int // limit i's words are slot[offs[i]:offs[i+1]]; word 0 is the key's hash
	cellOffs []int // limit i's words are cell[cellOffs[i]:cellOffs[i+1]] in a sketch
	logs     bool  // a sliding window log that keeps state is among the limits
	windows  bool  // a fixed window or sliding window counter that keeps state is among them
}

// newLayout returns the layout of the limits ps.
func newLayout(ps []Params) layout {
	lo := layout{ps: ps, offs: make([]int, len(ps)+1), cellOffs: cellOffsets(ps)}
	lo.offs[0] = 1 // word 0 is the key's hash
	for i := range ps {
		lo.offs[i+1] = lo.offs[i] + ps[i].width()
		lo.logs = lo.logs || ps[i].Algorithm == SlidingWindowLog && !ps[i].Block
		lo.windows = lo.windows || ps[i].width() == 2
	}
	return lo
}

// clamp returns the time to decide slot w at: now, or, when a window of
// the slot is later than now's (a decision read the clock after this one
// and took the slot first), the start of that window, so that a window
// never rolls back.
func (lo *layout) clamp(w []int64, now int64) int64 {
	if !lo.windows {
		return now
	}
	for i := range lo.ps {
		p := &lo.ps[i]
		if p.width() != 2 {
			continue
		}
		// The start of the slot's window, which now precedes exactly when
		// the slot's window is later than now's.
		if start := w[lo.offs[i]]*p.Period - p.shift; now < start {
			now = start
		}
	}
	return now
}

// stride returns the words of a slot.
func (lo *layout) stride() int { return lo.offs[len(lo.ps)] }

// full reports whether slot w is back to full capacity under every limit.
func (lo *layout) full(w []int64, rs *rings, now int64) bool {
	for i := range lo.ps {
		if !lo.ps[i].full(w[lo.offs[i]:lo.offs[i+1]], rs, now) {
			return false
		}
	}
	return true
}

// logCharge returns what the logs of a new key are charged: one empty
// ring per log.
func (lo *layout) logCharge() int64 {
	n := int64(0)
	for i := range lo.ps {
		if p := &lo.ps[i]; p.Algorithm == SlidingWindowLog && !p.Block {
			n += ringBytes + entryBytes*minEntries
		}
	}
	return n
}

// freeRings gives back the charges of the logs of slot w, whose key is
// dropped.
func (lo *layout) freeRings(w []int64, rs *rings) {
	for i := range lo.ps {
		if p := &lo.ps[i]; p.Algorithm == SlidingWindowLog && !p.Block {
			if r := rs.get(w[lo.offs[i]]); r != nil {
				rs.press.free(ringCharge(r))
			}
		}
	}
}

// moveRings moves the logs of slot w from one ring list to another,
// rewriting the slot's references.
func (lo *layout) moveRings(w []int64, from, to *rings) {
	for i := range lo.ps {
		if p := &lo.ps[i]; p.Algorithm == SlidingWindowLog && !p.Block {
			if r := from.get(w[lo.offs[i]]); r != nil {
				w[lo.offs[i]] = to.add(r)
			}
		}
	}
}

// cellOffsets returns where limit i's words are in a sketch cell,
// cell[offs[i]:offs[i+1]]: a bucket's one word, and two words for the
// windows and for a log (the window's index and its packed counts).
func cellOffsets(ps []Params) []int {
	offs := make([]int, len(ps)+1)
	for i := range ps {
		w := 0
		switch {
		case ps[i].Block:
		case ps[i].Emission != 0:
			w = 1
		default:
			w = 2
		}
		offs[i+1] = offs[i] + w
	}
	return offs
}

// The sliding window logs: the ring of
// each key's log, kept per shard and referred to by the key's state word.
// The log algorithm (takeLog), the table (eviction) and the sketch (a key
// it seeds) use them; they call nothing.

// rings holds the logs of one shard's keys; a key's state word is the
// index of its log plus one (0: none yet). press holds the budget the
// logs are charged to (nil: none, for the store's tests of the ring).
type rings struct {
	list  []*logRing
	press *pressure
}

func (rs *rings) get(ref int64) *logRing {
	if ref == 0 {
		return nil
	}
	return rs.list[ref-1]
}

func (rs *rings) add(r *logRing) int64 {
	rs.list = append(rs.list, r)
	return int64(len(rs.list))
}

// logRing is the state of a sliding window log: the admitted requests
// still inside the window, oldest first, in a ring, one entry per request
// (the requests of one instant share an entry), so that its memory is
// bounded by requests, not by their costs: a request of cost 2^31-1 is one
// entry. The costs are kept only once a request costs more than 1.
type logRing struct {
	ts    []int64 // the entries' times
	costs []int32 // the entries' costs; nil while every entry costs 1
	head  int
	n     int   // entries
	used  int64 // the sum of their costs
}

func (r *logRing) at(i int) int64 { return r.ts[(r.head+i)%len(r.ts)] }

func (r *logRing) cost(i int) int64 {
	if r.costs == nil {
		return 1
	}
	return int64(r.costs[(r.head+i)%len(r.ts)])
}

// expiring returns the time of the entry whose expiry brings the cost
// logged down by at least need (need <= used).
func (r *logRing) expiring(need int64) int64 {
	if r.costs == nil {
		return r.at(int(need - 1))
	}
	for i := 0; ; i++ {
		if need -= r.cost(i); need <= 0 || i == r.n-1 {
			return r.at(i)
		}
	}
}

// expire drops the entries that are out of the window ending at now.
func (r *logRing) expire(now, period int64) {
	for r.n > 0 && r.ts[r.head] <= now-period {
		r.used -= r.cost(0)
		r.head = (r.head + 1) % len(r.ts)
		r.n--
	}
	if r.n == 0 {
		r.head, r.used = 0, 0
	}
}

// push logs a request of the given cost at time t, no earlier than the
// newest entry; limit bounds the entries, as it bounds their costs. A
// ring that is full and that the budget b does not let grow merges the
// request into its newest entry, moved to time t: its requests then expire
// with the newest of them, later than they would (stricter, never looser).
// The costs that merging needs are charged with the entries (entryBytes).
func (r *logRing) push(t, cost, limit int64, b *pressure) {
	if r.n > 0 && r.at(r.n-1) == t {
		r.setCost(r.n-1, r.cost(r.n-1)+cost)
		r.used += cost
		return
	}
	if r.n == len(r.ts) {
		size := min(max(2*len(r.ts), minEntries), int(limit))
		if r.n > 0 && !b.reserve(entryBytes*int64(max(size, minEntries)-max(len(r.ts), minEntries))) {
			r.ts[(r.head+r.n-1)%len(r.ts)] = t
			r.setCost(r.n-1, r.cost(r.n-1)+cost)
			r.used += cost
			return
		}
		ts := make([]int64, size)
		var costs []int32
		if r.costs != nil {
			costs = make([]int32, size)
		}
		for i := 0; i < r.n; i++ {
			ts[i] = r.at(i)
			if costs != nil {
				costs[i] = int32(r.cost(i))
			}
		}
		r.ts, r.costs, r.head = ts, costs, 0
	}
	r.n++
	r.ts[(r.head+r.n-1)%len(r.ts)] = t
	r.setCost(r.n-1, cost)
	r.used += cost
}

// setCost sets the cost of entry i, keeping costs from its first entry
// above 1.
func (r *logRing) setCost(i int, cost int64) {
	if r.costs == nil {
		if cost == 1 {
			return
		}
		r.costs = make([]int32, len(r.ts))
		for j := range r.costs {
			r.costs[j] = 1
		}
	}
	r.costs[(r.head+i)%len(r.ts)] = int32(cost)
}

// remove takes back cost logged at time t (a refund), from the newest
// entries of that instant, keeping the order of the others.
func (r *logRing) remove(t, cost int64) {
	for i := r.n - 1; i >= 0 && cost > 0; i-- {
		if r.at(i) != t {
			continue
		}
		take := min(cost, r.cost(i))
		cost -= take
		r.used -= take
		r.setCost(i, r.cost(i)-take)
	}
	out := 0
	for i := 0; i < r.n; i++ {
		if c := r.cost(i); c > 0 {
			r.ts[(r.head+out)%len(r.ts)] = r.at(i)
			if r.costs != nil {
				r.costs[(r.head+out)%len(r.ts)] = int32(c)
			}
			out++
		}
	}
	r.n = out
	if r.n == 0 {
		r.head, r.used = 0, 0
	}
}
