package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/breaker"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
	"github.com/ratekit/ratekit/redisstore/internal/servers"
)

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

	// code is how decisions run the store's code (library.go): FCALL,
	// or, on a server without Functions or that refuses FUNCTION LOAD,
	// EVALSHA of a script.
	code atomic.Int32

	log  *slog.Logger
	full fullEpisode // Redis out of memory (full.go)

	tags keys.Tags // the limit tags in use, to refuse two limits whose keys would meet

	circuit  *breaker.Circuit
	local    *core.MemoryStore // decides what Redis cannot (fallback.go)
	fallback int               // WithFallback's instances; 0: none

	// Round trips in flight, and the decisions waiting for the next one
	// (pipeline.go).
	inflight int // the most round trips in flight
	mu       sync.Mutex
	running  int       // round trips in flight
	queue    []*call   // decisions waiting
	batches  [][]*call // free batch slices
}

// startTimeout bounds what New does in Redis: loading the functions and
// opening connections.
const startTimeout = 2 * time.Second

// New returns a store on client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or a Sentinel failover client all work. Redis 7.0 or later
// is required for Functions; where they are refused, the script needs
// Redis 6.2 (SET ... KEEPTTL). Some managed Redis offerings reject TIME in
// scripts; they cannot run this store.
//
// New gets the store ready for its first burst of decisions: it loads the
// store's Redis Function library (FUNCTION LOAD, on every master of a
// cluster; where Functions are refused, by an ACL without FUNCTION or a
// managed service, the same code as scripts, SCRIPT LOAD, which decisions
// run by EVALSHA, and EVAL after NOSCRIPT) and opens the connections that decisions will use, within a
// couple of seconds. When Redis does not answer, New still returns the
// store, with its circuit open (see WithFallback): decisions fail fast,
// or fall back, until Redis answers. After a restart or a failover that
// lost the library, the store loads it again and resends the calls that
// Redis refused; it never sends twice a call that may have run
// (go-redis's own retries are turned off for the store's commands), since
// a script whose answer was lost to a timeout or a broken connection may
// already have counted.
//
// go-redis applies context deadlines to reads and writes only when the
// client's ContextTimeoutEnabled option is set; set it. With a client that
// does not, the store still returns at the deadline, but the call goes on
// in a goroutine of its own until the client's ReadTimeout, every
// decision pays for that goroutine, and decisions do not share round
// trips.
//
// When Redis is full (maxmemory with the noeviction policy, the
// recommended one), Redis refuses the decision up front; the store then
// runs it again with the code's second form, which may write when Redis
// is out of memory but only to keys that exist: the library's second
// function or, where Functions are refused, the second script (its
// shebang line carries the allow-oom flag). Clients Redis already tracks
// keep being decided exactly (one over its limit stays over it), and a
// request whose client has no key yet is decided in process, each server
// admitting up to the limit (up to its share with WithFallback). So a
// flood of new keys neither turns limiting off nor gives anyone a fresh
// budget, whichever way the code runs. Such a run is logged (WithLogger)
// when it starts and, with the count of decisions made meanwhile, once
// Redis has had room for a second; Store.OutOfMemory counts them, for
// the metrics exporters. Redis before 7.0 has no allow-oom flag: there, a
// full Redis fails the decisions that would write, which the limiter's
// fail mode decides. Under an eviction policy Redis may evict a client's
// key, which gives that client a fresh budget; the LRU and LFU policies
// evict idle keys first and volatile-ttl the keys nearest their end
// (buckets of clients that used little), so a client hammering over its
// limit keeps its key longest.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New needs a Redis client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, unit: time.Microsecond,
		bounded: servers.AppliesDeadlines(client), inflight: DefaultInFlight, log: slog.Default()}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
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
	s.circuit = breaker.New(s.ready, s.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.circuit.Trip()
	}
	return s, nil
}

// ready gets Redis ready for decisions by ctx's deadline: it loads the
// code and opens the connections decisions use, as many as round trips
// may be in flight, on every master. New calls it, and so does the
// circuit's probe.
func (s *Store) ready(ctx context.Context) error {
	return servers.ByDeadline(ctx, s.bounded, func(ctx context.Context) error {
		if err := s.load(ctx); err != nil {
			return err
		}
		errs := make(chan error, s.inflight)
		for range s.inflight {
			go func() {
				errs <- servers.EachMaster(ctx, s.client, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
			}()
		}
		var err error
		for range s.inflight {
			err = errors.Join(err, <-errs)
		}
		return err
	})
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
