// Package overlimit keeps a process from asking its store again about a
// client that the store has just rejected.
//
// When a decision says that a key is over its limit until some time T (the
// rejection's RetryAfter), the Cache remembers the decision, and until T it
// decides that key itself: the same rejection, with the same numbers, its
// RetryAfter and ResetAfter counting down as time passes from the moment
// the store's answer came back, so the middleware writes the same headers
// and the same Retry-After as the store would have. (Counted from the
// moment the call started, they would come out short by the store's
// latency, and a client that waited the advertised time would be refused
// again.)
// A client hammering far above its limit then costs a shared store (Redis)
// about one call per retry interval per process instead of one per request:
// for a window, one per window; for a bucket, one per emission interval.
// Admissions always come from the store, so the cache never admits a
// request the store would reject; it only answers rejections the store has
// just given.
//
//	cache, err := overlimit.New(redisStore)
//	...
//	lim, err := core.NewLimiter(limit, core.WithStore(cache))
//
// A cached rejection of a request of cost c answers requests of cost c or
// more, which the store would reject too (with the numbers of cost c: a
// costlier request may in truth have to wait longer). A request of a
// smaller cost, and one of cost 0, goes to the store. Take and Peek use
// the cache, and both fill it with the rejections they get (a rejection
// counts nothing, so a peek's is as good as a take's); Refund and Inspect
// always go to the store, so an operator sees the store's truth.
//
// Caveats:
//
//   - The cache is per process. A Reset or Grant through this Cache (the
//     limiter built on it) drops the key's cached rejection at once; a
//     Reset or Grant made through another process, or a refund (TakeAll
//     giving back what one of its checks counted), takes effect here once
//     the cached rejection ends, at most its RetryAfter later.
//   - Of a limiter's limits, the cached entry lasts as long as the longest
//     rejection. A limit that rejected with a shorter RetryAfter is
//     reported, once its own time has passed, as admitting (RetryAfter 0,
//     its Remaining as cached); the limits that admitted keep their cached
//     Remaining. The limiter's decision, the longest rejection, is the
//     store's.
//   - TakeAll asks its checks in order. The checks before a rejecting one
//     still count and refund the request in the store; the cache saves the
//     rejecting check's call and the peeks of the checks after it, when
//     those are over their limits too.
//   - Memory is bounded (WithMaxKeys): the entries are split into shards,
//     each holding at most its share. A full shard first drops its expired
//     entries; if it is still full, the new rejection is not cached, and
//     that key's requests keep going to the store, which decides them as
//     it always does. A decision never depends on the cache holding an
//     entry.
//   - A cached rejection counts down from the moment the store's answer
//     came back, not from the moment the store decided, which is not
//     known here: it may last the return leg of the call longer than the
//     store's own, never shorter, and a request in that last moment is
//     rejected where the store might admit it.
//   - A decision that came with a store error is never cached. A key with
//     a cached rejection stays rejected until the entry ends even if the
//     store fails meanwhile, whatever the limiter's fail mode.
//
// A Cache is safe for concurrent use, holds no lock while it calls the
// store, and answers from its cache without allocating.
package overlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DefaultMaxKeys is the bound on cached keys of a Cache without
// WithMaxKeys.
const DefaultMaxKeys = 100_000

// maxShards is the most shards a Cache has; minShardKeys is the fewest
// keys a shard holds before the cache uses fewer shards.
const (
	maxShards    = 64
	minShardKeys = 16
)

// An Option configures a Cache.
type Option func(*Cache) error

// WithMaxKeys bounds the keys the Cache holds cached rejections for, over
// all the limiters bound in it (default DefaultMaxKeys); n must be at
// least 1. An entry holds the key and one core.Decision per limit of its
// limiter: about 170 bytes for a limiter of one limit and 80 more per
// further limit, 17 MB at the default bound.
func WithMaxKeys(n int) Option {
	return func(c *Cache) error {
		if n < 1 {
			return errors.New("overlimit: WithMaxKeys: the bound must be at least 1")
		}
		c.maxKeys = n
		return nil
	}
}

// WithClock makes the Cache read the time from now instead of the system
// clock, for tests: give it the clock of the store it wraps.
func WithClock(now func() time.Time) Option {
	return func(c *Cache) error {
		if now == nil {
			return errors.New("overlimit: WithClock(nil)")
		}
		c.now = now
		return nil
	}
}

// A Cache is a core.Store that wraps another and answers, for a while,
// the rejections that store gave (see the package documentation). It is
// safe for concurrent use.
type Cache struct {
	inner   core.Store
	now     func() time.Time
	base    time.Time // time 0 of the entries' times
	maxKeys int
	seed    maphash.Seed
	shards  []shard
	mask    uint64
	ids     atomic.Uint64 // numbers the counters Bind returns
}

