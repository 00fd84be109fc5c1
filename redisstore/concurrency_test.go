package redisstore_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/stdhttp"
)

// newInFlight returns a concurrency limiter of max slots on the leases of
// s.
func newInFlight(t *testing.T, s *redisstore.Store, max int, opts ...concurrency.Option) *concurrency.Limiter {
	t.Helper()
	lim, err := concurrency.NewLimiter(max, append([]concurrency.Option{concurrency.WithName("reports"),
		concurrency.WithStore(s.Concurrency())}, opts...)...)
	require.NoError(t, err)
	return lim
}

// A hand-computed trace on a test clock, through two stores (two
// servers) on one Redis: the first server takes a slot and dies, never
// releasing it; the second gets the slot back when the lease ends.
func TestConcurrencyLeaseTrace(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	clock := storetest.NewClock(storetest.Epoch)
	prefix := redisstore.WithPrefix(newPrefix())
	dead := newStore(t, rdb, clock, prefix).Concurrency()
	live := newStore(t, rdb, clock, prefix).Concurrency()
	ctx := context.Background()
	const ttl = 4 * time.Second

	held, ok, err := dead.Acquire(ctx, "reports", "alice", 1, 2, ttl) // ends at 4s
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1, held)
	clock.Advance(time.Second)
	held, ok, _ = live.Acquire(ctx, "reports", "alice", 1, 2, ttl) // same ID, another server: another lease; ends at 5s
	assert.True(t, ok)
	assert.Equal(t, 2, held)
	held, ok, _ = live.Acquire(ctx, "reports", "alice", 2, 2, ttl)
	assert.False(t, ok, "2 slots held")
	assert.Equal(t, 2, held)
	_, ok, _ = live.Acquire(ctx, "reports", "bob", 3, 2, ttl)
	assert.True(t, ok, "another key")
	_, ok, _ = live.Acquire(ctx, "uploads", "alice", 4, 2, ttl)
	assert.True(t, ok, "another limiter name")

	clock.Advance(2 * time.Second) // 3s
	renewed, err := live.Renew(ctx, "reports", "alice", 1, ttl)
	require.NoError(t, err)
	assert.True(t, renewed) // ends at 7s
	clock.Advance(time.Second - time.Millisecond)
	_, ok, _ = live.Acquire(ctx, "reports", "alice", 5, 2, ttl)
	assert.False(t, ok, "3.999s: the dead server's lease still runs")
	clock.Advance(time.Millisecond) // 4s: it ended
	held, ok, _ = live.Acquire(ctx, "reports", "alice", 5, 2, ttl)
	assert.True(t, ok, "the dead server's slot is free at the end of its lease")
	assert.Equal(t, 2, held)
	renewed, _ = dead.Renew(ctx, "reports", "alice", 1, ttl)
	assert.False(t, renewed, "an ended lease is not renewed")
	held, ok, _ = live.Acquire(ctx, "reports", "alice", 5, 2, ttl)
	assert.True(t, ok, "sent again: renewed, not counted twice")
	assert.Equal(t, 2, held)

	require.NoError(t, live.Release(ctx, "reports", "alice", 1))
	require.NoError(t, live.Release(ctx, "reports", "alice", 1), "twice: nothing")
	held, ok, _ = live.Acquire(ctx, "reports", "alice", 6, 2, ttl)
	assert.True(t, ok)
	assert.Equal(t, 2, held)
}

// The keys: one sorted set per client and limiter name, no client text in
// Redis, a TTL on every key, and no key once the last lease is released.
func TestConcurrencyKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, rdb, nil, redisstore.WithPrefix("cc"))
	lim := newInFlight(t, s, 3)
	ctx := context.Background()
	hostile := "}{evil} \r\nKEYS *" + strings.Repeat("x", 10_000)
	_, a, err := lim.Acquire(ctx, hostile)
	require.NoError(t, err)
	_, b, _ := lim.Acquire(ctx, hostile)

	keys, err := rdb.Keys(ctx, "cc*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	key := keys[0]
	assert.Len(t, key, 2+24, "prefix, {hash}, tag")
	assert.NotContains(t, key, "evil")
	assert.Equal(t, "zset", rdb.Type(ctx, key).Val())
	members := rdb.ZRange(ctx, key, 0, -1).Val()
	assert.Len(t, members, 2)
	for _, m := range members {
		assert.NotContains(t, m, "evil")
		assert.Less(t, len(m), 32)
	}
	pttl := rdb.PTTL(ctx, key).Val()
	assert.Greater(t, pttl, concurrency.DefaultLeaseTTL)
	assert.LessOrEqual(t, pttl, concurrency.DefaultLeaseTTL+time.Second)

	a.Release()
	b.Release()
	assert.Zero(t, rdb.Exists(ctx, key).Val(), "no lease held: no key")
}

