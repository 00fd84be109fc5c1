// Package redisstore is a ratekit store in Redis: every server of an API
// shares one limit, exactly, through a Redis server or cluster.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb)
//	...
//	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}, core.WithStore(store))
//
// # Decisions
//
// A limiter binds all of its limits at once (Store.Bind), and each of its
// decisions runs in Redis as one atomic step over all of them: it first
// decides the request by every limit without writing anything, and only
// when every limit admits it counts the request in every limit's state.
// So a request is counted by all of a limiter's limits or by none, and
// concurrent decisions on one client never admit more than any limit
// allows.
//
// The code is a Redis Function library (Redis 7), which New loads once
// (FUNCTION LOAD, on every master of a cluster); a decision is an FCALL.
// Where Functions are refused (an ACL without FUNCTION, some managed
// services) the same code runs as a script (EVALSHA, and EVAL when Redis
// answers NOSCRIPT). After a restart or a failover that lost the library,
// the store loads it again and resends the calls that Redis refused; it
// never sends twice a call that may have run (go-redis's own retries are
// turned off for the store's commands), since a script whose answer was
// lost to a timeout or a broken connection may already have counted.
//
// Concurrent decisions share commands: while round trips are on the wire
// (see WithInFlight), the decisions that arrive queue, and the next round
// trip carries all of them as one FCALL (on a cluster, one per client,
// pipelined), each decision still atomic on its own and answered on its
// own. A lone decision is sent at once. One command for many decisions
// saves Redis the fixed cost of a command and of a script run, which is
// what bounds the decisions per second of a single-threaded Redis.
//
// A refund (core.TakeAll gives back what one limiter counted when another
// limiter's check rejects the request) is a decision too: a bucket gets
// the request's tokens back, a fixed window or sliding window counter its
// count while the window it was counted in is current (the counter also
// while it is the previous window), a sliding window log loses the
// request's entries. The time Take returns, which the refund takes back,
// is Redis's own (TIME, in microseconds), so nothing is lost converting it.
//
// A limit of 0 requests (a block-list entry) rejects every request with a
// RetryAfter of one period and keeps no state: it has no Redis key, and a
// limiter whose limits all block never sends anything to Redis. Bound with
// other limits, it makes the decision count nothing.
//
// The time is Redis's (TIME), so servers whose clocks disagree still agree
// on every count, and every key gets a TTL in the command that writes it
// (SET ... PX), a second past the moment its state is back to full
// capacity: a crash can never leave a key that blocks a client, and
// expiry never changes a decision. The arithmetic is that of the memory
// store, in microseconds (the resolution of Redis TIME); both stores pass
// the same conformance suite (core/storetest).
//
// # State and keys
//
// The state of a client under a limit is one integer in a Redis string,
// which Redis keeps in its smallest form: a bucket's theoretical arrival
// time (GCRA), a window's index (modulo 2^18) and counts packed together.
// A decision reads it with GET and writes it with SET ... PX: two commands
// inside Redis. A sliding window log is a sorted set of the admitted
// requests, bounded by the limit's count (MaxLogCount). A sliding window
// counter whose counts reach 2^17 keeps them as text, which costs about
// 30 bytes more per client. An operator's grant (core.Limiter.Grant)
// follows the state in its text; in a log it is one more member, scored
// +inf. Inspect, Reset and Grant are one script each over a client's keys.
//
// A key is
//
//	<prefix>{<client hash>}<limit tag>
//
// 24 bytes after the prefix (DefaultPrefix "rk": 26 bytes, within the
// 28 bytes of Redis's smallest key allocation). The client hash is 96 bits
// of the SHA-256 of the client key, in base64url; the limit tag 36 bits of
// the SHA-256 of the limit's name, algorithm and period. Client keys are
// attacker-controlled text (headers, API keys): hashed, they cannot break
// out of their key, collide with another limit's key or bloat Redis
// memory, and they are not stored in clear (the hash is not secret,
// though: an IPv4 address can be found from its hash by trying all 2^32).
// The hash tag puts the keys of one client under all of a limiter's
// limits, everything one decision touches, in one Redis Cluster slot.
// Limits with the same name, algorithm and period share counters on every
// server (name limits that must not share).
//
// Measured with Redis 7.0 (TestMemoryPerClient: used_memory growth over
// 20,000 and 100,000 clients), a client under one bucket or window limit
// costs 133 to 138 bytes of Redis memory, so a million clients about
// 130 MB.
//
// # Failures
//
// Every decision is bounded by a timeout (WithTimeout, default 100 ms).
// go-redis applies context deadlines to reads and writes only when the
// client's ContextTimeoutEnabled option is set; set it. With a client
// that does not, the store still returns at the deadline, but the call
// goes on in a goroutine of its own until the client's ReadTimeout, and
// every decision pays for that goroutine.
//
// A failed decision is an error; the core.Limiter applies its fail mode
// (open by default, admitting requests; closed answers 503 with
// Retry-After), logs the failure once per episode rather than once per
// request, and tells its observers. When Redis times out or cannot be
// reached three times in a row, the store's circuit opens: decisions stop
// waiting for Redis and fail at once (ErrUnavailable), or are decided in
// process (WithFallback), while one goroutine probes Redis four times a
// second; the first probe that Redis answers closes the circuit.
//
// When Redis is full (maxmemory with the noeviction policy, the
// recommended one), Redis refuses the decision up front; the store then
// runs it again with the library's second function, which may write when
// Redis is out of memory but only to keys that exist: clients Redis
// already tracks keep being decided exactly (one over its limit stays
// over it), and a request whose client has no key yet is decided in
// process, each server admitting up to the limit. So a flood of new keys
// neither turns limiting off nor gives anyone a fresh budget. Under an
// eviction policy Redis may evict a client's key, which gives that client
// a fresh budget; the LRU and LFU policies evict idle keys first and
// volatile-ttl the keys nearest their end (buckets of clients that used
// little), so a client hammering over its limit keeps its key longest.
//
// Redis 7.0 or later is required for Functions; the script path needs
// Redis 6.2 (SET ... KEEPTTL), and is tested on Redis 7 with FUNCTION
// denied by an ACL. Some managed Redis offerings reject TIME in scripts;
// they cannot run this store.
//
// # Hybrid: local decisions on leases
//
// NewHybrid returns a store for fleets where a round trip per request is
// too much: each server decides in process, on leases of the limit it
// takes from Redis, and synchronises with Redis in batches, one round trip
// for every client that needs it, every interval and whenever a request
// finds its lease used up. A lease is counted in Redis when it is taken,
// so while Redis answers no request is admitted beyond a limit: the
// servers together admit at most what Redis has counted. A lease is this
// server's share of what is left (left / servers), at most twice what the
// client sent here in the last interval; near the limit leases shrink to
// one request, so a window's last requests are decided in Redis one by
// one, and past it rejections are decided locally. A lease unused for an
// interval goes back. The price is under-admission: leases held by idle
// servers, for at most an interval.
//
// Only fixed windows and sliding window counters, whose counts merge by
// adding, can be hybrid; a bucket or a log is an error at Bind. Times are
// the servers' clocks (keep them in sync), not Redis TIME.
//
// While Redis is away, each server goes on deciding: within its leases,
// and its share of what no server had leased at its last sync. When Redis
// answers again, the counts are sent, whole and with a sequence number,
// so that a sync resent after a lost answer never counts twice.
// Inspect, Reset and Grant work as on the exact store; other servers see
// a reset or a grant at their next sync of the client.
//
// # Regions
//
// With WithRegion, a hybrid store is one region of several, each with its
// own Redis. Every window keeps, per region, that region's count: its own
// servers add to theirs, and send it to every other region's Redis after
// each sync, with a version, so a count that arrives twice or late changes
// nothing. A region that cannot reach another keeps limiting on its own
// counts and the last it heard of the other's, and sends the newest when
// the link returns: nothing is lost and nothing counted twice. Across
// regions, the limit can be exceeded by what the other regions admitted in
// the time their counts take to arrive (a sync interval plus the link's
// delay), or for as long as they are cut off.
package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/unixtime"
)

