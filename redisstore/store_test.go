package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// prefixes gives every store of a test run its own key prefix, so stores
// built on one server start empty.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

// newStore returns a store on rdb under a fresh prefix, with the test
// clock c (nil: Redis TIME) and a timeout generous enough for -race on a
// loaded machine.
func newStore(t testing.TB, rdb redis.UniversalClient, c *storetest.Clock, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	opts = append([]redisstore.Option{redisstore.WithPrefix(newPrefix()), redisstore.WithTimeout(10 * time.Second)}, opts...)
	if c != nil {
		opts = append(opts, redisstore.WithClock(c.Now))
	}
	s, err := redisstore.New(rdb, opts...)
	require.NoError(t, err)
	return s
}

// bind returns the counter of the one limit l, deciding into one Decision.
func bind(t testing.TB, s core.Store, l core.Limit) storetest.One {
	t.Helper()
	c, err := s.Bind([]core.Limit{l})
	require.NoError(t, err)
	return storetest.One{Counter: c}
}

// bindAll returns the counter of limits bound together.
func bindAll(t testing.TB, s core.Store, limits ...core.Limit) core.Counter {
	t.Helper()
	c, err := s.Bind(limits)
	require.NoError(t, err)
	return c
}

// algorithms lists the five algorithms.
var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

// perDay is n requests per day.
func perDay(n int) core.Rate { return core.Rate{Count: n, Period: 24 * time.Hour} }

// TestConformance runs the store conformance suite, the one the memory
// store passes, against a real redis-server.
func TestConformance(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) core.Store {
		return newStore(t, rdb, c)
	})
}

// TestMatchesMemoryStore replays the same random traffic against the
// memory store and the Redis store and requires identical decisions,
// with counts and periods large enough that the script's products pass
// 2^53 and must go through its exact muldiv.
func TestMatchesMemoryStore(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		limit   core.Limit
		maxStep time.Duration // between two requests; costs are 1 to 60
	}{
		// tau is 1000 x 86.4 ms: about 8.6e13 ns.
		{core.Limit{Algorithm: core.TokenBucket, Rate: perDay(1_000_000), Burst: 1000}, time.Second},
		{core.Limit{Algorithm: core.LeakyBucket, Rate: core.Rate{Count: 9, Period: 13 * time.Second}, Burst: 4, Shaping: true, MaxDelay: 3 * time.Second}, 3 * time.Second},
		{core.Limit{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 40, Period: 11 * time.Second}}, time.Second},
		{core.Limit{Algorithm: core.SlidingWindowLog, Rate: core.Rate{Count: 300, Period: 17 * time.Second}}, 200 * time.Millisecond},
		// prev x (period - elapsed) reaches 500 x 8.64e13 ns = 4.3e16.
		{core.Limit{Algorithm: core.SlidingWindowCounter, Rate: perDay(500)}, 24 * time.Hour / 100},
		{core.Limit{Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: 50, Period: 7 * time.Second}}, 300 * time.Millisecond},
	} {
		l := tc.limit
		t.Run(fmt.Sprintf("%s/%d-per-%s", l.Algorithm, l.Rate.Count, l.Rate.Period), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(3*time.Hour + 777))
			want := bind(t, &core.MemoryStore{Clock: clock.Now}, l)
			got := bind(t, newStore(t, rdb, clock), l)
			params, err := l.Params(time.Nanosecond)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(7, uint64(l.Rate.Count)))
			rejected := 0
			for i := 0; i < 300; i++ {
				clock.Advance(time.Duration(rng.Int64N(int64(tc.maxStep))))
				cost := 1 + rng.IntN(int(min(params.Capacity, 60)))
				switch rng.IntN(20) {
				case 0:
					cost = 0 // a look at the state
				case 1:
					cost = 1 + rng.IntN(int(params.Capacity)) // up to the whole capacity
				}
				key := []string{"a", "b"}[rng.IntN(2)]
				peek := rng.IntN(5) == 0
				var w, g core.Decision
				var werr, gerr error
				if peek {
					w, werr = want.Peek(ctx, key, cost)
					g, gerr = got.Peek(ctx, key, cost)
				} else {
					w, werr = want.Take(ctx, key, cost)
					g, gerr = got.Take(ctx, key, cost)
				}
				require.NoError(t, werr)
				require.NoError(t, gerr)
				require.Equal(t, w, g, "request %d (key %s, cost %d, peek %v)", i, key, cost, peek)
				if !w.Allowed {
					rejected++
				}
			}
			assert.Greater(t, rejected, 10, "the traffic must exercise rejections")
		})
	}
}

