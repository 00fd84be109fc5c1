package concurrency

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/internal/episode"
)

// DefaultMaxKeys is the key cap of a MemoryStore whose MaxKeys is zero.
const DefaultMaxKeys = 1 << 16

// memoryShards is the number of lock shards of a MemoryStore.
const memoryShards = 32

// MemoryStore keeps leases in this process. It is the default store of a
// Limiter; its zero value is ready to use, and its fields, set before the
// first call, configure it.
//
// A key is kept as a 64-bit hash of the limiter's name and the key
// (seeded per store, so clients cannot aim for collisions), never as its
// text, beside its leases: 16 bytes each. A key whose last lease is
// released or has expired is deleted, so the store holds only keys with
// requests in flight, or with leases whose holders vanished within their
// TTL. Memory is bounded: at most MaxKeys keys, split between shards.
// When a shard is full, its expired leases are swept (at most once a
// second); a new key that still finds no room is what Overflow says:
// refused by default, with ErrFull, which the limiter refuses whatever
// its fail mode (middleware answers 503 with Retry-After), or admitted
// within an overflow of Overflow leases over the whole store, each key
// still held to its max. Keys already held are decided as ever. The store
// being full is logged once per episode: when a new key first finds no
// room, and when one finds room again.
type MemoryStore struct {
	// MaxKeys caps the keys held (default DefaultMaxKeys), enforced per
	// shard, each holding at most ceil(MaxKeys/32).
	MaxKeys int

	// Overflow is what the store does with a new key that finds its
	// shard full: 0 (the default) refuses it with ErrFull; a positive
	// number admits it while fewer than Overflow leases of such keys are
	// held over the whole store (16 bytes each, beside the key's), each
	// key still held to its max, and refuses the rest with ErrFull.
	Overflow int

	// Logger receives the episodes of a full store (default
	// slog.Default()).
	Logger *slog.Logger

	// Clock, when set, is read for the time instead of the system clock:
	// for tests that replay exact traces.
	Clock func() time.Time

	once     sync.Once
	err      error
	seed     maphash.Seed
	base     time.Time
	perShard int
	shards   [memoryShards]memoryShard
	over     overflow
	full     episode.Log // of new keys that found the store full
}

// overflow holds the leases of the keys a full store admitted within its
// Overflow: at most that many leases, over every shard.
type overflow struct {
	mu        sync.Mutex
	keys      map[uint64][]memoryLease
	leases    int          // held, over every key
	held      atomic.Int64 // keys held, read without the lock
	nextSweep int64
}

type memoryShard struct {
	mu        sync.Mutex
	keys      map[uint64][]memoryLease
	free      [][]memoryLease // lease slices of deleted keys, for reuse
	nextSweep int64
	_         [40]byte // keep shards on their own cache lines
}

type memoryLease struct {
	id      uint64
	expires int64 // store time (ns since base) at which the lease ends
}

