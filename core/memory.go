package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// MemoryOption configures a memory store.
type MemoryOption func(*memoryConfig)

type memoryConfig struct {
	clock   Clock
	maxKeys int
	shards  int
}

// WithClock makes the store read the time from c instead of the system
// clock. It is meant for tests that replay exact traces.
func WithClock(c Clock) MemoryOption { return func(m *memoryConfig) { m.clock = c } }

// WithMaxKeys caps the number of keys each limit tracks (default
// DefaultMaxKeys). The cap is enforced per shard, each holding at most
// ceil(n/shards) keys, so a shard can reach its share a little before the
// whole table reaches n, and a cap below the shard count is rounded up to
// one key per shard. See MemoryStore for what happens at the cap.
func WithMaxKeys(n int) MemoryOption { return func(m *memoryConfig) { m.maxKeys = n } }

// WithShards sets the number of lock shards per limit, rounded up to a
// power of two (default 64).
func WithShards(n int) MemoryOption { return func(m *memoryConfig) { m.shards = n } }

// DefaultMaxKeys is the default cap on the keys one limit tracks in a
// memory store.
const DefaultMaxKeys = 1 << 20

// MemoryStore keeps counters in this process. It is the default store.
//
// Each limit has its own table, split into shards with a lock each. A key
// is stored as a 64-bit hash of its text (seeded per table, so clients
// cannot aim for collisions), never as the text itself, so a long key costs
// no more than a short one; a token or leaky bucket costs 16 bytes of slot
// per key, about 25 bytes per tracked key with the table's free slots. A
// decision on a key already tracked allocates nothing.
//
// Memory is bounded. When a shard must grow, keys whose state is back to
// full capacity are dropped first: forgetting them changes no decision.
// Keys still counting are never evicted, because forgetting a client that
// is over its limit would hand it a fresh budget. When a shard holds its
// share of the key cap (WithMaxKeys) and every key in it is still
// counting, new keys in that shard share a single overflow state until
// room frees up: such clients are limited together, as one client, so a
// flood of new keys gains nothing and cannot displace the keys being
// limited.
type MemoryStore struct {
	cfg    memoryConfig
	base   time.Time
	baseNs int64

	mu     sync.Mutex
	tables map[string]any
}

// NewMemoryStore returns an empty memory store.
func NewMemoryStore(opts ...MemoryOption) (*MemoryStore, error) {
	cfg := memoryConfig{maxKeys: DefaultMaxKeys, shards: 64}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxKeys <= 0 {
		return nil, fmt.Errorf("ratekit: memory store: max keys %d must be positive", cfg.maxKeys)
	}
	if cfg.shards <= 0 || cfg.shards > 1<<16 {
		return nil, fmt.Errorf("ratekit: memory store: shards %d must be between 1 and 65536", cfg.shards)
	}
	n := 1
	for n < cfg.shards {
		n <<= 1
	}
	cfg.shards = n
	now := time.Now()
	return &MemoryStore{cfg: cfg, base: now, baseNs: now.UnixNano(), tables: map[string]any{}}, nil
}

// now returns the time in nanoseconds since the Unix epoch. The system
// clock is read through the monotonic clock, anchored at the store's
// creation, so a wall-clock step does not disturb the counters.
func (s *MemoryStore) now() int64 {
	if s.cfg.clock != nil {
		return s.cfg.clock.Now().UnixNano()
	}
	return s.baseNs + int64(time.Since(s.base))
}

// Bind returns the counter of limit l, sharing state with every earlier
// binding of a limit with the same ID.
func (s *MemoryStore) Bind(l Limit) (Counter, error) {
	p, err := compile(l)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		tb := bindTable[int64](s, p)
		if tb.emission != 0 && tb.emission != p.emission {
			tb.rescale(s.now(), tb.emission, p)
		}
		tb.emission = p.emission
		return &memCounter[int64]{s, tb, p}, nil
	case FixedWindow, SlidingWindowCounter:
		return &memCounter[windowState]{s, bindTable[windowState](s, p), p}, nil
	default: // SlidingWindowLog
		return &memCounter[*logRing]{s, bindTable[*logRing](s, p), p}, nil
	}
}

// bindTable returns the table of limit p, creating it on first use. The
// caller holds s.mu.
func bindTable[S any](s *MemoryStore, p *policy) *table[S] {
	tb, _ := s.tables[p.id].(*table[S])
	if tb == nil {
		tb = newTable[S](s.cfg)
		s.tables[p.id] = tb
	}
	return tb
}

