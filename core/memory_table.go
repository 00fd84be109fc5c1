package core

import (
	"hash/maphash"
	"sync"
	"time"
)

// This file holds the memory store's table: the slots of the keys of one
// set of limits, split into shards with a lock each. The table finds and
// inserts keys and drops those back to full; it calls down into the
// sketch (for the keys a full shard has no room for), the grants and the
// layout (to tell a shard or a key that can be dropped), never up into
// the counter.

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
	lo      layout   // the limits of the last Bind, which tell when a key is full
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
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		ok := (sh.sketch == nil || sh.sketch.idle(&t.lo, now)) && !sh.granting(now)
		for j := 0; ok && sh.n > 0 && j < len(sh.words); j += t.stride {
			ok = sh.words[j] == 0 || t.lo.full(sh.words[j:j+t.stride], &sh.rings, now)
		}
		sh.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
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
// from. lo is the layout of the caller's limits. The caller unlocks
// sh.mu.
func (t *table) acquire(key string, insert bool, now int64, lo *layout) (sh *shard, w []int64, h uint64, over bool, at int64) {
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
			return sh, sh.sketch.estimate(lo, h, now), h, true, now // what Take would start from
		}
		return sh, nil, h, false, now
	}
	if sh.n >= t.maxShard || sh.n+1 > t.slots(sh)*4/5 {
		if !t.rebuild(sh, lo, now) {
			// Every key is counting and the shard is at its cap.
			if sh.sketch == nil {
				sh.sketch = newSketch(lo, t.maxShard)
			}
			return sh, sh.sketch.estimate(lo, h, now), h, true, now
		}
		i, _ = t.find(sh, h)
	}
	sh.words[i] = int64(h)
	sh.n++
	w = sh.words[i : i+t.stride]
	if sh.sketch != nil {
		sh.sketch.seed(lo, &sh.rings, h, now, w)
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
// the keys whose state is full under the limits of lo (and their logs), so
// that there is room for one more key. It reports false when the shard is
// at its cap with no key to drop.
func (t *table) rebuild(sh *shard, lo *layout, now int64) bool {
	capN := t.maxShard
	if sh.n >= capN && now < sh.sweepAfter {
		return false
	}
	live := 0
	for j := 0; j < len(sh.words); j += t.stride {
		if sh.words[j] != 0 && !lo.full(sh.words[j:j+t.stride], &sh.rings, now) {
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
	if sh.sketch != nil && sh.sketch.idle(lo, now) {
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
		if w[0] == 0 || lo.full(w, &sh.rings, now) {
			continue
		}
		lo.moveRings(w, &sh.rings, &rs)
		k, _ := t.find(sh, uint64(w[0]))
		copy(sh.words[k:k+t.stride], w)
		sh.n++
	}
	sh.rings = rs
	return true
}