// TestExactUnderContention fires ten times the limit at one key from two
// independent clients (separate connection pools, as two app servers
// would have), 64 goroutines each: exactly the limit is admitted.
func TestExactUnderContention(t *testing.T) {
	srv := redistest.Start(t)
	clients := []redis.UniversalClient{srv.Client(t), srv.Client(t)}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := core.Limit{Name: "hot", Algorithm: alg, Rate: core.PerHour(100)}
			// 2 clients x 64 goroutines x 8 = 1024 requests.
			assert.Equal(t, 100, storetest.TakeConcurrently(t, counters(t, clients, l), 128, 8))
		})
	}
}

// counters returns one counter of l per client, from stores that share a
// prefix and a standing test clock, as servers sharing Redis would.
func counters(t *testing.T, clients []redis.UniversalClient, l core.Limit) []core.Counter {
	clock := storetest.NewClock(storetest.Epoch.Add(time.Second))
	prefix := redisstore.WithPrefix(newPrefix())
	var cs []core.Counter
	for _, rdb := range clients {
		s, err := redisstore.New(rdb, prefix, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
		require.NoError(t, err)
		cs = append(cs, bind(t, s, l).Counter)
	}
	return cs
}

// TestRedisTime runs decisions on Redis TIME, as production does: two
// stores with their own clients share the limit, and the numbers are
// those of the algorithm in microseconds.
func TestRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	prefix := redisstore.WithPrefix(newPrefix())
	a, err := redisstore.New(srv.Client(t), prefix)
	require.NoError(t, err)
	b, err := redisstore.New(srv.Client(t), prefix)
	require.NoError(t, err)

	// One token every 20 minutes, a burst of 3: two servers share it.
	l := core.Limit{Name: "shared", Algorithm: core.TokenBucket, Rate: core.PerHour(3)}
	ca, cb := bind(t, a, l), bind(t, b, l)
	for i, c := range []storetest.One{ca, cb, ca} {
		d, err := c.Take(ctx, "client", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i)
		assert.Equal(t, 2-i, d.Remaining)
		assert.Equal(t, 3, d.Quota)
		// The bucket is full again (i+1) x 20 minutes from now, give or
		// take the time the test took.
		assert.InDelta(t, float64(time.Duration(i+1)*20*time.Minute), float64(d.ResetAfter), float64(time.Minute))
	}
	d, err := cb.Take(ctx, "client", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Zero(t, d.Remaining)
	assert.LessOrEqual(t, d.RetryAfter, 20*time.Minute)
	assert.Greater(t, d.RetryAfter, 19*time.Minute)

	// Every algorithm runs on Redis TIME.
	for _, alg := range algorithms {
		l := core.Limit{Name: "time", Algorithm: alg, Rate: perDay(2)}
		c := bind(t, a, l)
		for i := 0; i < 2; i++ {
			d, err := c.Take(ctx, "client", 1)
			require.NoError(t, err, alg)
			assert.True(t, d.Allowed, "%s request %d", alg, i)
		}
		d, err := bind(t, b, l).Take(ctx, "client", 1)
		require.NoError(t, err, alg)
		assert.False(t, d.Allowed, alg)
		assert.Positive(t, d.RetryAfter, alg)
		// The counter's estimate of 2 + 2 x (1 - f) admits a third request
		// once half of the next day has passed: at most 36 hours away.
		longest := 24 * time.Hour
		if alg == core.SlidingWindowCounter {
			longest = 36 * time.Hour
		}
		assert.LessOrEqual(t, d.RetryAfter, longest, alg)
	}
}

// TestSameNameSharesAcrossServers: limits with the same name and
// algorithm, configured on different servers, share counters; a limit
// with another name, another algorithm or under another prefix never does.
func TestSameNameSharesAcrossServers(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	prefix := redisstore.WithPrefix(newPrefix())
	a, err := redisstore.New(srv.Client(t), prefix, redisstore.WithClock(clock.Now))
	require.NoError(t, err)
	b, err := redisstore.New(srv.Client(t), prefix, redisstore.WithClock(clock.Now))
	require.NoError(t, err)

	api := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	for i := 0; i < 3; i++ {
		_, err := bind(t, a, api).Take(ctx, "client", 1)
		require.NoError(t, err)
	}
	// Server b has the limit raised to 6: the 3 already used still count.
	raised := api
	raised.Rate = core.PerMinute(6)
	d, err := bind(t, b, raised).Peek(ctx, "client", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining)

	for _, other := range []core.Limit{
		{Name: "api2", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(5)},
	} {
		d, err := bind(t, b, other).Peek(ctx, "client", 0)
		require.NoError(t, err)
		assert.Equal(t, 5, d.Remaining, "%s/%s", other.Name, other.Algorithm)
	}
	c, err := redisstore.New(srv.Client(t), redisstore.WithPrefix(newPrefix()), redisstore.WithClock(clock.Now))
	require.NoError(t, err)
	d, err = bind(t, c, api).Peek(ctx, "client", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining, "another prefix")
}

// TestEveryKeyHasTTL: every key a decision writes expires when its state
// is back to full capacity (plus a slack: ten minutes under a test clock),
// so no crash or bug can leave a key that limits a client forever; looking
// (Peek) and rejections write nothing.
func TestEveryKeyHasTTL(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
	s := newStore(t, rdb, clock)
	for _, tc := range []struct {
		limit core.Limit
		ttl   time.Duration // of the key after one request of cost 1 at 0:00:10
	}{
		{core.Limit{Name: "tb", Algorithm: core.TokenBucket, Rate: core.PerMinute(6)}, 10 * time.Second},
		{core.Limit{Name: "lb", Algorithm: core.LeakyBucket, Rate: core.PerMinute(6)}, 10 * time.Second},
		{core.Limit{Name: "fw", Algorithm: core.FixedWindow, Rate: core.PerMinute(6)}, 50 * time.Second},  // the window ends at 1:00
		{core.Limit{Name: "swl", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(6)}, time.Minute}, // the entry expires at 1:10
		{core.Limit{Name: "swc", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(6)}, 110 * time.Second},
	} {
		c := bind(t, s, tc.limit)
		key, err := s.Key(tc.limit, "client")
		require.NoError(t, err)

		_, err = c.Peek(ctx, "client", 1)
		require.NoError(t, err)
		n, err := rdb.Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s: Peek wrote a key", tc.limit.Name)

		_, err = c.Take(ctx, "client", 1)
		require.NoError(t, err)
		typ, err := rdb.Type(ctx, key).Result()
		require.NoError(t, err)
		if tc.limit.Algorithm == core.SlidingWindowLog {
			assert.Equal(t, "zset", typ, tc.limit.Name)
		} else {
			assert.Equal(t, "string", typ, "%s: one integer of state", tc.limit.Name)
			v, err := rdb.Get(ctx, key).Int64()
			assert.NoError(t, err, "%s: the state is an integer", tc.limit.Name)
			assert.Positive(t, v, tc.limit.Name)
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		require.NoError(t, err)
		// Real time passes between the script and PTTL; a key without a
		// TTL answers -1.
		const slack = 10 * time.Minute
		assert.LessOrEqual(t, ttl, tc.ttl+slack, tc.limit.Name)
		assert.Greater(t, ttl, tc.ttl+slack-5*time.Second, tc.limit.Name)
	}

	// A rejection changes nothing, not even the TTL.
	l := core.Limit{Name: "full", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}
	c := bind(t, s, l)
	key, _ := s.Key(l, "client")
	_, err := c.Take(ctx, "client", 1)
	require.NoError(t, err)
	before, err := rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.PExpire(ctx, key, time.Hour).Err())
	d, err := c.Take(ctx, "client", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	after, err := rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, before, after)
	ttl, _ := rdb.PTTL(ctx, key).Result()
	assert.Greater(t, ttl, 59*time.Minute)

	// Nothing without a TTL anywhere.
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, k)
	}
}