//go:embed decide.lua
var decideSource string

// The code of decide.lua, as a Function library loaded once per server
// and as an EVAL script for servers without Functions. The library's and
// functions' names carry a hash of the code, so that servers running two
// versions of this package side by side (a rolling deploy) each call
// their own.
var (
	codeHash      = func() string { h := sha256.Sum256([]byte(decideSource)); return hex.EncodeToString(h[:6]) }()
	libraryName   = "ratekit_" + codeHash
	functionTake  = libraryName
	functionFull  = libraryName + "_full"
	librarySource = "#!lua name=" + libraryName + "\n" + decideSource + `
redis.register_function('` + functionTake + `', function(keys, argv) return many(keys, argv, false) end)
redis.register_function{function_name = '` + functionFull + `', flags = {'allow-oom'},
  callback = function(keys, argv) return many(keys, argv, true) end}
`
	scriptSource = decideSource + "\nreturn many(KEYS, ARGV, false)\n"
	decideScript = redis.NewScript(scriptSource)
)

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// DefaultPrefix starts every key unless WithPrefix says otherwise.
const DefaultPrefix = "rk"

// MaxLogCount is the largest count of a sliding-window-log limit the
// store accepts. The log keeps a sorted-set member of about 100 bytes per
// admitted request in the period, per client; beyond this, use the
// sliding window counter, which keeps one number.
const MaxLogCount = 10_000

