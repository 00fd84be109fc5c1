// Package benchmarks compares ratekit's token bucket with the rate limiters
// Go users would pick instead, on the same workloads and with the same
// quota. It is a module of its own so that the libraries compared are
// dependencies of the benchmarks only, never of ratekit.
//
// Every library is reached through a Taker that makes one decision the way
// the library's own middleware or documentation makes it, and the
// workloads (workload.go) drive every Taker alike:
//
//	go test ./benchmarks -run '^$' -bench Peers -benchtime 1s
//	go run ./benchmarks/cmd/compare            # the Markdown table
//
// TestTakersAdmitTheQuota checks that every Taker admits exactly the same
// requests on one key, so the comparison is between equals.
//
// Two more comparisons live here: the middlewares of the web frameworks,
// ratekit's adapters beside the limiters each framework's users pick
// (frameworks.go), and ratekit's Redis store beside the Redis-backed
// limiters (redis.go):
//
//	go run ./benchmarks/cmd/compare -frameworks
//	go test ./benchmarks -run '^$' -bench Redis -benchtime 2000x
package benchmarks

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	"github.com/labstack/echo/v4/middleware"
	"github.com/ratekit/ratekit/core"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// A Quota is what every library is configured with: a bucket of Burst
// requests, one of which comes back every Interval. Token-bucket libraries
// take it as it is. The window libraries (sethvargo/go-limiter, ulule,
// httprate) have no burst apart from their count, so they get Burst
// requests per window of Burst x Interval: the same capacity and the same
// long-run rate.
type Quota struct {
	Burst    int
	Interval time.Duration
}

// window is the period of the equivalent window limit.
func (q Quota) window() time.Duration { return time.Duration(q.Burst) * q.Interval }

// FastQuota admits everything a benchmark sends, so that every library is
// measured on the path nearly all requests take, the admission: a burst of
// 100M (a hot key sees fewer than 70M requests in a 2s benchmark), with
// one request back every 10s, so that a key of ratekit's store, once
// touched, stays counting for the whole run and is never dropped as full
// and inserted again (which would measure insertions, not decisions).
var FastQuota = Quota{Burst: 100_000_000, Interval: 10 * time.Second}

// SlowQuota is 10 requests per minute: the quota of the memory benchmark,
// under which every key stays counting and none may be dropped, and of
// the test that every library admits the same requests.
var SlowQuota = Quota{Burst: 10, Interval: 6 * time.Second}

// A Taker decides requests against one library's limiter.
type Taker interface {
	// Take decides one request of cost 1 for key and reports whether it
	// is admitted. An error of the library counts as a rejection.
	Take(key string) bool
	// Close releases what the limiter holds (background goroutines).
	Close()
}

// A Library is one of the rate limiters compared.
type Library struct {
	Name   string // short name, without slashes: a sub-benchmark name
	Module string // Go module path
	// Setup tells how the library is configured, for the table's notes.
	Setup string
	New   func(Quota) Taker
}

// Ratekit is ratekit's token bucket over its memory store.
var Ratekit = Library{
	Name:   "ratekit",
	Module: "github.com/ratekit/ratekit",
	Setup:  "core.NewLimiter(Limit{Algorithm: TokenBucket, Rate: 1 per interval, Burst}, WithStore(&MemoryStore{MaxKeys: 2<<20})), lim.Take(ctx, key, 1)",
	New:    newRatekit,
}

