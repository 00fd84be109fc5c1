package benchmarks

// The Redis comparison: ratekit's Redis store beside the Redis-backed
// limiters Go users would pick instead, every one on a go-redis client of
// its own, against a private redis-server that the benchmark starts on a
// free port of 127.0.0.1 (package redisstore/redistest; it never touches
// a Redis it did not start):
//
//	go test ./benchmarks -run '^$' -bench Redis -benchtime 2000x
//	go test ./benchmarks -run '^$' -bench Redis -benchtime 2000x -count 3 | go run ./benchmarks/cmd/compare -redis
//	go run ./benchmarks/cmd/compare -redis-run -redis-benchtime 3000x -count 3
//
// (the second prints the medians as Markdown tables; the third runs the
// benchmark in two setups, Redis and the client sharing the cores and
// each pinned to a core of its own, and prints both). BenchmarkRedisLone
// (lone_test.go) takes the lone decision apart. redis-server must
// be on PATH (apt-get install redis-server); without it the benchmark
// and its test are skipped, or fail when CI is set.
//
// BenchmarkRedis (redis_test.go) reports decisions/s, ns/op and allocs/op
// with 1, 8 and 64 goroutines, on one hot key and on 10k keys, and the
// Redis commands (cmds/decision, from INFO commandstats, the commands
// that scripts run included) and client round trips (roundtrips/decision)
// each decision costs, the CPU time of Redis and of the client per
// decision and the goroutines the client creates per decision. Every
// library is configured with FastQuota, so that every decision is an
// admission. TestRedisTakersAdmitTheLimit
// checks that every library admits exactly the same requests on one key.
//
// throttled's store for go-redis v9 (store/goredisstore.v9) is part of
// the throttled module already compared in memory, so it is here too.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// Metric units of BenchmarkRedis, besides DeniedMetric.
const (
	DecisionsPerSecond      = "decisions/s"
	CommandsPerDecision     = "cmds/decision"
	RoundTripsPerDecision   = "roundtrips/decision"
	ServerMicrosPerDecision = "server-us/decision"
	ClientMicrosPerDecision = "client-us/decision"
	GoroutinesPerDecision   = "goroutines/decision"
	ErrorsPerDecision       = "errors/op"
)

// A RedisTaker is a Taker whose decisions are made in Redis. A decision
// that fails counts as a rejection, and Errors tells how many failed.
type RedisTaker interface {
	Taker
	// Errors returns the number of failed decisions and the first error.
	Errors() (int64, error)
}

// A RedisLibrary is one of the Redis-backed rate limiters compared.
type RedisLibrary struct {
	Name   string // short name, without slashes: a sub-benchmark name
	Module string // Go module path
	// Setup tells how the library is configured, for the table's notes.
	Setup string
	// Options returns the options of the library's client for the Redis
	// at addr. Nil means go-redis's defaults: redis.Options{Addr: addr}.
	Options func(addr string) *redis.Options
	// New returns a Taker that decides with rdb, a client of its own.
	New func(rdb *redis.Client, q Quota) (RedisTaker, error)
}

// ClientOptions returns the options of lib's client for the Redis at
// addr.
func (lib RedisLibrary) ClientOptions(addr string) *redis.Options {
	if lib.Options != nil {
		return lib.Options(addr)
	}
	return &redis.Options{Addr: addr}
}