// An Option configures a Store.
type Option func(*Store) error

// WithPrefix sets the first part of every key the store writes (default
// DefaultPrefix), to keep ratekit's keys apart from an application's own
// or two deployments apart in one Redis. It may hold letters, digits and
// "-_./:", at most 64 bytes. A key is the prefix and 24 bytes: with a
// prefix of up to 4 bytes, keys stay within the 28 bytes that Redis
// stores in its smallest key allocation (see the package documentation).
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

// WithClock makes the scripts take the time from now, in nanoseconds,
// instead of from Redis TIME. It exists for tests that replay exact
// traces against a real Redis; a production store must not use it, since
// servers with skewed clocks would then disagree. Under a test clock,
// keys live ten minutes of real time longer than their state needs (test
// time and real time do not pass alike), and Bind rejects periods and
// bucket refill times longer than about 13 days, whose nanoseconds the
// scripts could not hold exactly.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return errors.New("redisstore: WithClock(nil)")
		}
		s.clock = now
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
	clock   func() time.Time
	unit    time.Duration
	base    time.Time // under a test clock: time 0 in the scripts

	// The start of every spec (decide.lua): units per millisecond and the
	// slack of TTLs, in milliseconds.
	specHead string

	// bounded reports a client that applies context deadlines to its
	// reads and writes: then a call returns at the deadline by itself.
	bounded bool

	// scripts reports a server without Functions (or that refuses
	// FUNCTION LOAD): decisions are EVALSHA of the script.
	scripts atomic.Bool

	// The limit tags in use, to refuse two limits whose keys would meet.
	tagMu sync.Mutex
	tags  map[string]string

	circuit  circuit           // breaker.go
	local    *core.MemoryStore // decides what Redis cannot (breaker.go)
	fallback int               // WithFallback's instances; 0: none

	// Round trips in flight, and the decisions waiting for the next one
	// (pipeline.go).
	inflight int // the most round trips in flight

	// The hybrid store's (hybrid.go): set by NewHybrid, WithRegion and
	// WithMaxKeys.
	hybrid  bool
	region  string
	peers   map[string]redis.UniversalClient
	maxKeys int
	log     *slog.Logger
	mu      sync.Mutex
	running int       // round trips in flight
	queue   []*call   // decisions waiting
	batches [][]*call // free batch slices
}

// startTimeout bounds what New does in Redis: loading the functions and
// opening connections.
const startTimeout = 2 * time.Second

// New returns a store on client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or a Sentinel failover client all work.
//
// New gets the store ready for its first burst of decisions: it loads the
// store's Redis Function library (on every master of a cluster, or the
// script where Functions are not available) and opens the connections
// that decisions will use, within a couple of seconds. When Redis does
// not answer, New still returns the store, with its circuit open (see
// WithFallback): decisions fail fast, or fall back, until Redis answers.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New needs a Redis client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, unit: time.Microsecond,
		bounded: honoursDeadlines(client), inflight: DefaultInFlight, tags: map[string]string{}}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	switch {
	case !s.hybrid && (s.region != "" || s.maxKeys != 0 || s.log != nil):
		return nil, errors.New("redisstore: WithRegion, WithMaxKeys and WithLogger apply to NewHybrid")
	case s.hybrid && s.fallback != 0:
		return nil, errors.New("redisstore: WithFallback applies to New; a hybrid store decides locally while Redis is away")
	}
	slack := time.Second // past the state's end: expiry never decides
	if s.clock != nil {
		// Nanoseconds since the Unix epoch exceed the 2^53 that Lua's
		// doubles hold exactly (and, past 2262, an int64); count from
		// the start of the clock's first reading.
		s.unit = time.Nanosecond
		s.base = s.clock()
		slack = 10 * time.Minute
	}
	s.specHead = strconv.FormatInt(int64(time.Millisecond/s.unit), 10) + " " + strconv.FormatInt(slack.Milliseconds(), 10)
	s.local = &core.MemoryStore{Clock: s.clock}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.circuit.trip(s)
	}
	return s, nil
}