// Len returns the number of keys the store tracks, over all limits,
// including keys whose state is full and not yet dropped.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tables {
		n += t.(interface{ size() int }).size()
	}
	return n
}

// TrackedKeys returns the number of keys the store tracks for limit l (by
// its ID, name and algorithm), including keys whose state is full and not
// yet dropped; 0 for a limit never bound or invalid. It takes each shard's
// lock in turn: call it at metrics-scrape time, not per request.
func (s *MemoryStore) TrackedKeys(l Limit) int {
	p, err := compile(l)
	if err != nil {
		return 0
	}
	s.mu.Lock()
	t := s.tables[p.id]
	s.mu.Unlock()
	if t == nil {
		return 0
	}
	return t.(interface{ size() int }).size()
}

// memCounter is a Counter over one table of a memory store. The state S
// of a key is int64 for the buckets, windowState for the window counters
// and *logRing for the log; the zero S is the state of a key never seen.
type memCounter[S any] struct {
	store *MemoryStore
	t     *table[S]
	p     *policy
}

// take runs the algorithm on state st. The calls are static, so that d
// does not escape.
func (c *memCounter[S]) take(st *S, now, cost int64, commit bool, d *Decision) {
	switch s := any(st).(type) {
	case *int64:
		c.p.takeBucket(s, now, cost, commit, d)
	case *windowState:
		if c.p.Algorithm == FixedWindow {
			c.p.takeFixed(s, now, cost, commit, d)
		} else {
			c.p.takeCounter(s, now, cost, commit, d)
		}
	case **logRing:
		c.p.takeLog(s, now, cost, commit, d)
	}
}

// full reports whether state st is back to full capacity, so that the key
// can be forgotten without changing any decision.
func (c *memCounter[S]) full(st *S, now int64) bool {
	switch s := any(st).(type) {
	case *int64:
		return c.p.bucketFull(s, now)
	case *windowState:
		if c.p.Algorithm == FixedWindow {
			return c.p.fixedFull(s, now)
		}
		return c.p.counterFull(s, now)
	case **logRing:
		return c.p.logFull(s, now)
	}
	return false
}

// Take decides and counts a request; see Counter.
func (c *memCounter[S]) Take(ctx context.Context, key string, cost int) (Decision, error) {
	var d Decision
	return d, c.decide(key, cost, true, &d)
}

// Peek decides a request without counting it; see Counter.
func (c *memCounter[S]) Peek(ctx context.Context, key string, cost int) (Decision, error) {
	var d Decision
	return d, c.decide(key, cost, false, &d)
}

func (c *memCounter[S]) decide(key string, cost int, commit bool, d *Decision) error {
	if cost < 0 || int64(cost) > c.p.capacity {
		return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, cost, c.p.capacity)
	}
	now := c.store.now()
	sh, st := c.t.acquire(key, commit, now, c)
	if st == nil {
		var fresh S
		c.take(&fresh, now, int64(cost), false, d)
	} else {
		c.take(st, now, int64(cost), commit, d)
	}
	sh.mu.Unlock()
	return nil
}

// table is an open-addressing hash table of per-key states, split into
// shards. Slots hold the 64-bit hash of the key (0 marks an empty slot)
// and the state; collisions are resolved by linear probing.
type table[S any] struct {
	seed     maphash.Seed
	shards   []shard[S]
	shift    uint // hash >> shift selects the shard
	maxShard int  // the key cap of one shard

	// emission is the refill interval the states of a bucket table were
	// written with (guarded by MemoryStore.mu).
	emission int64
}

type shard[S any] struct {
	// A cache line of padding before the fields keeps the fields of two
	// neighbouring shards on different cache lines, whatever the size of S.
	_ [64]byte

	mu    sync.Mutex
	slots []slot[S]
	n     int // used slots

	// While every key of a full shard is still counting, new keys share
	// overflow.
	overflow    S
	hasOverflow bool
	// No new sweep of a full shard before this time.
	sweepAfter int64
}

type slot[S any] struct {
	key uint64
	val S
}

func newTable[S any](cfg memoryConfig) *table[S] {
	bitsN := uint(0)
	for 1<<bitsN < cfg.shards {
		bitsN++
	}
	max := (cfg.maxKeys + cfg.shards - 1) / cfg.shards
	return &table[S]{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard[S], cfg.shards),
		shift:    64 - bitsN,
		maxShard: max,
	}
}