// Two limiters (two servers) sharing a Redis never have more than max
// requests of a key in flight between them, under many goroutines.
func TestConcurrencySharedNeverOverMax(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redisstore.WithPrefix(newPrefix())
	const max = 4
	lims := []*concurrency.Limiter{
		newInFlight(t, newStore(t, srv.Client(t), nil, prefix), max),
		newInFlight(t, newStore(t, srv.Client(t), nil, prefix), max),
	}
	var inside, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lim := lims[g%2]
			for range 20 {
				r, lease, err := lim.Acquire(context.Background(), "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Admitted {
					continue
				}
				admitted.Add(1)
				n := inside.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(100 * time.Microsecond) // hold the slot while others try
				inside.Add(-1)
				lease.Release()
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(max))
	assert.GreaterOrEqual(t, admitted.Load(), int64(max))
	assert.Zero(t, lims[0].InFlight()+lims[1].InFlight())
}

// Real time, Redis TIME: a server that dies holding a slot (its client is
// gone, nothing renews or releases its lease) frees it within the lease
// TTL; a live server's renewals keep a long request's slot for many TTLs.
func TestConcurrencyCrashAndRenewal(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redisstore.WithPrefix(newPrefix())
	const ttl = 200 * time.Millisecond
	quietLog := concurrency.WithLogger(slog.New(slog.DiscardHandler))

	doomed := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	dying := newInFlight(t, newStore(t, doomed, nil, prefix), 1, concurrency.WithLeaseTTL(ttl), quietLog)
	other := newInFlight(t, newStore(t, srv.Client(t), nil, prefix), 1, concurrency.WithLeaseTTL(ttl))
	ctx := context.Background()

	r, lost, err := dying.Acquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, r.Admitted)
	t.Cleanup(lost.Release) // stops its renewals, which fail from now on
	died := time.Now()
	require.NoError(t, doomed.Close()) // the server is gone
	r, _, _ = other.Acquire(ctx, "k")
	assert.False(t, r.Admitted, "the lease runs on")
	var freed time.Duration
	for deadline := died.Add(5 * ttl); time.Now().Before(deadline); time.Sleep(ttl / 20) {
		if r, lease, _ := other.Acquire(ctx, "k"); r.Admitted {
			freed = time.Since(died)
			lease.Release()
			break
		}
	}
	require.NotZero(t, freed, "the slot never came back")
	assert.Less(t, freed, 2*ttl, "freed at the end of its TTL (plus polling and scheduling)")
	t.Logf("slot freed %s after its holder died (lease TTL %s)", freed.Round(time.Millisecond), ttl)

	// A long request on a live server: 5 TTLs, renewed all along.
	_, long, err := other.Acquire(ctx, "k")
	require.NoError(t, err)
	require.NotNil(t, long)
	probe := newInFlight(t, newStore(t, srv.Client(t), nil, prefix), 1, concurrency.WithLeaseTTL(ttl))
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(ttl / 10) {
		r, lease, err := probe.Acquire(ctx, "k")
		require.NoError(t, err)
		if !assert.False(t, r.Admitted, "the renewed lease lost its slot") {
			lease.Release()
			break
		}
	}
	long.Release()
	r, lease, _ := probe.Acquire(ctx, "k")
	assert.True(t, r.Admitted, "released: free at once")
	lease.Release()
}

// Redis down: the limiter's fail mode decides, logged once per episode,
// and the slots work again when Redis is back.
func TestConcurrencyRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStore(t, rdb, nil, redisstore.WithTimeout(200*time.Millisecond))
	logs := &logRecorder{}
	log := concurrency.WithLogger(slog.New(logs))
	open := newInFlight(t, s, 1, log, concurrency.WithName("open"))
	closed := newInFlight(t, s, 1, log, concurrency.WithName("closed"), concurrency.WithFailClosed())
	ctx := context.Background()

	srv.Stop(t)
	for range 5 {
		r, lease, err := open.Acquire(ctx, "k")
		require.Error(t, err)
		assert.True(t, r.Admitted, "fail open")
		assert.NotNil(t, lease)
		defer lease.Release()
		r, lease, err = closed.Acquire(ctx, "k")
		require.Error(t, err)
		assert.False(t, r.Admitted, "fail closed")
		assert.Nil(t, lease)
	}
	_, _, err := open.Acquire(ctx, "k")
	assert.ErrorIs(t, err, redisstore.ErrUnavailable, "the circuit opened: failing fast")
	assert.Equal(t, 6, open.InFlight(), "admitted failing open: counted in this instance")
	msgs, _ := logs.messages("limiter")
	assert.Equal(t, 2, len(msgs), "one line per limiter: %q", msgs)

	// Fail closed over HTTP: 503 with Retry-After.
	w := httptest.NewRecorder()
	stdhttp.Concurrency(closed, keyfuncs.PeerIP)(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))

	srv.Restart(t)
	require.Eventually(t, func() bool {
		r, lease, err := closed.Acquire(ctx, "k")
		lease.Release()
		return err == nil && r.Admitted
	}, 10*time.Second, 50*time.Millisecond, "slots again once Redis answers")
	msgs, _ = logs.messages("limiter")
	assert.Contains(t, strings.Join(msgs, "\n"), "answering again")
}