// ready runs start by ctx's deadline: with a client that does not apply
// deadlines itself, start goes on in a goroutine of its own when the
// deadline passes.
func (s *Store) ready(ctx context.Context) error {
	if s.bounded {
		return s.start(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- s.start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
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
			c == '-' || c == '_' || c == '.' || c == '/' || c == ':') {
			return fmt.Errorf("redisstore: prefix %q: character %q not allowed (use letters, digits and -_./:)", p, c)
		}
	}
	return nil
}

// start loads the code and opens the connections decisions use: as many
// as round trips may be in flight, on every master.
func (s *Store) start(ctx context.Context) error {
	if err := s.load(ctx); err != nil {
		return err
	}
	errs := make(chan error, s.inflight)
	for range s.inflight {
		go func() {
			errs <- s.eachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
		}()
	}
	var err error
	for range s.inflight {
		err = errors.Join(err, <-errs)
	}
	return err
}

// load loads the function library on every master, or falls back to the
// script where Functions are missing (Redis before 7.0) or refused (an
// ACL without FUNCTION, a managed service).
func (s *Store) load(ctx context.Context) error {
	err := s.eachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, librarySource).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	})
	switch {
	case err == nil:
		s.scripts.Store(false)
	case noFunctions(err):
		s.scripts.Store(true)
		return nil
	}
	return err
}

// noFunctions reports an answer to FUNCTION LOAD that says the server
// will not run Functions for this client.
func noFunctions(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "NOPERM") ||
		redis.HasErrorPrefix(err, "unknown subcommand")
}

// eachMaster runs fn on every master of a cluster or shard of a ring, or
// on the client itself.
func (s *Store) eachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	return eachMaster(ctx, s.client, fn)
}

// eachMaster runs fn on every master of client (a cluster, a ring or one
// server).
func eachMaster(ctx context.Context, client redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("redisstore: a %T is not supported", client)
}

// now returns the time in the scripts' unit: from the test clock, or ""
// for Redis TIME.
func (s *Store) now() any {
	if s.clock == nil {
		return argNone
	}
	return strconv.FormatInt(s.fromTime(s.clock()), 10)
}

// toTime returns the time of the scripts' time t.
func (s *Store) toTime(t int64) time.Time {
	if s.clock == nil {
		return time.UnixMicro(t)
	}
	return s.base.Add(time.Duration(t * int64(s.unit)))
}

// fromTime is the inverse of toTime.
func (s *Store) fromTime(t time.Time) int64 {
	if s.clock == nil {
		return t.UnixMicro()
	}
	return int64(t.Sub(s.base)) / int64(s.unit)
}

