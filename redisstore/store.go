// Package redisstore is a ratekit store in Redis: every server of an API
// shares one limit, exactly, through a Redis server or cluster.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapi"))
//	...
//	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}, core.WithStore(store))
//
// # Decisions
//
// Each decision is one Lua script, run atomically in Redis in one round
// trip (EVALSHA, and EVAL when Redis answers NOSCRIPT after a restart or a
// failover). The script reads the time from Redis (TIME), so servers whose
// clocks disagree still agree on every count, and it gives every key it
// writes a TTL in the same step, a second past the moment the key's state
// is back to full capacity: a crash can never leave a key that blocks a
// client, and expiry never changes a decision. The arithmetic is that of
// the memory store, in microseconds (the resolution of Redis TIME); both
// stores pass the same conformance suite (core/storetest).
//
// Concurrent decisions share round trips: while one is on the wire (see
// WithInFlight), the decisions that arrive queue, and the next round trip
// carries all of them as one pipeline, each still its own atomic script.
// A lone decision is sent at once; under load, a round trip carries as
// many decisions as arrived during the one before, which is what lets one
// connection carry a busy server's decisions.
//
// State per client and limit: a hash of the theoretical arrival time and
// the refill interval for the token and leaky buckets (GCRA), a hash of
// the window index and its counter (and the previous window's, for the
// sliding window counter), a sorted set of admitted requests for the
// sliding window log, bounded by the limit's count.
//
// # Keys
//
// A state key is
//
//	<prefix>:<algorithm>:<limit name>:{<client hash>}
//
// where the client hash is the first 128 bits of the SHA-256 of the
// client key, in unpadded base64url. Client keys are attacker-controlled
// text (headers, API keys): hashed, they cannot break out of their key,
// collide with another limit's key or bloat Redis memory, and they are
// not stored in clear (the hash is not secret, though: an IPv4 address
// can be found from its hash by trying all 2^32). The hash tag puts
// everything one decision touches in one Redis Cluster slot. Limits with
// the same name and algorithm share counters on every server
// (core.Limit.ID): name limits that must not share.
//
// # Failures
//
// Every decision is bounded by a timeout (WithTimeout, default 100 ms),
// so a slow or unreachable Redis delays a request by at most that much.
// go-redis applies context deadlines to reads and writes only when the
// client's ContextTimeoutEnabled option is set; set it. With a client
// that does not, the store still returns at the deadline, but the call
// goes on in a goroutine of its own until the client's ReadTimeout, and
// every decision pays for that goroutine.
//
// A failed decision is an error; the core.Limiter applies its fail mode
// (core.WithFailMode: open by default, admitting requests; closed answers
// 503 with Retry-After), logs the failure once per episode rather than once
// per request, tells its observer, and resumes limiting by itself when
// Redis answers again. A script is sent again only after Redis answered
// NOSCRIPT: go-redis's own retries (MaxRetries) are turned off for the
// store's commands, since a script whose answer was lost to a timeout or
// a broken connection may already have counted.
//
// Redis 5.0 or later is required: scripts that call TIME need effects
// replication, the default since 5.0. Some managed Redis offerings reject
// TIME in scripts; they cannot run this store.
package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

//go:embed decide.lua
var decideSource string

var decideScript = redis.NewScript(decideSource)

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// DefaultPrefix starts every key unless WithPrefix says otherwise.
const DefaultPrefix = "ratekit"

// MaxLogCount is the largest count of a sliding-window-log limit the
// store accepts. The log keeps a sorted-set member of about 100 bytes per
// admitted request in the period, per client; beyond this, use the
// sliding window counter, which keeps two numbers.
const MaxLogCount = 10_000

// An Option configures a Store.
type Option func(*Store) error

// WithPrefix sets the first part of every key the store writes (default
// DefaultPrefix), to keep ratekit's keys apart from an application's own
// or two deployments apart in one Redis. It may hold letters, digits and
// "-_./", at most 64 bytes (no ":", which separates the parts of a key).
func WithPrefix(prefix string) Option {
	return func(s *Store) error {
		if err := checkPrefix(prefix); err != nil {
			return err
		}
		s.prefix = prefix
		return nil
	}
}

// WithTimeout bounds the time one decision may take, from the call to the
// answer, waiting for a pooled connection included (default
// DefaultTimeout). A decision that runs out of time is an error, which the
// limiter's fail mode turns into an admission or a 503.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d <= 0 {
			return fmt.Errorf("redisstore: timeout %s must be positive", d)
		}
		s.timeout = d
		return nil
	}
}