func (s *MemoryStore) init() {
	if s.MaxKeys < 0 {
		s.err = fmt.Errorf("ratekit: concurrency memory store: MaxKeys %d must not be negative", s.MaxKeys)
		return
	}
	if s.Overflow < 0 || s.Overflow > MaxSlots {
		s.err = fmt.Errorf("ratekit: concurrency memory store: Overflow %d must be between 0 (refuse) and %d leases", s.Overflow, MaxSlots)
		return
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.full.Now = s.Clock
	keys := s.MaxKeys
	if keys == 0 {
		keys = DefaultMaxKeys
	}
	s.perShard = (keys + memoryShards - 1) / memoryShards
	s.seed = maphash.MakeSeed()
	s.base = time.Now()
	if s.Clock != nil {
		s.base = s.Clock()
	}
	for i := range s.shards {
		s.shards[i].keys = map[uint64][]memoryLease{}
	}
	s.over.keys = map[uint64][]memoryLease{}
}

// now returns the store's time: nanoseconds since its first use, read
// through the monotonic clock (or the test clock).
func (s *MemoryStore) now() int64 {
	if s.Clock != nil {
		return int64(s.Clock().Sub(s.base))
	}
	return int64(time.Since(s.base))
}

// shard returns the shard and the hash of key under the limiter name.
func (s *MemoryStore) shard(name, key string) (*memoryShard, uint64, error) {
	s.once.Do(s.init)
	if s.err != nil {
		return nil, 0, s.err
	}
	h := maphash.String(s.seed, key) ^ maphash.String(s.seed, name)*0x9e3779b97f4a7c15
	return &s.shards[h%memoryShards], h, nil
}

// Acquire takes a slot of key under the limiter name; see Store.
func (s *MemoryStore) Acquire(_ context.Context, name, key string, id uint64, max int, ttl time.Duration) (int, bool, error) {
	if max < 1 || ttl <= 0 {
		return 0, false, fmt.Errorf("ratekit: concurrency memory store: max %d and ttl %s must be positive", max, ttl)
	}
	sh, h, err := s.shard(name, key)
	if err != nil {
		return 0, false, err
	}
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls, ok := sh.keys[h]
	if !ok {
		// A key in the overflow stays there until its leases end, so
		// that its leases are never split between two places.
		if s.over.held.Load() > 0 {
			if held, admitted, found, err := s.over.acquire(h, id, max, ttl, now, s.Overflow, false); found {
				return held, admitted, err
			}
		}
		if len(sh.keys) >= s.perShard && !sh.sweep(now, s.perShard) {
			s.isFull()
			if s.Overflow == 0 {
				return 0, false, ErrFull
			}
			held, admitted, _, err := s.over.acquire(h, id, max, ttl, now, s.Overflow, true)
			return held, admitted, err
		}
		if end, n := s.full.Recover(); end {
			s.Logger.Info("ratekit: concurrency memory store has room for new keys again", "new_keys_while_full", n)
		}
		ls = sh.alloc()
	}
	ls = expire(ls, now)
	for i := range ls {
		if ls[i].id == id {
			ls[i].expires = now + int64(ttl)
			sh.keys[h] = ls
			return len(ls), true, nil
		}
	}
	if len(ls) >= max {
		sh.set(h, ls)
		return len(ls), false, nil
	}
	ls = append(ls, memoryLease{id: id, expires: now + int64(ttl)})
	sh.keys[h] = ls
	return len(ls), true, nil
}

// Release gives back the lease id of key under the limiter name; see
// Store.
func (s *MemoryStore) Release(_ context.Context, name, key string, id uint64) error {
	sh, h, err := s.shard(name, key)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls, ok := sh.keys[h]
	if !ok {
		if s.over.held.Load() > 0 {
			s.over.release(h, id)
		}
		return nil
	}
	for i := range ls {
		if ls[i].id == id {
			last := len(ls) - 1
			ls[i] = ls[last]
			ls = ls[:last]
			break
		}
	}
	sh.set(h, ls)
	return nil
}

// Renew extends the lease id of key under the limiter name by ttl from
// now, if it is held; see Store.
func (s *MemoryStore) Renew(_ context.Context, name, key string, id uint64, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("ratekit: concurrency memory store: ttl %s must be positive", ttl)
	}
	sh, h, err := s.shard(name, key)
	if err != nil {
		return false, err
	}
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls, ok := sh.keys[h]
	if !ok {
		if s.over.held.Load() > 0 {
			return s.over.renew(h, id, ttl, now), nil
		}
		return false, nil
	}
	ls = expire(ls, now)
	held := false
	for i := range ls {
		if ls[i].id == id {
			ls[i].expires, held = now+int64(ttl), true
			break
		}
	}
	sh.set(h, ls)
	return held, nil
}

// expire removes the leases that ended at or before now.
func expire(ls []memoryLease, now int64) []memoryLease {
	for i := 0; i < len(ls); {
		if ls[i].expires <= now {
			last := len(ls) - 1
			ls[i] = ls[last]
			ls = ls[:last]
			continue
		}
		i++
	}
	return ls
}