// Bind returns the counter of a limiter's limits: each decision of the
// counter is one script over all of them, all or nothing (see the package
// documentation). Limits with the same name, algorithm and period share
// their counters, on this server and every other server that uses the
// same Redis and prefix, whatever the other limits bound with them. A
// limit whose count or burst changed keeps its counts (a bucket the time
// it needs to refill, capped at the new limit's); a changed period starts
// afresh.
//
// Beside the errors of core.Limit.Params, Bind rejects no limits or more
// than core.MaxLimits, two limits with the same name and algorithm, a
// bucket rate that whole microseconds cannot express within 1% (faster
// than about 10,000 requests per second), a period that is not a whole
// number of microseconds, a window period under a millisecond, a
// sliding-window-log limit whose count exceeds MaxLogCount, and, about
// once in tens of billions of pairs of limits, a limit whose key tag is
// another's (rename one).
func (s *Store) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.bind(limits)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Store) bind(limits []core.Limit) (*counter, error) {
	if len(limits) == 0 || len(limits) > core.MaxLimits {
		return nil, fmt.Errorf("redisstore: %w: %d limits; a counter has 1 to %d", core.ErrInvalidLimit, len(limits), core.MaxLimits)
	}
	c := &counter{store: s, limits: limits, params: make([]core.Params, len(limits)), capacity: math.MaxInt64, take: argOne}
	spec := s.specHead
	for i, l := range limits {
		p, err := s.params(l)
		if err != nil {
			return nil, err
		}
		for _, q := range c.params[:i] {
			if q.ID == p.ID {
				return nil, fmt.Errorf("redisstore: %w: two limits with the ID %q", core.ErrInvalidLimit, p.ID)
			}
		}
		c.params[i] = p
		if p.Block {
			c.take = argZero // nothing is ever admitted, so nothing counted
			continue
		}
		tag, err := s.tag(&p)
		if err != nil {
			return nil, err
		}
		c.capacity = min(c.capacity, p.Capacity)
		c.tags = append(c.tags, tag)
		spec += s.limitSpec(&p)
	}
	c.keyLen = len(s.prefix) + 1 + hashLen + 1 + tagLen
	c.spec = spec
	return c, nil
}

// tag returns the part of a key that names limit p: 36 bits of the hash
// of its name, algorithm and period. Two limits that the store has seen
// with one tag are refused.
func (s *Store) tag(p *core.Params) (string, error) {
	return s.tagOf(p.ID + "/" + time.Duration(p.Period*int64(p.Unit)).String())
}

// tagOf returns the tag of the limit (or concurrency limiter) whose
// identity is id; see tag.
func (s *Store) tagOf(id string) (string, error) {
	sum := sha256.Sum256([]byte(id))
	var b [8]byte
	base64.RawURLEncoding.Encode(b[:], sum[:6])
	tag := string(b[:tagLen])
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	if other, ok := s.tags[tag]; ok && other != id {
		return "", fmt.Errorf("redisstore: %w: limits %q and %q would share Redis keys; rename one", core.ErrInvalidLimit, other, id)
	}
	if len(s.tags) < maxTags {
		s.tags[tag] = id
	}
	return tag, nil
}

// maxTags bounds the tags a store remembers (limits reloaded without end
// must not grow it without bound).
const maxTags = 1 << 16

// params validates l and returns its numbers in the store's unit.
func (s *Store) params(l core.Limit) (core.Params, error) {
	p, err := l.Params(s.unit)
	if err != nil {
		return p, fmt.Errorf("redisstore: %w", err)
	}
	if p.Algorithm == core.SlidingWindowLog && p.Count > MaxLogCount {
		return p, fmt.Errorf("redisstore: %w: sliding-window-log keeps one entry per request; a count of %d is more than %d (use sliding-window-counter)",
			core.ErrInvalidLimit, p.Count, MaxLogCount)
	}
	if !p.Block && (p.Algorithm == core.FixedWindow || p.Algorithm == core.SlidingWindowCounter) && p.Period*int64(p.Unit) < int64(time.Millisecond) {
		return p, fmt.Errorf("redisstore: %w: a window of %s is shorter than the millisecond Redis keys expire by",
			core.ErrInvalidLimit, time.Duration(p.Period*int64(p.Unit)))
	}
	if s.clock != nil && !p.Block && max(p.Period, p.Tau) > maxClockSpan {
		return p, fmt.Errorf("redisstore: %w: under WithClock, periods and refill times are limited to %s",
			core.ErrInvalidLimit, time.Duration(maxClockSpan))
	}
	return p, nil
}

// limitSpec returns the part of a spec (decide.lua) that tells limit p:
// nine integers, each after a space.
func (s *Store) limitSpec(p *core.Params) string {
	phase := int64(0)
	if s.clock != nil {
		// The scripts count windows from base; shift by base modulo the
		// period so windows stay aligned to the Unix epoch.
		phase = unixtime.Mod(s.base, p.Period*int64(s.unit)) / int64(s.unit)
	}
	shaping := int64(0)
	if p.Shaping {
		shaping = 1
	}
	var b []byte
	for _, n := range [...]int64{algorithmNumber[p.Algorithm], p.Count, p.Period, p.Burst, p.Emission, p.Tau, shaping, p.MaxDelay, phase} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, n, 10)
	}
	return string(b)
}