// offlineClient returns a client of an address where nothing listens,
// without go-redis's retries of commands and dials, closed (which ends the
// store's probing) when the test ends.
func offlineClient(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// keyPattern is a state key: the prefix, the client's hash (96 bits in
// base64url) as the Cluster hash tag, the limit's tag.
var keyPattern = regexp.MustCompile(`^app\{([A-Za-z0-9_-]{16})\}([A-Za-z0-9_-]{6})$`)

// TestClientKeysAreHashed: client keys are attacker-controlled text; in
// Redis they become a fixed-size hash inside the hash tag, so they cannot
// break out of their key or its hash tag, collide with another limit's
// keys or bloat memory. The keys of one client under every limit share
// the hash tag (one Cluster slot); the keys of one limit share its tag.
func TestClientKeysAreHashed(t *testing.T) {
	s, err := redisstore.New(offlineClient(t), redisstore.WithPrefix("app"))
	require.NoError(t, err)
	api := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(5)}
	apiX := core.Limit{Name: "api:x", Algorithm: core.TokenBucket, Rate: core.PerMinute(5)}
	apiFW := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}
	seen := map[string]string{}
	hashes := map[string]string{} // client key -> hash
	tags := map[string]string{}   // limit -> tag
	for _, tc := range []struct {
		limit core.Limit
		key   string
	}{
		{api, "1.2.3.4"},
		{api, "x:1.2.3.4"},
		{apiX, "1.2.3.4"},
		{apiFW, "1.2.3.4"},
		{api, "}{evil}"},
		{apiX, "}{evil}"},
		{api, "a\r\nDEL *"},
		{api, strings.Repeat("k", 10_000)},
		{api, "\x00"},
		{api, ""},
	} {
		k, err := s.Key(tc.limit, tc.key)
		require.NoError(t, err)
		m := keyPattern.FindStringSubmatch(k)
		require.NotNil(t, m, "%q", k)
		hash, tag := m[1], m[2]
		if tc.key != "" {
			assert.NotContains(t, k, tc.key)
		}
		if h, ok := hashes[tc.key]; ok {
			assert.Equal(t, h, hash, "%q: one hash tag under every limit", tc.key)
		}
		hashes[tc.key] = hash
		limit := tc.limit.Name + "/" + tc.limit.Algorithm.String()
		if g, ok := tags[limit]; ok {
			assert.Equal(t, g, tag, "%s: one tag per limit", limit)
		}
		tags[limit] = tag
		if prev, dup := seen[k]; dup {
			t.Errorf("%q/%q and %s share key %s", tc.limit.Name, tc.key, prev, k)
		}
		seen[k] = fmt.Sprintf("%q/%q", tc.limit.Name, tc.key)
	}
	distinct := func(m map[string]string) int {
		set := map[string]bool{}
		for _, v := range m {
			set[v] = true
		}
		return len(set)
	}
	assert.Equal(t, len(hashes), distinct(hashes), "client keys with one hash: %v", hashes)
	assert.Equal(t, 3, distinct(tags), "limits with one tag: %v", tags)
}

