package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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

// TestManyLimitsMatchMemoryStore replays the same random traffic, with
// refunds and an operator's grants, resets and inspections, against limits bound together in the memory store and in the
// Redis store, and requires identical decisions from every limit and the
// same decision time.
func TestManyLimitsMatchMemoryStore(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	for i, limits := range [][]core.Limit{
		{
			{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(10), Burst: 6},
			{Name: "minute", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(40)},
			{Name: "hour", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(300)},
		},
		{
			{Name: "fixed", Algorithm: core.FixedWindow, Rate: core.Rate{Count: 20, Period: 7 * time.Second}},
			{Name: "shaped", Algorithm: core.LeakyBucket, Rate: core.PerSecond(4), Burst: 8, Shaping: true, MaxDelay: time.Second},
			{Name: "counter", Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: 30, Period: 11 * time.Second}},
			{Name: "log", Algorithm: core.SlidingWindowLog, Rate: core.Rate{Count: 25, Period: 13 * time.Second}},
		},
		{
			{Name: "blocked", Algorithm: core.TokenBucket, Rate: core.Rate{Count: 0, Period: time.Minute}},
			{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(5*time.Hour + 12345))
			want := bindAll(t, &core.MemoryStore{Clock: clock.Now}, limits...)
			got := bindAll(t, newStore(t, rdb, clock), limits...)
			capacity := 1 << 30
			for _, l := range limits {
				p, err := l.Params(time.Nanosecond)
				require.NoError(t, err)
				if !p.Block {
					capacity = min(capacity, int(p.Capacity))
				}
			}
			rng := rand.New(rand.NewPCG(11, uint64(i)))
			wds, gds := make([]core.Decision, len(limits)), make([]core.Decision, len(limits))
			rejected, refunded, granted := 0, 0, 0
			for step := 0; step < 400; step++ {
				clock.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
				cost := 1 + rng.IntN(min(capacity, 4))
				if rng.IntN(15) == 0 {
					cost = 0
				}
				key := []string{"a", "b"}[rng.IntN(2)]
				switch rng.IntN(40) {
				case 0, 1: // an operator's grant, valid or not
					n := rng.IntN(capacity+2) - 1
					ttl := time.Duration(1+rng.IntN(30)) * time.Second
					werr, gerr := want.Grant(ctx, key, n, ttl), got.Grant(ctx, key, n, ttl)
					require.Equal(t, werr == nil, gerr == nil, "step %d: grant %d: %v and %v", step, n, werr, gerr)
					require.Equal(t, errors.Is(werr, core.ErrInvalidGrant), errors.Is(gerr, core.ErrInvalidGrant))
					granted += min(max(n, 0), 1)
					continue
				case 2:
					_, err := want.Reset(ctx, key)
					require.NoError(t, err)
					_, err = got.Reset(ctx, key)
					require.NoError(t, err)
					continue
				case 3, 4:
					wgs, ggs := make([]core.Grant, len(limits)), make([]core.Grant, len(limits))
					_, err := want.Inspect(ctx, key, wds, wgs)
					require.NoError(t, err)
					_, err = got.Inspect(ctx, key, gds, ggs)
					require.NoError(t, err)
					require.Equal(t, wds, gds, "step %d: inspect (key %s)", step, key)
					require.Equal(t, wgs, ggs, "step %d: inspect's grants (key %s)", step, key)
					continue
				}
				if rng.IntN(5) == 0 {
					require.NoError(t, want.Peek(ctx, key, cost, wds))
					require.NoError(t, got.Peek(ctx, key, cost, gds))
					require.Equal(t, wds, gds, "step %d: peek (key %s, cost %d)", step, key, cost)
					continue
				}
				wat, err := want.Take(ctx, key, cost, wds)
				require.NoError(t, err)
				gat, err := got.Take(ctx, key, cost, gds)
				require.NoError(t, err)
				require.Equal(t, wds, gds, "step %d: take (key %s, cost %d)", step, key, cost)
				require.True(t, wat.Equal(gat), "step %d: decided at %s and %s", step, wat, gat)
				admitted := true
				for _, d := range gds {
					admitted = admitted && d.Allowed
				}
				if !admitted {
					rejected++
					continue
				}
				if rng.IntN(3) == 0 {
					// Refund now or a little later, as TakeAll does when a
					// check after this one rejects.
					clock.Advance(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
					require.NoError(t, want.Refund(ctx, key, cost, wat, wds))
					require.NoError(t, got.Refund(ctx, key, cost, gat, gds))
					refunded++
				}
			}
			assert.Greater(t, rejected, 10, "the traffic must exercise rejections")
			assert.Greater(t, granted, 5, "the traffic must exercise grants")
			if limits[0].Rate.Count != 0 {
				assert.Greater(t, refunded, 10, "the traffic must exercise refunds")
			}
		})
	}
}

