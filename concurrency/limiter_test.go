package concurrency_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func TestNewLimiterBadInput(t *testing.T) {
	for name, c := range map[string]struct {
		max  int
		opts []concurrency.Option
		want string
	}{
		"max 0":          {0, nil, "max 0"},
		"max negative":   {-3, nil, "max -3"},
		"max too large":  {concurrency.MaxSlots + 1, nil, "max 1048577"},
		"ttl too short":  {1, []concurrency.Option{concurrency.WithLeaseTTL(time.Millisecond)}, "lease TTL 1ms"},
		"ttl too long":   {1, []concurrency.Option{concurrency.WithLeaseTTL(25 * time.Hour)}, "lease TTL 25h0m0s"},
		"retry too long": {1, []concurrency.Option{concurrency.WithRetryAfter(2 * time.Hour)}, "retry-after 2h0m0s"},
		"retry zero":     {1, []concurrency.Option{concurrency.WithRetryAfter(0)}, "retry-after 0s"},
		"name empty":     {1, []concurrency.Option{concurrency.WithName("")}, "1 to 64 bytes"},
		"name space":     {1, []concurrency.Option{concurrency.WithName("up loads")}, `character ' '`},
		"name brace":     {1, []concurrency.Option{concurrency.WithName("a{b}")}, `character '{'`},
		"name long":      {1, []concurrency.Option{concurrency.WithName(strings.Repeat("x", 65))}, "1 to 64 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := concurrency.NewLimiter(c.max, c.opts...)
			require.ErrorIs(t, err, core.ErrInvalidLimit)
			assert.ErrorContains(t, err, c.want)
		})
	}
	_, err := concurrency.NewLimiter(1, concurrency.WithStore(nil))
	assert.Error(t, err)
	_, err = concurrency.NewLimiter(1, concurrency.WithLogger(nil))
	assert.Error(t, err)
	_, err = concurrency.NewLimiter(1, concurrency.WithStore(&concurrency.MemoryStore{MaxKeys: -1}))
	assert.ErrorContains(t, err, "MaxKeys -1", "a store out of range is an error at construction, not a failure on every request")

	lim, err := concurrency.NewLimiter(8)
	require.NoError(t, err)
	assert.Equal(t, "8-in-flight", lim.Name())
	assert.Equal(t, 8, lim.Max())
}