// TestOptionErrors: bad options and limits are errors, from New and Bind;
// a Redis that cannot be reached is not: New returns a store (whose
// decisions fail fast) within about two seconds.
func TestOptionErrors(t *testing.T) {
	rdb := offlineClient(t)
	_, err := redisstore.New(nil)
	assert.Error(t, err)
	for _, opt := range []redisstore.Option{
		redisstore.WithPrefix(""),
		redisstore.WithPrefix("a{b}"), // a hash tag of its own
		redisstore.WithPrefix("a}"),
		redisstore.WithPrefix("a b"),
		redisstore.WithPrefix("a*"),
		redisstore.WithPrefix("a\n"),
		redisstore.WithPrefix("é"),
		redisstore.WithPrefix(strings.Repeat("p", 65)),
		redisstore.WithTimeout(0),
		redisstore.WithTimeout(-time.Second),
		redisstore.WithClock(nil),
		redisstore.WithFallback(0),
		redisstore.WithFallback(100_001),
	} {
		_, err := redisstore.New(rdb, opt)
		assert.Error(t, err)
	}
	for _, opt := range []redisstore.Option{
		redisstore.WithPrefix("app:v2"), // ":" is allowed: the key's own parts need no separator
		redisstore.WithPrefix("a-b_c.d/e:F9"),
		redisstore.WithPrefix(strings.Repeat("p", 64)),
		redisstore.WithFallback(1),
		redisstore.WithFallback(100_000),
	} {
		_, err := redisstore.New(rdb, opt)
		assert.NoError(t, err)
	}
	s, err := redisstore.New(rdb, redisstore.WithPrefix("app:v2"))
	require.NoError(t, err)
	k, err := s.Key(core.Limit{Name: "api", Rate: core.PerMinute(1)}, "client")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(k, "app:v2{"), k)

	// New contacts Redis, but an address that refuses connections is not
	// an error, and does not hold New up for long, even with go-redis's
	// default retries (a hung server: TestNewOnHungServer).
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = refused.Close() })
	start := time.Now()
	s, err = redisstore.New(refused)
	took := time.Since(start)
	require.NoError(t, err)
	t.Logf("New returned in %v", took)
	assert.Less(t, took, 2500*time.Millisecond, "New is bounded at about 2 s")
	start = time.Now()
	_, err = bind(t, s, core.Limit{Rate: core.PerMinute(1)}).Take(context.Background(), "client", 1)
	assert.ErrorIs(t, err, redisstore.ErrUnavailable, "the circuit is open from the start")
	assert.Less(t, time.Since(start), 50*time.Millisecond)

	s, err = redisstore.New(rdb)
	require.NoError(t, err)
	for _, l := range []core.Limit{
		{Rate: core.PerMinute(-1)},
		{Algorithm: core.TokenBucket, Rate: core.PerSecond(300_000)}, // not within 1% in microseconds
		{Rate: core.Rate{Count: 1, Period: 1500 * time.Nanosecond}},
		{Algorithm: core.SlidingWindowLog, Rate: core.PerHour(redisstore.MaxLogCount + 1)},
	} {
		_, err := s.Bind([]core.Limit{l})
		assert.ErrorIs(t, err, core.ErrInvalidLimit, "%+v", l)
		_, err = s.Key(l, "client")
		assert.ErrorIs(t, err, core.ErrInvalidLimit, "%+v", l)
	}
	_, err = s.Bind([]core.Limit{{Algorithm: core.SlidingWindowLog, Rate: core.PerHour(redisstore.MaxLogCount)}})
	assert.NoError(t, err)

	// The set of limits: 1 to core.MaxLimits, no two with one ID.
	_, err = s.Bind(nil)
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
	many := make([]core.Limit, core.MaxLimits+1)
	for i := range many {
		many[i] = core.Limit{Name: fmt.Sprintf("l%d", i), Rate: core.PerMinute(10)}
	}
	_, err = s.Bind(many)
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
	_, err = s.Bind(many[:core.MaxLimits])
	assert.NoError(t, err)
	_, err = s.Bind([]core.Limit{{Name: "a", Rate: core.PerMinute(10)}, {Name: "a", Rate: core.PerHour(100)}})
	assert.ErrorIs(t, err, core.ErrInvalidLimit, "two limits share one key")
	_, err = s.Bind([]core.Limit{{Name: "a", Rate: core.PerMinute(10)}, {Name: "a", Algorithm: core.TokenBucket, Rate: core.PerHour(100)}})
	assert.NoError(t, err, "another algorithm is another key")

	// A limit of 0 requests is valid, and has no key.
	_, err = s.Bind([]core.Limit{{Rate: core.PerMinute(0)}})
	assert.NoError(t, err)
	_, err = s.Key(core.Limit{Rate: core.PerMinute(0)}, "client")
	assert.Error(t, err)

	// Under a test clock, nanoseconds must stay exact in the script.
	clocked, err := redisstore.New(rdb, redisstore.WithClock(storetest.NewClock(storetest.Epoch).Now))
	require.NoError(t, err)
	_, err = clocked.Bind([]core.Limit{{Rate: core.Rate{Count: 10, Period: 30 * 24 * time.Hour}}})
	assert.ErrorIs(t, err, core.ErrInvalidLimit)
	_, err = clocked.Bind([]core.Limit{{Rate: perDay(10)}})
	assert.NoError(t, err)
	_, err = clocked.Bind([]core.Limit{{Rate: core.Rate{Count: 0, Period: 30 * 24 * time.Hour}}})
	assert.NoError(t, err, "a block does no arithmetic in the script")
}