// TestRefundOnRedisTime: the time Take returns is Redis TIME, to the
// microsecond, and a refund given it takes back exactly what the take
// counted, under every algorithm, as production runs.
func TestRefundOnRedisTime(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb, nil)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := core.Limit{Name: "refund", Algorithm: alg, Rate: core.PerHour(10)}
			c := bind(t, s, l)
			_, err := c.Take(ctx, "client", 1)
			require.NoError(t, err)
			before, err := c.Peek(ctx, "client", 1)
			require.NoError(t, err)
			var ds [1]core.Decision
			start := time.Now()
			at, err := c.Counter.Take(ctx, "client", 3, ds[:])
			require.NoError(t, err)
			require.True(t, ds[0].Allowed)
			assert.Equal(t, 6, ds[0].Remaining)
			assert.WithinDuration(t, start, at, 5*time.Second, "Redis TIME")
			assert.Zero(t, at.Nanosecond()%1000, "whole microseconds")
			require.NoError(t, c.Refund(ctx, "client", 3, at, ds[:]))
			after, err := c.Peek(ctx, "client", 1)
			require.NoError(t, err)
			assert.Equal(t, before.Remaining, after.Remaining)
			if alg == core.SlidingWindowLog {
				key, err := s.Key(l, "client")
				require.NoError(t, err)
				n, err := rdb.ZCard(ctx, key).Result()
				require.NoError(t, err)
				assert.Equal(t, int64(1), n, "the log holds the first request only")
			}
		})
	}
}

// TestLogRefundAtOneInstant: a sliding window log's refund removes the
// last entries of its instant, so that a request logged at the same
// instant afterwards gets entries of its own instead of overwriting one.
func TestLogRefundAtOneInstant(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch.Add(time.Second))
	s := newStore(t, rdb, clock)
	l := core.Limit{Name: "log", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(10)}
	c := bind(t, s, l)
	var ds [1]core.Decision
	at, err := c.Counter.Take(ctx, "client", 2, ds[:])
	require.NoError(t, err)
	_, err = c.Counter.Take(ctx, "client", 3, ds[:])
	require.NoError(t, err)
	require.NoError(t, c.Refund(ctx, "client", 2, at, ds[:]))
	d, err := c.Take(ctx, "client", 2)
	require.NoError(t, err)
	assert.Equal(t, 10-3-2, d.Remaining)
	key, err := s.Key(l, "client")
	require.NoError(t, err)
	n, err := rdb.ZCard(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)
}

// TestAllLimitsInOneScript: a decision by several limits is one command,
// whose keys share one hash tag, and a rejection by one limit leaves the
// keys of the others as they were.
func TestAllLimitsInOneScript(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := &roundTrips{}
	rdb.AddHook(hook)
	ctx := context.Background()
	s := newStore(t, rdb, storetest.NewClock(storetest.Epoch.Add(time.Second)))
	limits := []core.Limit{
		{Name: "second", Algorithm: core.TokenBucket, Rate: core.PerSecond(2)},
		{Name: "minute", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(10)},
		{Name: "hour", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(100)},
	}
	c := bindAll(t, s, limits...)
	ds := make([]core.Decision, 3)
	_, err := c.Take(ctx, "client", 1, ds)
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	hook.n.Store(0)
	for i := 0; i < 3; i++ {
		_, err := c.Take(ctx, "client", 1, ds)
		require.NoError(t, err)
		require.NoError(t, c.Peek(ctx, "client", 1, ds))
	}
	assert.Equal(t, int64(6), hook.n.Load(), "one command per decision")
	assert.Equal(t, 6, commandStats(t, rdb)["fcall"])

	// The third and fourth takes were rejected by "second" only: the
	// other limits counted two requests, not four.
	assert.False(t, ds[0].Allowed)
	require.NoError(t, c.Peek(ctx, "client", 0, ds))
	assert.Equal(t, 0, ds[0].Remaining)
	assert.Equal(t, 8, ds[1].Remaining)
	assert.Equal(t, 98, ds[2].Remaining)

	var tags []string
	for _, l := range limits {
		key, err := s.Key(l, "client")
		require.NoError(t, err)
		n, err := rdb.Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, key)
		tags = append(tags, key[strings.Index(key, "{"):strings.Index(key, "}")+1])
	}
	assert.Equal(t, []string{tags[0], tags[0], tags[0]}, tags, "one hash tag")
}