// New wraps store s.
func New(s core.Store, opts ...Option) (*Cache, error) {
	if s == nil {
		return nil, errors.New("overlimit: New needs a store")
	}
	c := &Cache{inner: s, now: time.Now, maxKeys: DefaultMaxKeys, seed: maphash.MakeSeed()}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	n := 1
	for n < maxShards && c.maxKeys/(2*n) >= minShardKeys {
		n *= 2
	}
	c.shards = make([]shard, n)
	c.mask = uint64(n - 1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.cap = c.maxKeys / n
		if i < c.maxKeys%n {
			sh.cap++
		}
		sh.m = make(map[entryKey]entry)
		sh.next = math.MaxInt64
	}
	c.base = c.now()
	return c, nil
}

// Bind binds limits in the wrapped store and returns a counter that
// answers the rejections it has seen from the cache, until their
// RetryAfter ends; see core.Store.
func (c *Cache) Bind(limits []core.Limit) (core.Counter, error) {
	inner, err := c.inner.Bind(limits)
	if err != nil {
		return nil, err
	}
	return &counter{cache: c, inner: inner, id: c.ids.Add(1), capacity: capacity(limits)}, nil
}

// capacity returns the largest cost that every limit can take, which the
// cache may answer: a larger one is the store's error to report. It is 0,
// so that the cache answers nothing, for limits the store took but whose
// numbers are not known here.
func capacity(limits []core.Limit) int {
	n := math.MaxInt
	for _, l := range limits {
		p, err := l.Params(time.Nanosecond)
		if err != nil {
			return 0
		}
		if !p.Block {
			n = min(n, int(p.Capacity))
		}
	}
	return n
}

// clock returns the time and the same time in nanoseconds since c.base,
// the entries' scale.
func (c *Cache) clock() (time.Time, int64) {
	now := c.now()
	return now, int64(now.Sub(c.base))
}

func (c *Cache) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

// size returns the number of entries held, expired ones included.
func (c *Cache) size() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// An entryKey names one client key of one counter (one limiter's limits).
type entryKey struct {
	counter uint64
	key     string
}

// An entry is a cached rejection.
type entry struct {
	until int64 // when it ends, in nanoseconds since Cache.base
	at    int64 // when the store's answer came back, likewise
	cost  int   // the cost the store rejected
	ds    []core.Decision
}

// A shard holds a share of the entries under a lock of its own.
type shard struct {
	mu  sync.Mutex
	m   map[entryKey]entry
	cap int   // the most entries it holds
	gen int64 // counts the drops of Reset and Grant
	// next is at most the earliest end of an entry held: until then, none
	// has expired and a full shard need not look for one.
	next int64
	_    [64]byte // keeps shards' locks off each other's cache lines
}

// lookup fills ds from key's live entry for a request of the given cost
// at time now and reports true; otherwise it reports false, with the
// shard's generation, which the caller gives back to put. An expired entry
// met is deleted.
func (sh *shard) lookup(k entryKey, now int64, cost int, ds []core.Decision) (hit bool, gen int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[k]
	switch {
	case !ok:
	case now >= e.until:
		delete(sh.m, k)
	case cost >= e.cost && len(ds) >= len(e.ds):
		elapsed := time.Duration(max(now-e.at, 0))
		for i := range e.ds {
			d := e.ds[i]
			d.RetryAfter = max(d.RetryAfter-elapsed, 0)
			d.ResetAfter = max(d.ResetAfter-elapsed, 0)
			d.Delay = max(d.Delay-elapsed, 0)
			if !d.Allowed && d.RetryAfter == 0 {
				// A shorter rejection than the entry's, now over: this
				// limit alone would admit the request.
				d.Allowed = true
			}
			ds[i] = d
		}
		return true, 0
	}
	return false, sh.gen
}

// longestRetry returns the longest RetryAfter of the rejections among ds,
// 0 when none rejects.
func longestRetry(ds []core.Decision) time.Duration {
	retry := time.Duration(0)
	for i := range ds {
		if !ds[i].Allowed {
			retry = max(retry, ds[i].RetryAfter)
		}
	}
	return retry
}