// Key returns the Redis key that holds the state of client key under
// limit l, for operators who need to inspect or delete one client's
// state (redis-cli PTTL, DEL). A limit of 0 requests has none.
func (s *Store) Key(l core.Limit, key string) (string, error) {
	p, err := s.params(l)
	if err != nil {
		return "", err
	}
	if p.Block {
		return "", fmt.Errorf("redisstore: limit %q blocks every request and keeps no state", p.Name)
	}
	c, err := s.bind([]core.Limit{l})
	if err != nil {
		return "", err
	}
	var keys [core.MaxLimits]string
	c.keys(key, &keys)
	return keys[0], nil
}

// maxClockSpan bounds periods and refill times under a test clock, in
// nanoseconds: the scripts' doubles hold integers exactly below 2^53, and
// times relative to the clock's base must stay well inside that.
const maxClockSpan = 1 << 50

// counter is the core.Counter of one limiter's limits in a Store.
type counter struct {
	store    *Store
	limits   []core.Limit  // as bound, for the fallback
	params   []core.Params // per limit, in the store's unit
	tags     []string      // per limit with state, in KEYS order
	keyLen   int           // the length of one key
	spec     any           // the limits with state as the script reads them (decide.lua), boxed
	capacity int64         // the smallest capacity of the limits with state
	take     any           // the mode of Take: argOne, or argZero when a limit blocks

	localOnce    sync.Once
	localCounter core.Counter // the fallback's counter, bound on first use
	localErr     error
}

// hashLen is the length of a client key's hash in a Redis key: 96 bits
// in base64url; tagLen the length of a limit's tag.
const (
	hashLen = 16
	tagLen  = 6
)

// keys writes the Redis keys of client key under the limits with state to
// dst, all slices of one string: the prefix, the client's hash in braces
// (the hash tag: one Cluster slot per client), the limit's tag.
func (c *counter) keys(key string, dst *[core.MaxLimits]string) {
	tag := clientTag(key)
	var b strings.Builder
	b.Grow(c.keyLen * len(c.tags))
	for _, t := range c.tags {
		b.WriteString(c.store.prefix)
		b.Write(tag[:])
		b.WriteString(t)
	}
	all := b.String()
	for i := range c.tags {
		dst[i] = all[i*c.keyLen : (i+1)*c.keyLen]
	}
}

// clientTag returns the hash tag of client key in a Redis key: 96 bits
// of its SHA-256 in base64url, in braces (one Cluster slot per client).
func clientTag(key string) (tag [hashLen + 2]byte) {
	sum := sha256.Sum256([]byte(key))
	tag[0] = '{'
	base64.RawURLEncoding.Encode(tag[1:hashLen+1], sum[:12])
	tag[hashLen+1] = '}'
	return tag
}

// Script arguments boxed once: a string converted to an interface at each
// call would be allocated each time.
var (
	argOne, argZero, argRefund, argNone any = "1", "0", "r", ""
	argInts                                 = func() (a [256]any) {
		for i := range a {
			a[i] = strconv.Itoa(i)
		}
		return a
	}()
)

// algorithmNumber is the script's number for each algorithm.
var algorithmNumber = [...]int64{
	core.TokenBucket:          1,
	core.LeakyBucket:          2,
	core.FixedWindow:          3,
	core.SlidingWindowLog:     4,
	core.SlidingWindowCounter: 5,
}

func intArg(n int) any {
	if n >= 0 && n < len(argInts) {
		return argInts[n]
	}
	return strconv.Itoa(n)
}

// Take decides a request of the given cost by every limit and, when all
// of them admit it, counts it in each; see core.Counter.
func (c *counter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	return c.decide(ctx, key, cost, c.take, ds)
}

// Peek decides a request of the given cost without counting it; see
// core.Counter.
func (c *counter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	_, err := c.decide(ctx, key, cost, argZero, ds)
	return err
}