// set stores the leases of key h, or deletes the key when none is left.
func (sh *memoryShard) set(h uint64, ls []memoryLease) {
	if len(ls) > 0 {
		sh.keys[h] = ls
		return
	}
	delete(sh.keys, h)
	if cap(ls) > 0 && cap(ls) <= 64 && len(sh.free) < 64 {
		sh.free = append(sh.free, ls)
	}
}

// alloc returns an empty lease slice, reused when one is free.
func (sh *memoryShard) alloc() []memoryLease {
	if n := len(sh.free); n > 0 {
		ls := sh.free[n-1]
		sh.free[n-1] = nil
		sh.free = sh.free[:n-1]
		return ls
	}
	return make([]memoryLease, 0, 2)
}

// sweep removes the expired leases of the full shard, at most once a
// second, and reports whether a key has room now.
func (sh *memoryShard) sweep(now int64, limit int) bool {
	if now < sh.nextSweep {
		return false
	}
	sh.nextSweep = now + int64(time.Second)
	for h, ls := range sh.keys {
		sh.set(h, expire(ls, now))
	}
	return len(sh.keys) < limit
}

// isFull counts a new key that found the store full, and logs the start
// of an episode.
func (s *MemoryStore) isFull() {
	if start, _ := s.full.Fail(); start {
		what := "new keys refused"
		if s.Overflow > 0 {
			what = "new keys admitted within an overflow of " + strconv.Itoa(s.Overflow) + " leases, then refused"
		}
		s.Logger.Warn("ratekit: concurrency memory store full: "+what, "max_keys", s.perShard*memoryShards, "overflow", s.Overflow)
	}
}

// acquire is Acquire for key hash h in the overflow, which holds at most
// budget leases. With add false, a key it does not hold is left alone
// (found false); with add true, it is added if there is room. ErrFull
// says there is none. The caller holds the key's shard.
func (o *overflow) acquire(h, id uint64, max int, ttl time.Duration, now int64, budget int, add bool) (held int, admitted bool, found bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ls, ok := o.keys[h]
	if !ok && !add {
		return 0, false, false, nil
	}
	if o.leases >= budget && now >= o.nextSweep {
		o.nextSweep = now + int64(time.Second)
		for k, ls := range o.keys {
			o.set(k, expire(ls, now), len(ls))
		}
		if ls, ok = o.keys[h]; !ok && !add {
			return 0, false, false, nil
		}
	}
	n := len(ls)
	ls = expire(ls, now)
	for i := range ls {
		if ls[i].id == id {
			ls[i].expires = now + int64(ttl)
			o.set(h, ls, n)
			return len(ls), true, true, nil
		}
	}
	switch {
	case len(ls) >= max:
		o.set(h, ls, n)
		return len(ls), false, true, nil
	case o.leases-(n-len(ls)) >= budget:
		o.set(h, ls, n)
		return 0, false, ok, ErrFull
	}
	o.set(h, append(ls, memoryLease{id: id, expires: now + int64(ttl)}), n)
	return len(ls) + 1, true, true, nil
}

// set stores the leases of key h, which held n before, or deletes the key
// when none is left, keeping the counts.
func (o *overflow) set(h uint64, ls []memoryLease, n int) {
	_, had := o.keys[h]
	o.leases += len(ls) - n
	switch {
	case len(ls) > 0:
		o.keys[h] = ls
		if !had {
			o.held.Add(1)
		}
	case had:
		delete(o.keys, h)
		o.held.Add(-1)
	}
}

// release removes the lease id of key hash h, if the overflow holds it.
func (o *overflow) release(h, id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ls := o.keys[h]
	for i := range ls {
		if ls[i].id == id {
			n := len(ls)
			ls[i] = ls[n-1]
			o.set(h, ls[:n-1], n)
			return
		}
	}
}

// renew extends the lease id of key hash h by ttl from now, if the
// overflow holds it, and reports whether it did.
func (o *overflow) renew(h, id uint64, ttl time.Duration, now int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ls, ok := o.keys[h]
	if !ok {
		return false
	}
	n := len(ls)
	ls = expire(ls, now)
	held := false
	for i := range ls {
		if ls[i].id == id {
			ls[i].expires, held = now+int64(ttl), true
		}
	}
	o.set(h, ls, n)
	return held
}