// put caches the decisions ds of a request of the given cost, whose
// longest rejection is retry (positive), answered by the store at time
// now, unless the key was reset or granted since gen was read, or the
// shard is full.
func (sh *shard) put(k entryKey, now int64, cost int, ds []core.Decision, retry time.Duration, gen int64) {
	until := now + int64(retry)
	if until < now {
		until = math.MaxInt64
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen {
		return // a Reset or Grant since the decision: it may be stale
	}
	e, ok := sh.m[k]
	if !ok && len(sh.m) >= sh.cap {
		if now < sh.next || !sh.sweep(now) {
			return
		}
	}
	if len(e.ds) != len(ds) {
		e.ds = make([]core.Decision, len(ds))
	}
	copy(e.ds, ds)
	e.until, e.at, e.cost = until, now, cost
	if !ok {
		k.key = strings.Clone(k.key) // the caller's key may share a larger buffer
	}
	sh.m[k] = e
	sh.next = min(sh.next, until)
}

// sweep deletes the expired entries, sets next to the earliest end of
// those left and reports whether there is room for one more.
func (sh *shard) sweep(now int64) bool {
	next := int64(math.MaxInt64)
	for k, e := range sh.m {
		if now >= e.until {
			delete(sh.m, k)
		} else {
			next = min(next, e.until)
		}
	}
	sh.next = next
	return len(sh.m) < sh.cap
}

// drop deletes key's entry and makes the decisions under way not cache
// theirs.
func (sh *shard) drop(k entryKey) {
	sh.mu.Lock()
	delete(sh.m, k)
	sh.gen++
	sh.mu.Unlock()
}

// counter is the core.Counter of a limiter's limits bound in a Cache.
type counter struct {
	cache    *Cache
	inner    core.Counter
	id       uint64
	capacity int // the largest cost the cache answers
}

// Take answers a request from key's cached rejection when there is one
// for this cost, and otherwise asks the store and caches its rejection;
// see core.Counter.
func (c *counter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	if cost <= 0 || cost > c.capacity {
		return c.inner.Take(ctx, key, cost, ds)
	}
	now, t := c.cache.clock()
	sh, k := c.cache.shard(key), entryKey{c.id, key}
	hit, gen := sh.lookup(k, t, cost, ds)
	if hit {
		return now, nil
	}
	at, err := c.inner.Take(ctx, key, cost, ds)
	if err == nil {
		c.file(sh, k, cost, ds, gen)
	}
	return at, err
}

// file caches the store's decisions ds on key k, if one is a rejection.
// The entry counts down from the time the store's answer came back, read
// after the call: the store decided at some moment of the call, and its
// RetryAfter counts from then, so a time read before the call (the
// lookup's) would shorten every cached RetryAfter and ResetAfter by the
// call's latency, and a client that waited the cached Retry-After would
// be refused again. Counted from the answer's arrival, a cached answer is
// the store's own, as a client asking the store directly would have
// received it; it is never short, and at most the return leg of the call
// long.
func (c *counter) file(sh *shard, k entryKey, cost int, ds []core.Decision, gen int64) {
	retry := longestRetry(ds)
	if retry <= 0 {
		return
	}
	_, now := c.cache.clock()
	sh.put(k, now, cost, ds, retry, gen)
}

// Peek is Take without counting: answered from the cache like Take, and
// its rejections cached like Take's; see core.Counter.
func (c *counter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	if cost <= 0 || cost > c.capacity {
		return c.inner.Peek(ctx, key, cost, ds)
	}
	_, t := c.cache.clock()
	sh, k := c.cache.shard(key), entryKey{c.id, key}
	hit, gen := sh.lookup(k, t, cost, ds)
	if hit {
		return nil
	}
	err := c.inner.Peek(ctx, key, cost, ds)
	if err == nil {
		c.file(sh, k, cost, ds, gen)
	}
	return err
}

// Refund passes the refund to the store; a cached rejection of the key
// stays until it ends. See core.Counter.
func (c *counter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	return c.inner.Refund(ctx, key, cost, at, ds)
}

// Inspect asks the store, never the cache; see core.Counter.
func (c *counter) Inspect(ctx context.Context, key string, ds []core.Decision, gs []core.Grant) (bool, error) {
	return c.inner.Inspect(ctx, key, ds, gs)
}

// Reset drops key's cached rejection and resets the key in the store; see
// core.Counter.
func (c *counter) Reset(ctx context.Context, key string) (bool, error) {
	sh, k := c.cache.shard(key), entryKey{c.id, key}
	sh.drop(k)
	found, err := c.inner.Reset(ctx, key)
	sh.drop(k) // a rejection cached while the reset ran is stale
	return found, err
}

// Grant drops key's cached rejection and grants in the store; see
// core.Counter.
func (c *counter) Grant(ctx context.Context, key string, amount int, ttl time.Duration) error {
	sh, k := c.cache.shard(key), entryKey{c.id, key}
	sh.drop(k)
	err := c.inner.Grant(ctx, key, amount, ttl)
	sh.drop(k)
	return err
}