// Refund gives back a request of the given cost that Take admitted at
// time at with decisions ds, in one script; see core.Counter. While the
// circuit is open, the refund goes to the fallback, where decisions go.
func (c *counter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	if cost <= 0 || len(c.tags) == 0 || c.take != argOne {
		return nil // nothing was counted
	}
	if c.store.circuit.isOpen() {
		if local, err := c.fallback(); err == nil && c.store.fallback > 0 {
			return local.Refund(ctx, key, cost, at, ds)
		}
		return nil
	}
	k := c.call(key, c.refundMode(ds), intArg(cost), strconv.FormatInt(c.store.fromTime(at), 10), 0)
	abandoned, err := c.store.decide(ctx, k)
	if !abandoned {
		k.free()
	}
	if err != nil {
		c.store.circuit.failed(c.store, err)
		return fmt.Errorf("redisstore: refund: %w", err)
	}
	c.store.circuit.answered()
	return nil
}

// call returns a call of the script on the keys of client key, with the
// given mode, cost and time, whose answer holds perKey integers per limit
// with state (decide.lua): 5 for a decision, 8 for an inspection, none
// for a refund or a grant.
func (c *counter) call(key string, mode, cost, now any, perKey int) *call {
	k := callPool.Get().(*call)
	c.keys(key, &k.keys)
	k.nkeys = len(c.tags)
	k.args = [4]any{c.spec, mode, cost, now}
	k.data = perKey * k.nkeys
	k.err = nil
	return k
}

// refundMode is the mode of the refund of a take whose decisions were ds:
// per limit with state, whether the take was paid from its grant; plain
// argRefund when no grant paid.
func (c *counter) refundMode(ds []core.Decision) any {
	var buf [1 + core.MaxLimits]byte
	b, granted := append(buf[:0], 'r'), false
	for i := range c.params {
		if c.params[i].Block {
			continue
		}
		f := byte('0')
		if i < len(ds) && ds[i].Granted {
			f, granted = '1', true
		}
		b = append(b, f)
	}
	if !granted {
		return argRefund
	}
	return string(b)
}

func (c *counter) decide(ctx context.Context, key string, cost int, mode any, ds []core.Decision) (time.Time, error) {
	if len(ds) < len(c.params) {
		return time.Time{}, fmt.Errorf("redisstore: %d decisions for %d limits", len(ds), len(c.params))
	}
	if cost < 0 || int64(cost) > c.capacity {
		return time.Time{}, fmt.Errorf("%w: cost %d, capacity %d", core.ErrCostExceedsLimit, cost, max(c.capacity, 0))
	}
	if len(c.tags) == 0 {
		// Only limits that block: nothing to ask Redis.
		for i := range c.params {
			block(&c.params[i], &ds[i])
		}
		if c.store.clock != nil {
			return c.store.clock(), nil
		}
		return time.Now(), nil
	}
	if c.store.circuit.isOpen() {
		return c.unavailable(ctx, key, cost, mode, ds)
	}
	k := c.call(key, mode, intArg(cost), c.store.now(), 5)
	abandoned, err := c.store.decide(ctx, k)
	if !abandoned && err == nil && k.res[1] == 0 {
		// Redis is out of memory and this client has no key yet.
		k.free()
		c.store.circuit.answered()
		return c.local(ctx, key, cost, mode, ds)
	}
	if err != nil {
		if !abandoned {
			k.free()
		}
		if c.store.circuit.failed(c.store, err) && c.store.fallback > 0 {
			return c.local(ctx, key, cost, mode, ds)
		}
		return time.Time{}, fmt.Errorf("redisstore: %w", err)
	}
	c.store.circuit.answered()
	u := c.store.unit
	res := k.res[2 : 2+k.data]
	for i := range c.params {
		p := &c.params[i]
		if p.Block {
			block(p, &ds[i])
			continue
		}
		ds[i] = core.Decision{
			Allowed:    res[0] >= 1,
			Granted:    res[0] == 2,
			Name:       p.Name,
			Quota:      int(p.Capacity),
			Remaining:  int(max(res[1], 0)),
			Window:     p.Window,
			ResetAfter: time.Duration(max(res[2], 0)) * u,
			Delay:      time.Duration(res[4]) * u,
		}
		if !ds[i].Allowed {
			ds[i].RetryAfter = time.Duration(res[3]) * u
		}
		res = res[5:]
	}
	at := c.store.toTime(k.res[0])
	k.free()
	return at, nil
}

// block writes the decision of a limit of 0 requests: a rejection, retry
// after one period.
func block(p *core.Params, d *core.Decision) {
	period := time.Duration(p.Period) * p.Unit
	*d = core.Decision{Name: p.Name, Window: p.Window, ResetAfter: period, RetryAfter: period}
}