// RedisLibraries are ratekit's Redis store and the peers, in table order.
var RedisLibraries = []RedisLibrary{
	{
		Name:   "ratekit",
		Module: "github.com/ratekit/ratekit/redisstore",
		Setup: "core.NewLimiter(Limit{Algorithm: TokenBucket, Rate: 1 per interval, Burst}, WithStore(redisstore.New(rdb))), lim.Take(ctx, key, 1); " +
			"the client with ContextTimeoutEnabled, as redisstore's documentation asks (go-redis's defaults otherwise); each decision an FCALL of a Redis Function that reads TIME, " +
			"concurrent decisions sharing round trips and commands: one FCALL decides every decision that queued (WithInFlight, default 4 round trips in flight)",
		Options: func(addr string) *redis.Options { return &redis.Options{Addr: addr, ContextTimeoutEnabled: true} },
		New:     newRatekitRedis,
	},
	{
		Name:    "ratekit-fixed-window",
		Module:  "github.com/ratekit/ratekit/redisstore",
		Setup:   "ratekit as above with Limit{Algorithm: FixedWindow, Rate: burst per burst x interval (at most a day)}: the algorithm of ulule/limiter, one FCALL reading TIME and updating one integer key",
		Options: func(addr string) *redis.Options { return &redis.Options{Addr: addr, ContextTimeoutEnabled: true} },
		New:     newRatekitRedisWindow,
	},
	{
		Name:   "ratekit-default-options",
		Module: "github.com/ratekit/ratekit/redisstore",
		Setup:  "ratekit as above on a client with go-redis's default options, without ContextTimeoutEnabled: then every decision is a round trip of its own, run in a goroutine of its own to bound it by the store's timeout",
		New:    newRatekitRedis,
	},
	{
		Name:   "ulule-limiter",
		Module: "github.com/ulule/limiter/v3",
		Setup:  "limiter.New(drivers/store/redis.NewStore(rdb), Rate{Limit: burst, Period: burst x interval}), lim.Get(ctx, key); a fixed window, one EVALSHA (INCRBY, then PEXPIRE or PTTL)",
		New:    newUluleRedis,
	},
	{
		Name:   "go-redis-redis_rate",
		Module: "github.com/go-redis/redis_rate/v10",
		Setup:  "redis_rate.NewLimiter(rdb).Allow(ctx, key, Limit{Rate: 1, Period: interval, Burst: burst}); GCRA in one EVALSHA",
		New:    newRedisRate,
	},
	{
		Name:   "go-chi-httprate-redis",
		Module: "github.com/go-chi/httprate-redis",
		Setup: "httprateredis.NewCounter(&Config{Client: rdb, WindowLength: burst x interval}) driven as httprate's RateLimiter.OnLimit drives a counter (its mutex held across MGET and a MULTI/INCRBY/EXPIRE/EXEC pipeline, the sliding-window estimate), without the response headers; " +
			"its fallback to a local counter, on by default, counts as a failure",
		New: newHTTPRateRedis,
	},
	{
		Name:   "throttled",
		Module: "github.com/throttled/throttled/v2",
		Setup:  "NewGCRARateLimiterCtx(store/goredisstore.v9.NewCtx(rdb, \"throttled:\"), RateQuota{PerDuration(1, interval), MaxBurst: burst-1}), RateLimitCtx(ctx, key, 1); GCRA with a TIME+GET pipeline, then an EVAL (compare and swap, retried up to 10 times) or SETNX and EXPIRE",
		New:    newThrottledRedis,
	},
}

// errs counts the failed decisions of a RedisTaker.
type errs struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error
}

// fail records err, if not nil, and reports whether it was.
func (e *errs) fail(err error) bool {
	if err == nil {
		return false
	}
	if e.n.Add(1) == 1 {
		e.mu.Lock()
		e.first = err
		e.mu.Unlock()
	}
	return true
}

func (e *errs) Errors() (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n.Load(), e.first
}

// ratekit

type ratekitRedisTaker struct {
	errs
	lim *core.Limiter
}

func newRatekitRedis(rdb *redis.Client, q Quota) (RedisTaker, error) {
	return newRatekitRedisLimit(rdb, core.Limit{
		Name:      "bench",
		Algorithm: core.TokenBucket,
		Rate:      core.Rate{Count: 1, Period: q.Interval},
		Burst:     q.Burst,
	})
}

// maxWindow bounds the fixed window of ratekit-fixed-window: FastQuota's
// window (over 31 years) exceeds core.MaxPeriod, and a day of 100M
// requests is never exhausted by a benchmark either.
const maxWindow = 24 * time.Hour

func newRatekitRedisWindow(rdb *redis.Client, q Quota) (RedisTaker, error) {
	return newRatekitRedisLimit(rdb, core.Limit{
		Name:      "bench-window",
		Algorithm: core.FixedWindow,
		Rate:      core.Rate{Count: q.Burst, Period: min(q.window(), maxWindow)},
	})
}