// A panicking handler releases its slot in Redis.
func TestConcurrencyPanicReleasesLease(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s := newStore(t, rdb, nil, redisstore.WithPrefix("pp"))
	lim := newInFlight(t, s, 1)
	h := stdhttp.Concurrency(lim, keyfuncs.PeerIP)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		assert.Equal(t, int64(1), rdb.DBSize(context.Background()).Val(), "the lease is in Redis")
		panic("handler bug")
	}))
	func() {
		defer func() { assert.Equal(t, "handler bug", recover()) }()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	assert.Zero(t, rdb.DBSize(context.Background()).Val(), "released")
	assert.Zero(t, lim.InFlight())
}

// The leases on a real three-node Redis Cluster: one key per script, so no
// CROSSSLOT; keys spread over the nodes.
func TestConcurrencyCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cluster := redistest.StartCluster(t, 3)
	s := newStore(t, cluster.Client(t), nil)
	lim := newInFlight(t, s, 1)
	ctx := context.Background()
	var leases []*concurrency.Lease
	for i := range 30 {
		r, lease, err := lim.Acquire(ctx, "client-"+string(rune('a'+i)))
		require.NoError(t, err)
		require.True(t, r.Admitted)
		leases = append(leases, lease)
		r, _, err = lim.Acquire(ctx, "client-"+string(rune('a'+i)))
		require.NoError(t, err)
		assert.False(t, r.Admitted)
	}
	for i, node := range cluster.Nodes {
		assert.Positive(t, node.Client(t).DBSize(ctx).Val(), "node %d holds no key", i)
	}
	for _, l := range leases {
		l.Release()
	}
	for _, node := range cluster.Nodes {
		assert.Zero(t, node.Client(t).DBSize(ctx).Val())
	}
}

// A request whose client went away before its slot was taken is refused
// and logged as nothing: the store did not fail, and no slot stays taken.
func TestConcurrencyCancelled(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	logs := &logRecorder{}
	lim := newInFlight(t, newStore(t, rdb, nil), 1, concurrency.WithLogger(slog.New(logs)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, lease, err := lim.Acquire(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, r.Admitted)
	assert.Nil(t, lease)
	msgs, _ := logs.messages("limiter")
	assert.Empty(t, msgs)
	assert.Zero(t, rdb.DBSize(context.Background()).Val(), "no slot taken")
	r, lease, err = lim.Acquire(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, r.Admitted)
	lease.Release()
}

// TestConcurrencyMemoryPerLease measures the Redis memory of leases
// (used_memory growth over 5,000 clients): a client's first lease, which
// costs its key, and its second.
func TestConcurrencyMemoryPerLease(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 20,000 acquires")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	leases := newStore(t, rdb, nil, redisstore.WithPrefix("rk")).Concurrency()
	ctx := context.Background()
	used := func() int64 {
		info := rdb.Info(ctx, "memory").Val()
		_, v, _ := strings.Cut(info, "used_memory:")
		v, _, _ = strings.Cut(v, "\r\n")
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		return n
	}
	const clients = 5_000
	// acquire takes a lease of ID id+i for each client i, and returns the
	// memory that each took.
	acquire := func(id int) int64 {
		before := used()
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < clients; i += 32 {
					_, ok, err := leases.Acquire(ctx, "reports", "client-"+strconv.Itoa(i), uint64(id+i), 8, time.Hour)
					assert.NoError(t, err)
					assert.True(t, ok)
				}
			}()
		}
		wg.Wait()
		return (used() - before) / clients
	}
	// Warm up: open the connections, whose buffers count in used_memory.
	for range 2 {
		_ = acquire(1)
		require.NoError(t, rdb.FlushDB(ctx).Err()) // this test's own server
	}
	first := acquire(1)
	second := acquire(1 + clients)
	t.Logf("Redis memory: %d bytes for a client's first lease (its key), %d bytes for its second", first, second)
	assert.Less(t, first, int64(400))
	assert.Less(t, second, int64(100))
}