// Peers are the libraries ratekit is compared with, in table order.
var Peers = []Library{
	{
		Name:   "x-time-rate",
		Module: "golang.org/x/time/rate",
		Setup:  "map[string]*rate.Limiter guarded by one sync.Mutex, limiter created on first use, then lim.Allow() (the common pattern; rate.Every(interval), burst)",
		New:    newXRate,
	},
	{
		Name:   "x-time-rate-syncmap",
		Module: "golang.org/x/time/rate",
		Setup:  "sync.Map of *rate.Limiter, Load then LoadOrStore on first use, then lim.Allow() (the lock-free lookup; rate.Every(interval), burst)",
		New:    newXRateSyncMap,
	},
	{
		Name:   "sethvargo-go-limiter",
		Module: "github.com/sethvargo/go-limiter",
		Setup:  "memorystore.New(&Config{Tokens: burst, Interval: burst x interval}), store.Take(ctx, key)",
		New:    newSethvargo,
	},
	{
		Name:   "ulule-limiter",
		Module: "github.com/ulule/limiter/v3",
		Setup:  "limiter.New(memory.NewStore(), Rate{Limit: burst, Period: burst x interval}), lim.Get(ctx, key)",
		New:    newUlule,
	},
	{
		Name:   "throttled",
		Module: "github.com/throttled/throttled/v2",
		Setup:  "NewGCRARateLimiterCtx(memstore.NewCtx(0), RateQuota{PerDuration(1, interval), MaxBurst: burst-1}), RateLimitCtx(ctx, key, 1); maxKeys 0 is its plain map, faster and smaller than its LRU",
		New:    newThrottled,
	},
	{
		Name:   "go-chi-httprate",
		Module: "github.com/go-chi/httprate",
		Setup:  "NewLocalLimitCounter(burst x interval), one decision as RateLimiter.OnLimit makes it (its mutex, Get, the sliding-window estimate, IncrementBy), without the response headers",
		New:    newHTTPRate,
	},
	{
		Name:   "echo",
		Module: "github.com/labstack/echo/v4",
		Setup:  "middleware.NewRateLimiterMemoryStoreWithConfig({Rate: rate.Every(interval), Burst: burst, ExpiresIn: 1h}), store.Allow(key); ExpiresIn is raised from 3m so that no sweep of stale visitors runs during a benchmark",
		New:    newEcho,
	},
}

// Libraries returns ratekit followed by the peers.
func Libraries() []Library { return append([]Library{Ratekit}, Peers...) }

// ratekit

type ratekitTaker struct {
	lim   *core.Limiter
	store *core.MemoryStore
	limit core.Limit
}

// ratekitMaxKeys is above the 1M keys of the largest workload, so that
// every key gets a slot of its own (the default cap, 1<<20, leaves a shard
// little room above its expected share).
const ratekitMaxKeys = 2 << 20

func newRatekit(q Quota) Taker {
	st := &core.MemoryStore{MaxKeys: ratekitMaxKeys}
	limit := core.Limit{
		Algorithm: core.TokenBucket,
		Rate:      core.Rate{Count: 1, Period: q.Interval},
		Burst:     q.Burst,
	}
	lim := core.Must(core.NewLimiter(limit, core.WithStore(st)))
	return &ratekitTaker{lim, st, limit}
}

// Len is the number of keys the store tracks; the workloads check that
// every key they touched is still there.
func (t *ratekitTaker) Len() int { return t.store.TrackedKeys(t.limit) }

func (t *ratekitTaker) Take(key string) bool {
	d, err := t.lim.Take(context.Background(), key, 1)
	return err == nil && d.Allowed
}

func (t *ratekitTaker) Close() {}

// golang.org/x/time/rate: the pattern of its users, one limiter per key in
// a map behind a mutex. The map lock is released before Allow, which locks
// the key's own limiter.

type xrateTaker struct {
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newXRate(q Quota) Taker {
	return &xrateTaker{keys: map[string]*rate.Limiter{}, limit: rate.Every(q.Interval), burst: q.Burst}
}

func (t *xrateTaker) Take(key string) bool {
	t.mu.Lock()
	l := t.keys[key]
	if l == nil {
		l = rate.NewLimiter(t.limit, t.burst)
		t.keys[key] = l
	}
	t.mu.Unlock()
	return l.Allow()
}

func (t *xrateTaker) Close() {}

// golang.org/x/time/rate behind a sync.Map: lookups of known keys take no
// lock, the fastest way to hold one limiter per key with x/time/rate.

type xrateSyncMapTaker struct {
	keys  sync.Map // string -> *rate.Limiter
	limit rate.Limit
	burst int
}

func newXRateSyncMap(q Quota) Taker {
	return &xrateSyncMapTaker{limit: rate.Every(q.Interval), burst: q.Burst}
}

func (t *xrateSyncMapTaker) Take(key string) bool {
	v, ok := t.keys.Load(key)
	if !ok {
		v, _ = t.keys.LoadOrStore(key, rate.NewLimiter(t.limit, t.burst))
	}
	return v.(*rate.Limiter).Allow()
}

func (t *xrateSyncMapTaker) Close() {}

// github.com/sethvargo/go-limiter

type sethvargoTaker struct{ st golimiter.Store }

func newSethvargo(q Quota) Taker {
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.Burst), Interval: q.window()})
	if err != nil {
		panic(err)
	}
	return &sethvargoTaker{st}
}