// WithClock makes the scripts take the time from c, in nanoseconds,
// instead of from Redis TIME. It exists for tests that replay exact
// traces against a real Redis; a production store must not use it, since
// servers with skewed clocks would then disagree. Under a test clock,
// keys live ten minutes of real time longer than their state needs (test
// time and real time do not pass alike), and Bind rejects periods and
// bucket refill times longer than about 13 days, whose nanoseconds the
// scripts could not hold exactly.
func WithClock(c core.Clock) Option {
	return func(s *Store) error {
		if c == nil {
			return errors.New("redisstore: WithClock(nil)")
		}
		s.clock = c
		return nil
	}
}

// A Store keeps rate-limit counters in Redis. It implements core.Store and
// is safe for concurrent use; one Store (or many, on many servers) may
// serve any number of limiters.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	clock   core.Clock
	unit    time.Duration
	base    int64 // under a test clock: the Unix nanosecond that is time 0 in the scripts

	// bounded reports a client that applies context deadlines to its
	// reads and writes: then a call returns at the deadline by itself.
	bounded bool

	// Round trips in flight, and the decisions waiting for the next one
	// (pipeline.go).
	inflight int // the most round trips in flight
	mu       sync.Mutex
	running  int       // round trips in flight
	queue    []*call   // decisions waiting
	batches  [][]*call // free batch slices
}

// New returns a store on client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or a Sentinel failover client all work. New does not
// contact Redis; the first decision does.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New needs a Redis client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, unit: time.Microsecond,
		bounded: honoursDeadlines(client), inflight: DefaultInFlight}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.clock != nil {
		// Nanoseconds since the Unix epoch exceed the 2^53 that Lua's
		// doubles hold exactly; count from the day the clock starts in.
		s.unit = time.Nanosecond
		s.base = s.clock.Now().Truncate(24 * time.Hour).UnixNano()
	}
	return s, nil
}

// honoursDeadlines reports whether client applies context deadlines to
// reads and writes. A Sentinel failover client is a *redis.Client.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

func checkPrefix(p string) error {
	if p == "" || len(p) > 64 {
		return fmt.Errorf("redisstore: prefix %q must be 1 to 64 bytes", p)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '/') {
			return fmt.Errorf("redisstore: prefix %q: character %q not allowed (use letters, digits and -_./)", p, c)
		}
	}
	return nil
}

// Bind returns the counter of limit l. Limits with the same name and
// algorithm share their counters, on this server and every other server
// that uses the same Redis and prefix. A limit whose rate or burst changed
// keeps its counts: a bucket keeps its level in requests (capped at the
// new burst), a window its counts, unless the period changed, which
// starts the window counts afresh. Unlike the memory store, which
// converts a bucket's level when the limit is bound, the Redis store
// converts each client's level at its next decision, since servers take
// up a new configuration at different moments: until then the level
// moves at the rate it was written with.
//
// Beside the errors of core.Limit.Validate, Bind rejects a bucket rate
// that whole microseconds cannot express within 1% (faster than about
// 10,000 requests per second), a period that is not a whole number of
// microseconds, and a sliding-window-log limit whose count exceeds
// MaxLogCount.
func (s *Store) Bind(l core.Limit) (core.Counter, error) {
	p, err := l.Params(s.unit)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if p.Algorithm == core.SlidingWindowLog && p.Count > MaxLogCount {
		return nil, fmt.Errorf("redisstore: %w: sliding-window-log keeps one entry per request; a count of %d is more than %d (use sliding-window-counter)",
			core.ErrInvalidLimit, p.Count, MaxLogCount)
	}
	if s.clock != nil && max(p.Period, p.Tau) > maxClockSpan {
		return nil, fmt.Errorf("redisstore: %w: under WithClock, periods and refill times are limited to %s",
			core.ErrInvalidLimit, time.Duration(maxClockSpan))
	}
	slack := int64(time.Second) // past the state's end: expiry never decides
	if s.clock != nil {
		slack = int64(10 * time.Minute)
	}
	u := int64(s.unit)
	phase := int64(0)
	if s.clock != nil {
		// The scripts count windows from base; shift by base modulo the
		// period so windows stay aligned to the Unix epoch.
		phase = s.base % int64(l.Rate.Period) / u
	}
	shaping := "0"
	if p.Shaping {
		shaping = "1"
	}
	c := &counter{
		store:     s,
		params:    p,
		keyPrefix: s.prefix + ":" + p.Algorithm.String() + ":" + p.Name + ":{",
		algorithm: algorithmArg[p.Algorithm],
		static: []any{
			strconv.FormatInt(p.Count, 10),
			strconv.FormatInt(p.Period, 10),
			strconv.FormatInt(p.Burst, 10),
			strconv.FormatInt(p.Emission, 10),
			strconv.FormatInt(p.Tau, 10),
			shaping,
			strconv.FormatInt(p.MaxDelay, 10),
			strconv.FormatInt(phase, 10),
			strconv.FormatInt(int64(time.Millisecond)/u, 10),
			strconv.FormatInt(slack/int64(time.Millisecond), 10),
		},
	}
	return c, nil
}