// TestBlockNeedsNoRedis: limits of 0 requests alone never reach Redis,
// which may as well be unreachable; bound with other limits they make
// the script count nothing.
func TestBlockNeedsNoRedis(t *testing.T) {
	ctx := context.Background()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = down.Close() })
	for _, tc := range []struct {
		name  string
		clock *storetest.Clock
	}{{"redis-time", nil}, {"clock", storetest.NewClock(storetest.Epoch)}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // New waits on the unreachable server: wait together
			s := newStore(t, down, tc.clock, redisstore.WithTimeout(50*time.Millisecond))
			c := bindAll(t, s,
				core.Limit{Name: "deny", Algorithm: core.SlidingWindowLog, Rate: core.Rate{Count: 0, Period: time.Hour}},
				core.Limit{Name: "deny2", Rate: core.Rate{Count: 0, Period: time.Minute}})
			ds := make([]core.Decision, 2)
			start := time.Now()
			at, err := c.Take(ctx, "client", 5, ds)
			require.NoError(t, err)
			assert.Equal(t, core.Decision{Name: "deny", Window: time.Hour, ResetAfter: time.Hour, RetryAfter: time.Hour}, ds[0])
			assert.Equal(t, core.Decision{Name: "deny2", Window: time.Minute, ResetAfter: time.Minute, RetryAfter: time.Minute}, ds[1])
			require.NoError(t, c.Peek(ctx, "client", 0, ds))
			assert.False(t, ds[0].Allowed)
			require.NoError(t, c.Refund(ctx, "client", 5, at, ds))
			assert.Less(t, time.Since(start), 40*time.Millisecond, "no attempt to reach Redis")
			_, err = c.Take(ctx, "client", -1, ds)
			assert.ErrorIs(t, err, core.ErrCostExceedsLimit)

			// With another limit, the script runs, and fails on this client.
			mixed := bindAll(t, s,
				core.Limit{Name: "deny", Rate: core.Rate{Count: 0, Period: time.Hour}},
				core.Limit{Name: "api", Rate: core.PerMinute(5)})
			_, err = mixed.Take(ctx, "client", 1, ds)
			assert.Error(t, err)
		})
	}

	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, rdb, nil)
	c := bindAll(t, s,
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		core.Limit{Name: "deny", Rate: core.Rate{Count: 0, Period: time.Hour}})
	ds := make([]core.Decision, 2)
	for i := 0; i < 3; i++ {
		_, err := c.Take(ctx, "client", 1, ds)
		require.NoError(t, err)
		assert.True(t, ds[0].Allowed)
		assert.Equal(t, 4, ds[0].Remaining, "counted nothing")
		assert.False(t, ds[1].Allowed)
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "a limiter with a block writes nothing")
}

// TestTakeAllRefunds: core.TakeAll over two limiters on the Redis store,
// on two keys: when the second rejects a request, the first gives back
// what it counted, through the store's refund.
func TestTakeAllRefunds(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for _, clock := range []*storetest.Clock{nil, storetest.NewClock(storetest.Epoch.Add(time.Second))} {
				s := newStore(t, rdb, clock)
				user := core.Must(core.NewLimiter(core.Limit{Name: "user", Algorithm: alg, Rate: core.PerHour(10)}, core.WithStore(s)))
				ip := core.Must(core.NewLimiter(core.Limit{Name: "ip", Algorithm: alg, Rate: core.PerHour(3)}, core.WithStore(s)))
				checks := []core.Check{{Limiter: user, Key: "alice"}, {Limiter: ip, Key: "192.0.2.1"}}
				for i := 0; i < 5; i++ {
					d, err := core.TakeAll(ctx, checks, 1)
					require.NoError(t, err)
					assert.Equal(t, i < 3, d.Allowed, "request %d", i)
				}
				d, err := user.Take(ctx, "alice", 0)
				require.NoError(t, err)
				assert.Equal(t, 7, d.Remaining, "the user's limit kept the 3 admitted requests only")
			}
		})
	}
}