// TestWindowTakesOnRedisTime: on Redis's clock, a take that adds to the
// window a key already holds is one INCRBY, which keeps the TTL the
// window's first take set (never longer), and the decisions and counts
// are those of a SET: the window counts every take.
func TestWindowTakesOnRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	s := newStore(t, rdb, nil)
	for _, l := range []core.Limit{
		{Name: "fw", Algorithm: core.FixedWindow, Rate: core.PerHour(1000)},
		{Name: "swc", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(1000)},
	} {
		c := bind(t, s, l)
		key, err := s.Key(l, "client")
		require.NoError(t, err)
		require.NoError(t, rdb.ConfigResetStat(ctx).Err())
		var ttls []time.Duration
		for i := 1; i <= 3; i++ {
			d, err := c.Take(ctx, "client", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, l.Name)
			assert.Equal(t, 1000-i, d.Remaining, l.Name)
			ttl, err := rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			ttls = append(ttls, ttl)
		}
		v, err := rdb.Get(ctx, key).Int64()
		require.NoError(t, err)
		assert.EqualValues(t, 3, (v/262144)%131072, "%s: the window's count", l.Name)
		assert.Positive(t, ttls[0], l.Name)
		assert.LessOrEqual(t, ttls[1], ttls[0], "%s: INCRBY kept the TTL", l.Name)
		assert.LessOrEqual(t, ttls[2], ttls[1], l.Name)
		stats, err := rdb.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		assert.Contains(t, stats, "cmdstat_incrby:calls=2,", "%s: the second and third takes add to the window", l.Name)
	}
}