// Key returns the Redis key that holds the state of client key under
// limit l, for operators who need to inspect or delete one client's
// state (redis-cli PTTL, DEL).
func (s *Store) Key(l core.Limit, key string) (string, error) {
	c, err := s.Bind(l)
	if err != nil {
		return "", err
	}
	return c.(*counter).redisKey(key), nil
}

// maxClockSpan bounds periods and refill times under a test clock, in
// nanoseconds: the scripts' doubles hold integers exactly below 2^53, and
// times relative to the clock's base must stay well inside that.
const maxClockSpan = 1 << 50

// counter is the core.Counter of one limit in a Store.
type counter struct {
	store     *Store
	params    core.Params
	keyPrefix string // "<prefix>:<algorithm>:<name>:{"
	algorithm any    // the script's number for the algorithm
	static    []any  // the script arguments from count on
}

// hashLen is the length of a client key's hash in a Redis key: 128 bits
// in unpadded base64url.
const hashLen = 22

func (c *counter) redisKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	buf := make([]byte, len(c.keyPrefix), len(c.keyPrefix)+hashLen+1)
	copy(buf, c.keyPrefix)
	buf = base64.RawURLEncoding.AppendEncode(buf, sum[:16])
	return string(append(buf, '}'))
}

// Take decides a request of the given cost and, when it is admitted,
// counts it; see core.Counter.
func (c *counter) Take(ctx context.Context, key string, cost int) (core.Decision, error) {
	return c.decide(ctx, key, cost, argOne)
}

// Peek decides a request of the given cost without counting it; see
// core.Counter.
func (c *counter) Peek(ctx context.Context, key string, cost int) (core.Decision, error) {
	return c.decide(ctx, key, cost, argZero)
}

// Script arguments boxed once: a string converted to an interface at each
// call would be allocated each time.
var (
	argOne, argZero, argNone any = "1", "0", ""
	argCosts                     = func() (a [64]any) {
		for i := range a {
			a[i] = strconv.Itoa(i)
		}
		return a
	}()
)

// algorithmArg is the script's number for each algorithm.
var algorithmArg = [...]any{
	core.TokenBucket:          "1",
	core.LeakyBucket:          "2",
	core.FixedWindow:          "3",
	core.SlidingWindowLog:     "4",
	core.SlidingWindowCounter: "5",
}

func (c *counter) decide(ctx context.Context, key string, cost int, commit any) (core.Decision, error) {
	if cost < 0 || int64(cost) > c.params.Capacity {
		return core.Decision{}, fmt.Errorf("%w: cost %d, capacity %d", core.ErrCostExceedsLimit, cost, c.params.Capacity)
	}
	now := argNone // the script reads Redis TIME
	if c.store.clock != nil {
		now = strconv.FormatInt((c.store.clock.Now().UnixNano()-c.store.base)/int64(c.store.unit), 10)
	}
	var costArg any
	if cost < len(argCosts) {
		costArg = argCosts[cost]
	} else {
		costArg = strconv.Itoa(cost)
	}
	k := newCall(c.redisKey(key), []any{c.algorithm, costArg, commit, now}, c.static)
	abandoned, err := c.store.decide(ctx, k)
	if abandoned {
		return core.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	res := k.res
	k.free()
	if err != nil {
		return core.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	u := c.store.unit
	d := core.Decision{
		Allowed:    res[0] == 1,
		Limit:      int(c.params.Capacity),
		Remaining:  int(max(res[1], 0)),
		ResetAfter: time.Duration(max(res[2], 0)) * u,
		Delay:      time.Duration(res[4]) * u,
		Name:       c.params.Name,
		Window:     c.params.Window,
	}
	if !d.Allowed {
		d.RetryAfter = time.Duration(res[3]) * u
	}
	return d, nil
}