func TestAcquireRelease(t *testing.T) {
	lim, err := concurrency.NewLimiter(2, concurrency.WithName("uploads"), concurrency.WithRetryAfter(3*time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	spare := lim.Spare(2)

	r1, a, err := lim.Acquire(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, concurrency.Result{Admitted: true, InFlight: 1, Max: 2}, r1)
	assert.True(t, spare())
	r2, b, _ := lim.Acquire(ctx, "alice")
	assert.Equal(t, concurrency.Result{Admitted: true, InFlight: 2, Max: 2}, r2)
	assert.False(t, spare(), "2 in flight: no spare capacity below 2")
	r3, c, err := lim.Acquire(ctx, "alice")
	require.NoError(t, err, "a refusal is not an error")
	assert.Nil(t, c)
	assert.Equal(t, concurrency.Result{InFlight: 2, Max: 2, RetryAfter: 3 * time.Second}, r3)
	assert.Equal(t, 2, lim.InFlight(), "refusals are not in flight")

	_, d, _ := lim.Acquire(ctx, "bob")
	require.NotNil(t, d)
	assert.Equal(t, 3, lim.InFlight(), "InFlight counts every key")

	a.Release()
	a.Release() // a second release does nothing
	c.Release() // nil: nothing
	assert.Equal(t, 2, lim.InFlight())
	r4, e, _ := lim.Acquire(ctx, "alice")
	assert.True(t, r4.Admitted, "a's slot is back")
	b.Release()
	d.Release()
	e.Release()
	assert.Zero(t, lim.InFlight())
	assert.True(t, spare())
	assert.False(t, lim.Spare(0)(), "Spare(0) is never true")

	_, _, err = lim.Acquire(ctx, "")
	assert.ErrorIs(t, err, core.ErrMissingKey)
}

// A lease whose holder vanished (never released) frees its slot within
// its TTL; a lease renewed while held keeps it.
func TestLeaseExpiryAndRenewal(t *testing.T) {
	clock := storetest.NewClock(t0)
	store := &concurrency.MemoryStore{Clock: clock.Now}
	const ttl = 4 * time.Second
	vanished, err := concurrency.NewLimiter(1, concurrency.WithName("jobs"), concurrency.WithStore(store),
		concurrency.WithLeaseTTL(ttl), concurrency.WithManualRenewal())
	require.NoError(t, err)
	other, err := concurrency.NewLimiter(1, concurrency.WithName("jobs"), concurrency.WithStore(store),
		concurrency.WithLeaseTTL(ttl), concurrency.WithManualRenewal())
	require.NoError(t, err)
	ctx := context.Background()

	// The holder takes the slot and is never heard of again: nothing
	// renews it (the limiter that would is gone).
	_, lost, _ := vanished.Acquire(ctx, "k")
	require.NotNil(t, lost)
	clock.Advance(ttl - time.Nanosecond)
	r, _, _ := other.Acquire(ctx, "k")
	assert.False(t, r.Admitted, "the lease still runs")
	clock.Advance(time.Nanosecond)
	r, held, _ := other.Acquire(ctx, "k")
	require.True(t, r.Admitted, "the vanished holder's slot is free after its TTL")

	// other holds it now, and renews it every quarter of the TTL: the
	// request runs for 10 TTLs without losing its slot.
	for range 40 {
		clock.Advance(ttl / 4)
		assert.True(t, concurrency.RenewDue(other))
		r, _, _ = vanished.Acquire(ctx, "k")
		require.False(t, r.Admitted, "a renewed lease keeps its slot")
	}
	held.Release()
	assert.False(t, concurrency.RenewDue(other), "nothing held: renewing stops")
	r, again, _ := vanished.Acquire(ctx, "k")
	assert.True(t, r.Admitted)
	again.Release()
}

// Many goroutines on one key never have more than max requests in
// flight, and every slot comes back.
func TestNeverMoreThanMax(t *testing.T) {
	const max, workers, rounds = 3, 16, 300
	lim, err := concurrency.NewLimiter(max)
	require.NoError(t, err)
	var inside, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				r, lease, err := lim.Acquire(context.Background(), "shared")
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
				if n > max || r.InFlight > max {
					t.Errorf("%d in flight (store says %d), max %d", n, r.InFlight, max)
				}
				inside.Add(-1)
				lease.Release()
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(max))
	assert.Positive(t, admitted.Load())
	assert.Zero(t, lim.InFlight())
	r, lease, _ := lim.Acquire(context.Background(), "shared")
	assert.Equal(t, 1, r.InFlight, "every slot came back")
	lease.Release()
}

// fullStore returns a memory store that is full: MaxKeys 1 holds one key
// per shard, so of 100 keys held some find no room (ErrFull), a real
// failure of the store.
// outage is a memory store that fails while down is set: for the fail
// mode's tests (a full store is no longer a failure; see
// TestFullStoreRefusesWhateverTheFailMode).
type outage struct {
	concurrency.MemoryStore
	down atomic.Bool
}

var errDown = errors.New("store down")

func (o *outage) Acquire(ctx context.Context, name, key string, id uint64, max int, ttl time.Duration) (int, bool, error) {
	if o.down.Load() {
		return 0, false, errDown
	}
	return o.MemoryStore.Acquire(ctx, name, key, id, max, ttl)
}

// fill acquires a slot for 100 keys, the store down for every third.
func fill(t *testing.T, lim *concurrency.Limiter, store *outage) (failed int, leases []*concurrency.Lease) {
	t.Helper()
	for i := range 100 {
		store.down.Store(i%3 == 0)
		r, lease, err := lim.Acquire(context.Background(), "key-"+strconv.Itoa(i))
		if err != nil {
			require.ErrorIs(t, err, errDown)
			failed++
		}
		if r.Admitted {
			leases = append(leases, lease)
		}
	}
	store.down.Store(false)
	return failed, leases
}

func TestFailMode(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	store := &outage{}
	open, err := concurrency.NewLimiter(1, concurrency.WithStore(store), concurrency.WithLogger(log))
	require.NoError(t, err)
	failed, leases := fill(t, open, store)
	require.Equal(t, 34, failed)
	assert.Len(t, leases, 100, "fail open: all admitted")
	assert.Equal(t, 100, open.InFlight(), "admitted failing open, still in flight")
	assert.Equal(t, 1, strings.Count(logs.String(), "concurrency store failing, admitting"), "logged once per episode:\n%s", logs.String())
	for _, l := range leases {
		l.Release()
	}
	assert.Zero(t, open.InFlight())
	assert.Contains(t, logs.String(), "answering again")

	logs.Reset()
	store = &outage{}
	closed, err := concurrency.NewLimiter(1, concurrency.WithStore(store),
		concurrency.WithLogger(log), concurrency.WithFailClosed())
	require.NoError(t, err)
	failed, leases = fill(t, closed, store)
	assert.Len(t, leases, 100-failed, "fail closed: refused when the store failed")
	assert.Equal(t, 1, strings.Count(logs.String(), "refusing requests (fail closed)"))
	// A request refused because the store failed gets the store's error,
	// the limiter's Retry-After, and no lease; the middleware answers it
	// 503 (package adapter's tests).
	store.down.Store(true)
	r, lease, err := closed.Acquire(context.Background(), "key-x")
	assert.ErrorIs(t, err, errDown)
	assert.Equal(t, concurrency.Result{Max: 1, RetryAfter: concurrency.DefaultRetryAfter}, r)
	assert.Nil(t, lease)
	lease.Release() // nil: nothing
	for _, l := range leases {
		l.Release()
	}
	assert.Zero(t, closed.InFlight(), "a refusal holds nothing")
}

func BenchmarkAcquireRelease(b *testing.B) {
	lim, _ := concurrency.NewLimiter(64)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, lease, _ := lim.Acquire(ctx, "k")
			lease.Release()
		}
	})
}

// Many leases held at once are all renewed on a tick (a few store calls
// at a time), and all of them keep their slots.
func TestManyLeasesRenewed(t *testing.T) {
	clock := storetest.NewClock(t0)
	store := &concurrency.MemoryStore{Clock: clock.Now}
	const ttl = time.Second
	lim, err := concurrency.NewLimiter(1, concurrency.WithStore(store), concurrency.WithLeaseTTL(ttl), concurrency.WithManualRenewal())
	require.NoError(t, err)
	ctx := context.Background()
	var leases []*concurrency.Lease
	for i := range 100 {
		_, lease, err := lim.Acquire(ctx, "k"+strconv.Itoa(i))
		require.NoError(t, err)
		leases = append(leases, lease)
	}
	leases[7].Release() // released before the renewal: not renewed
	for range 12 {
		clock.Advance(ttl / 4)
		concurrency.RenewDue(lim)
	}
	for i := range 100 {
		r, lease, _ := lim.Acquire(ctx, "k"+strconv.Itoa(i))
		assert.Equal(t, i == 7, r.Admitted, "key %d", i)
		lease.Release()
	}
	for _, l := range leases {
		l.Release()
	}
	assert.Zero(t, lim.InFlight())
}