func newRatekitRedisLimit(rdb *redis.Client, l core.Limit) (RedisTaker, error) {
	st, err := redisstore.New(rdb)
	if err != nil {
		return nil, err
	}
	lim, err := core.NewLimiter(l, core.WithStore(st))
	if err != nil {
		return nil, err
	}
	return &ratekitRedisTaker{lim: lim}, nil
}

func (t *ratekitRedisTaker) Take(key string) bool {
	d, err := t.lim.Take(context.Background(), key, 1)
	return !t.fail(err) && d.Allowed
}

func (t *ratekitRedisTaker) Close() {}

// github.com/ulule/limiter/v3, drivers/store/redis

type ululeRedisTaker struct {
	errs
	lim *ulule.Limiter
}

func newUluleRedis(rdb *redis.Client, q Quota) (RedisTaker, error) {
	st, err := ululeredis.NewStore(rdb)
	if err != nil {
		return nil, err
	}
	return &ululeRedisTaker{lim: ulule.New(st, ulule.Rate{Period: q.window(), Limit: int64(q.Burst)})}, nil
}

func (t *ululeRedisTaker) Take(key string) bool {
	c, err := t.lim.Get(context.Background(), key)
	return !t.fail(err) && !c.Reached
}

func (t *ululeRedisTaker) Close() {}

// github.com/go-redis/redis_rate/v10

type redisRateTaker struct {
	errs
	lim   *redis_rate.Limiter
	limit redis_rate.Limit
}

func newRedisRate(rdb *redis.Client, q Quota) (RedisTaker, error) {
	return &redisRateTaker{
		lim:   redis_rate.NewLimiter(rdb),
		limit: redis_rate.Limit{Rate: 1, Period: q.Interval, Burst: q.Burst},
	}, nil
}

func (t *redisRateTaker) Take(key string) bool {
	res, err := t.lim.Allow(context.Background(), key, t.limit)
	return !t.fail(err) && res.Allowed > 0
}

func (t *redisRateTaker) Close() {}

// github.com/go-chi/httprate-redis: its counter under the decision of
// httprate's RateLimiter (httprateTaker, peers.go), with windows aligned
// to the wall clock, as httprate aligns them for counters other than its
// local one.

type httprateRedisTaker struct {
	errs
	*httprateTaker
	counter interface{ IsFallbackActivated() bool }
}

func newHTTPRateRedis(rdb *redis.Client, q Quota) (RedisTaker, error) {
	t := &httprateRedisTaker{}
	c := httprateredis.NewCounter(&httprateredis.Config{
		Client:       rdb,
		WindowLength: q.window(),
		OnError:      func(err error) { t.fail(err) },
	})
	c.Config(q.Burst, q.window())
	t.httprateTaker = newHTTPRateCounter(c, q.Burst, q.window(), 0)
	t.counter = c
	return t, nil
}

var errFallback = errors.New("httprate-redis: decided by the local fallback counter, not Redis")

func (t *httprateRedisTaker) Take(key string) bool {
	ok := t.httprateTaker.Take(key)
	if t.counter.IsFallbackActivated() {
		t.fail(errFallback)
		return false
	}
	return ok
}

// github.com/throttled/throttled/v2, store/goredisstore.v9

type throttledRedisTaker struct {
	errs
	rl *throttled.GCRARateLimiterCtx
}

func newThrottledRedis(rdb *redis.Client, q Quota) (RedisTaker, error) {
	st, err := goredisstore.NewCtx(rdb, "throttled:")
	if err != nil {
		return nil, err
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(1, q.Interval),
		MaxBurst: q.Burst - 1, // throttled admits MaxBurst+1 at once
	})
	if err != nil {
		return nil, err
	}
	return &throttledRedisTaker{rl: rl}, nil
}

func (t *throttledRedisTaker) Take(key string) bool {
	limited, _, err := t.rl.RateLimitCtx(context.Background(), key, 1)
	return !t.fail(err) && !limited
}

func (t *throttledRedisTaker) Close() {}