func (t *sethvargoTaker) Take(key string) bool {
	_, _, _, ok, err := t.st.Take(context.Background(), key)
	return err == nil && ok
}

func (t *sethvargoTaker) Close() { _ = t.st.Close(context.Background()) }

// github.com/ulule/limiter/v3

type ululeTaker struct{ lim *ulule.Limiter }

func newUlule(q Quota) Taker {
	r := ulule.Rate{Period: q.window(), Limit: int64(q.Burst)}
	return &ululeTaker{ulule.New(ululememory.NewStore(), r)}
}

func (t *ululeTaker) Take(key string) bool {
	c, err := t.lim.Get(context.Background(), key)
	return err == nil && !c.Reached
}

// Close does nothing: the store's cleaner goroutine stops when the store
// is collected.
func (t *ululeTaker) Close() {}

// github.com/throttled/throttled/v2

type throttledTaker struct{ rl *throttled.GCRARateLimiterCtx }

func newThrottled(q Quota) Taker {
	st, err := memstore.NewCtx(0)
	if err != nil {
		panic(err)
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(1, q.Interval),
		MaxBurst: q.Burst - 1, // throttled admits MaxBurst+1 at once
	})
	if err != nil {
		panic(err)
	}
	return &throttledTaker{rl}
}

func (t *throttledTaker) Take(key string) bool {
	limited, _, err := t.rl.RateLimitCtx(context.Background(), key, 1)
	return err == nil && !limited
}

func (t *throttledTaker) Close() {}

// github.com/go-chi/httprate: the local counter, driven as its
// RateLimiter drives it for one request. The limiter's windows start at
// its creation instant rather than on wall-clock boundaries (offset), it
// holds its own mutex across the read and the increment, and it estimates
// the count of the sliding window from the current and previous windows,
// rounded to the nearest integer.

type httprateTaker struct {
	mu      sync.Mutex
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
	offset  time.Duration
}

func newHTTPRate(q Quota) Taker {
	w := q.window()
	start := time.Now().UTC()
	return newHTTPRateCounter(httprate.NewLocalLimitCounter(w), q.Burst, w, start.Sub(start.Truncate(w)))
}

// newHTTPRateCounter returns the decisions of httprate's RateLimiter on
// counter, with limit requests per window, the windows starting offset
// after the wall clock's.
func newHTTPRateCounter(counter httprate.LimitCounter, limit int, window, offset time.Duration) *httprateTaker {
	return &httprateTaker{counter: counter, limit: limit, window: window, offset: offset}
}

func (t *httprateTaker) windowOf(at time.Time) time.Time {
	return at.Add(-t.offset).Truncate(t.window).Add(t.offset)
}

func (t *httprateTaker) Take(key string) bool {
	cur := t.windowOf(time.Now().UTC())
	t.mu.Lock()
	// The estimate reads the clock again, as httprate's calculateRate does.
	now := time.Now().UTC()
	w := t.windowOf(now)
	inCur, inPrev, err := t.counter.Get(key, w, w.Add(-t.window))
	if err != nil {
		t.mu.Unlock()
		return false
	}
	left := float64(t.window - now.Sub(w))
	estimate := int(math.Round(float64(inPrev)*left/float64(t.window) + float64(inCur)))
	if estimate+1 > t.limit {
		t.mu.Unlock()
		return false
	}
	err = t.counter.IncrementBy(key, cur, 1)
	t.mu.Unlock()
	return err == nil
}

func (t *httprateTaker) Close() {}

// github.com/labstack/echo/v4 middleware.RateLimiterMemoryStore

type echoTaker struct {
	st *middleware.RateLimiterMemoryStore
}

func newEcho(q Quota) Taker {
	return &echoTaker{middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
		Rate:      rate.Every(q.Interval),
		Burst:     q.Burst,
		ExpiresIn: time.Hour,
	})}
}

func (t *echoTaker) Take(key string) bool {
	ok, err := t.st.Allow(key)
	return err == nil && ok
}

func (t *echoTaker) Close() {}
