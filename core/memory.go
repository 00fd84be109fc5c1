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
// DefaultMaxKeys). See MemoryStore for what happens at the cap.
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
	t := s.tables[p.id]
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		tb, _ := t.(*table[int64])
		if tb == nil {
			tb = newTable[int64](s.cfg)
			s.tables[p.id] = tb
		} else if tb.emission != p.emission {
			tb.rescale(s.now(), tb.emission, p.emission)
		}
		tb.emission = p.emission
		return &memCounter[int64]{s, tb, p, bucketAlgo{p}}, nil
	case FixedWindow:
		tb, _ := t.(*table[windowState])
		if tb == nil {
			tb = newTable[windowState](s.cfg)
			s.tables[p.id] = tb
		}
		return &memCounter[windowState]{s, tb, p, fixedAlgo{p}}, nil
	case SlidingWindowCounter:
		tb, _ := t.(*table[windowState])
		if tb == nil {
			tb = newTable[windowState](s.cfg)
			s.tables[p.id] = tb
		}
		return &memCounter[windowState]{s, tb, p, counterAlgo{p}}, nil
	default: // SlidingWindowLog
		tb, _ := t.(*table[*logRing])
		if tb == nil {
			tb = newTable[*logRing](s.cfg)
			s.tables[p.id] = tb
		}
		return &memCounter[*logRing]{s, tb, p, logAlgo{p}}, nil
	}
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

// algo is the arithmetic of one algorithm on its per-key state S.
type algo[S any] interface {
	init(now int64) S
	take(s *S, now, cost int64, commit bool) Decision
	full(s S, now int64) bool
}

type bucketAlgo struct{ p *policy }

func (a bucketAlgo) init(now int64) int64 { return now }
func (a bucketAlgo) take(s *int64, now, cost int64, commit bool) Decision {
	return a.p.takeBucket(s, now, cost, commit)
}
func (a bucketAlgo) full(s int64, now int64) bool { return a.p.bucketFull(s, now) }

type fixedAlgo struct{ p *policy }

func (a fixedAlgo) init(now int64) windowState { return windowState{win: floorDiv(now, a.p.period)} }
func (a fixedAlgo) take(s *windowState, now, cost int64, commit bool) Decision {
	return a.p.takeFixed(s, now, cost, commit)
}
func (a fixedAlgo) full(s windowState, now int64) bool { return a.p.fixedFull(s, now) }

type counterAlgo struct{ p *policy }

func (a counterAlgo) init(now int64) windowState {
	return windowState{win: floorDiv(now, a.p.period)}
}
func (a counterAlgo) take(s *windowState, now, cost int64, commit bool) Decision {
	return a.p.takeCounter(s, now, cost, commit)
}
func (a counterAlgo) full(s windowState, now int64) bool { return a.p.counterFull(s, now) }

type logAlgo struct{ p *policy }

func (a logAlgo) init(int64) *logRing { return &logRing{} }
func (a logAlgo) take(s **logRing, now, cost int64, commit bool) Decision {
	return a.p.takeLog(*s, now, cost, commit)
}
func (a logAlgo) full(s *logRing, now int64) bool { return a.p.logFull(s, now) }

// memCounter is a Counter over one table of a memory store.
type memCounter[S any] struct {
	store *MemoryStore
	t     *table[S]
	p     *policy
	a     algo[S]
}

func (c *memCounter[S]) Take(ctx context.Context, key string, cost int) (Decision, error) {
	return c.decide(key, cost, true)
}

func (c *memCounter[S]) Peek(ctx context.Context, key string, cost int) (Decision, error) {
	return c.decide(key, cost, false)
}

func (c *memCounter[S]) decide(key string, cost int, commit bool) (Decision, error) {
	if cost < 0 || int64(cost) > c.p.burst {
		return Decision{}, fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, cost, c.p.burst)
	}
	return c.t.decide(c.a, key, c.store.now(), int64(cost), commit), nil
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
	mu    sync.Mutex
	slots []slot[S]
	n     int // used slots

	// While every key of a full shard is still counting, new keys share
	// overflow.
	overflow    S
	hasOverflow bool
	// No new sweep of a full shard before this time.
	sweepAfter int64

	_ [40]byte // keep shards on separate cache lines
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

// rescale converts the states of a bucket table to a new refill interval,
// keeping each key's level in tokens: a client that used 3 tokens of 5 has
// 3 left of 6 when the limit rises.
func (t *table[S]) rescale(now, from, to int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for j := range sh.slots {
			if s := &sh.slots[j]; s.key != 0 {
				if tat, ok := any(&s.val).(*int64); ok && *tat > now {
					*tat = now + mulDivCeil(*tat-now, to, from)
				}
			}
		}
		if tat, ok := any(&sh.overflow).(*int64); ok && *tat > now {
			*tat = now + mulDivCeil(*tat-now, to, from)
		}
		sh.mu.Unlock()
	}
}

// fullSweepCooldown is how long a shard at its key cap waits between two
// sweeps that found no key to drop.
const fullSweepCooldown = int64(100 * time.Millisecond)

func (t *table[S]) decide(a algo[S], key string, now, cost int64, commit bool) Decision {
	h := maphash.String(t.seed, key)
	if h == 0 {
		h = 1
	}
	var sh *shard[S]
	if t.shift == 64 {
		sh = &t.shards[0]
	} else {
		sh = &t.shards[h>>t.shift]
	}
	sh.mu.Lock()
	i, found := sh.find(h)
	if found {
		d := a.take(&sh.slots[i].val, now, cost, commit)
		sh.mu.Unlock()
		return d
	}
	st := a.init(now)
	if !commit {
		d := a.take(&st, now, cost, false)
		sh.mu.Unlock()
		return d
	}
	if sh.n >= t.maxShard || sh.n+1 > len(sh.slots)*4/5 {
		if !sh.rebuild(a, now, t.maxShard) {
			// Every key is counting and the shard is at its cap.
			if !sh.hasOverflow {
				sh.overflow, sh.hasOverflow = a.init(now), true
			}
			d := a.take(&sh.overflow, now, cost, true)
			sh.mu.Unlock()
			return d
		}
		i, _ = sh.find(h)
	}
	d := a.take(&st, now, cost, true)
	sh.slots[i] = slot[S]{key: h, val: st}
	sh.n++
	sh.mu.Unlock()
	return d
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
func (sh *shard[S]) rebuild(a algo[S], now int64, max int) bool {
	if sh.n >= max && now < sh.sweepAfter {
		return false
	}
	live := 0
	for i := range sh.slots {
		if s := &sh.slots[i]; s.key != 0 && !a.full(s.val, now) {
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
	if sh.hasOverflow && a.full(sh.overflow, now) {
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
		if s := &old[i]; s.key != 0 && !a.full(s.val, now) {
			j, _ := sh.find(s.key)
			sh.slots[j] = *s
			sh.n++
		}
	}
	return true
}