func (t *table[S]) size() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// rescale converts the states of a bucket table written with refill
// interval from to the policy p, keeping each key's level in tokens (a
// client that used 3 tokens of 5 has 3 left of 6 when the limit rises),
// capped at the new burst, so the new times never exceed p.tau.
func (t *table[S]) rescale(now, from int64, p *policy) {
	convert := func(tat *int64) {
		if *tat <= now {
			return
		}
		if (*tat-now)/from >= p.burst {
			*tat = now + p.tau // at least as empty as the new bucket can be
			return
		}
		*tat = now + mulDivCeil(*tat-now, p.emission, from) // < p.tau
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for j := range sh.slots {
			if s := &sh.slots[j]; s.key != 0 {
				if tat, ok := any(&s.val).(*int64); ok {
					convert(tat)
				}
			}
		}
		if tat, ok := any(&sh.overflow).(*int64); ok {
			convert(tat)
		}
		sh.mu.Unlock()
	}
}

// fullSweepCooldown is how long a shard at its key cap waits between two
// sweeps that found no key to drop.
const fullSweepCooldown = int64(100 * time.Millisecond)

// acquire locks the shard of key and returns it with the key's state.
// With insert, a key not yet tracked is inserted with the zero state — or,
// when the shard is at its cap with every key still counting, the shard's
// overflow state is returned. Without insert, the state of an untracked
// key is nil. The caller unlocks sh.mu.
func (t *table[S]) acquire(key string, insert bool, now int64, c *memCounter[S]) (sh *shard[S], st *S) {
	h := maphash.String(t.seed, key)
	if h == 0 {
		h = 1
	}
	if t.shift == 64 {
		sh = &t.shards[0]
	} else {
		sh = &t.shards[h>>t.shift]
	}
	sh.mu.Lock()
	i, found := sh.find(h)
	if found {
		return sh, &sh.slots[i].val
	}
	if !insert {
		if sh.hasOverflow && sh.n >= t.maxShard {
			return sh, &sh.overflow // where Take would count it
		}
		return sh, nil
	}
	if sh.n >= t.maxShard || sh.n+1 > len(sh.slots)*4/5 {
		if !sh.rebuild(c, now, t.maxShard) {
			// Every key is counting and the shard is at its cap.
			if !sh.hasOverflow {
				var zero S
				sh.overflow, sh.hasOverflow = zero, true
			}
			return sh, &sh.overflow
		}
		i, _ = sh.find(h)
	}
	sh.slots[i].key = h
	sh.n++
	return sh, &sh.slots[i].val
}

// find returns the slot holding h, or the empty slot where h belongs.
func (sh *shard[S]) find(h uint64) (int, bool) {
	n := len(sh.slots)
	if n == 0 {
		return 0, false
	}
	i := int((h & 0xffffffff) * uint64(n) >> 32)
	for {
		k := sh.slots[i].key
		if k == h {
			return i, true
		}
		if k == 0 {
			return i, false
		}
		if i++; i == n {
			i = 0
		}
	}
}

// rebuild rehashes the shard into a table sized for its live keys, dropping
// the keys whose state is full, so that there is room for one more key. It
// reports false when the shard is at its cap with no key to drop.
func (sh *shard[S]) rebuild(c *memCounter[S], now int64, max int) bool {
	if sh.n >= max && now < sh.sweepAfter {
		return false
	}
	live := 0
	for i := range sh.slots {
		if s := &sh.slots[i]; s.key != 0 && !c.full(&s.val, now) {
			live++
		}
	}
	if live >= max {
		sh.sweepAfter = now + fullSweepCooldown
		return false
	}
	if sh.n >= max && live > max-max/8 {
		// Little room was freed: let the next sweep wait, so that a stream
		// of new keys at the cap does not rehash the shard every time.
		sh.sweepAfter = now + fullSweepCooldown
	}
	if sh.hasOverflow && c.full(&sh.overflow, now) {
		var zero S
		sh.overflow, sh.hasOverflow = zero, false
	}
	size := 2 * (live + 1)
	if size < 16 {
		size = 16
	}
	if limit := max + max/4 + 1; size > limit && limit > live+1 {
		size = limit
	}
	old := sh.slots
	sh.slots = make([]slot[S], size)
	sh.n = 0
	for i := range old {
		if s := &old[i]; s.key != 0 && !c.full(&s.val, now) {
			j, _ := sh.find(s.key)
			sh.slots[j] = *s
			sh.n++
		}
	}
	return true
}
