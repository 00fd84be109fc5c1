package hybrid_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/hybrid"
	"github.com/ratekit/ratekit/redisstore/internal/testenv"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// newHybrid returns a hybrid store on rdb under the test clock, closed at
// the end of the test. The interval is long: tests sync by need, or by
// calling Close.
func newHybrid(t testing.TB, rdb redis.UniversalClient, c *storetest.Clock, interval time.Duration, opts ...hybrid.Option) *hybrid.Store {
	t.Helper()
	opts = append([]hybrid.Option{hybrid.WithClock(c.Now), hybrid.WithTimeout(2 * time.Second)}, opts...)
	h, err := hybrid.New(rdb, interval, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// evalshas is how many script runs Redis has served: the hybrid store's
// round trips, one per sync.
func evalshas(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

func TestOneServerIsExact(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	clock := storetest.NewClock(storetest.Epoch)
	h := newHybrid(t, rdb, clock, time.Hour)
	for _, algo := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(algo.String(), func(t *testing.T) {
			lim := core.Must(core.NewLimiter(core.Limit{Name: "one-" + algo.String(), Algorithm: algo, Rate: core.PerMinute(10)}, core.WithStore(h)))
			mem := core.Must(core.NewLimiter(core.Limit{Name: "one-" + algo.String(), Algorithm: algo, Rate: core.PerMinute(10)},
				core.WithStore(&core.MemoryStore{Clock: clock.Now})))
			ctx := context.Background()
			// Same decisions as the memory store, request by request,
			// over two windows and a half.
			for i := range 150 {
				d, err := lim.Take(ctx, "alice", 1)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := mem.Take(ctx, "alice", 1)
				if d != want {
					t.Fatalf("request %d at %s: hybrid %+v, memory %+v", i, clock.Now().Sub(storetest.Epoch), d, want)
				}
				clock.Advance(time.Second)
			}
		})
	}
}

func TestRefusesWhatItCannotMerge(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	if _, err := hybrid.New(rdb, 0); err == nil {
		t.Fatal("interval 0: no error")
	}
	if _, err := hybrid.New(rdb, -time.Second); err == nil {
		t.Fatal("negative interval: no error")
	}
	if _, err := hybrid.New(nil, time.Second); err == nil {
		t.Fatal("no client: no error")
	}
	if _, err := hybrid.New(rdb, time.Second, hybrid.WithRegion("eu", nil)); err == nil {
		t.Fatal("a region without peers: no error")
	}
	if _, err := hybrid.New(rdb, time.Second, hybrid.WithRegion("e u", map[string]redis.UniversalClient{"us": rdb})); err == nil {
		t.Fatal("a bad region name: no error")
	}
	h := newHybrid(t, rdb, storetest.NewClock(storetest.Epoch), time.Second)
	for _, algo := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.SlidingWindowLog} {
		_, err := core.NewLimiter(core.Limit{Algorithm: algo, Rate: core.PerMinute(10)}, core.WithStore(h))
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), "fixed-window or sliding-window-counter") {
			t.Errorf("%s: %v, want an ErrInvalidLimit that names the algorithms that merge", algo, err)
		}
	}
	if _, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(0)}, core.WithStore(h)); err != nil {
		t.Errorf("a limit of 0 requests: %v", err)
	}
}

// TestOptionTypesDiffer: the exact store's options and the hybrid store's
// are types that cannot be assigned or converted to each other, so an
// option of one store passed to the other's constructor does not compile
// (hybrid.WithRegion to redisstore.New, redisstore.WithFallback to
// hybrid.New). A test cannot compile code that must not compile; this
// checks the types the compiler checks.
func TestOptionTypesDiffer(t *testing.T) {
	hyb, exact := reflect.TypeFor[hybrid.Option](), reflect.TypeFor[redisstore.Option]()
	if hyb.AssignableTo(exact) || exact.AssignableTo(hyb) || hyb.ConvertibleTo(exact) || exact.ConvertibleTo(hyb) {
		t.Fatalf("%v and %v can stand for each other", hyb, exact)
	}
	for _, c := range []struct {
		fn   any
		want reflect.Type
	}{
		{hybrid.New, hyb}, {hybrid.WithRegion, hyb}, {hybrid.WithMaxKeys, hyb}, {hybrid.WithLogger, hyb},
		{hybrid.WithPrefix, hyb}, {hybrid.WithTimeout, hyb}, {hybrid.WithClock, hyb},
		{redisstore.New, exact}, {redisstore.WithFallback, exact}, {redisstore.WithInFlight, exact},
		{redisstore.WithPrefix, exact}, {redisstore.WithTimeout, exact}, {redisstore.WithClock, exact},
	} {
		ft := reflect.TypeOf(c.fn)
		got := ft.Out(0)
		if ft.IsVariadic() { // a constructor: its options
			got = ft.In(ft.NumIn() - 1).Elem()
		}
		if got != c.want {
			t.Errorf("%v: options of type %v, want %v", ft, got, c.want)
		}
	}
}

// TestOptionErrors: bad options, limits and requests are errors; keys are
// under the prefix.
func TestOptionErrors(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	for _, opt := range []hybrid.Option{
		hybrid.WithPrefix(""),
		hybrid.WithPrefix("a{b}"),
		hybrid.WithPrefix(strings.Repeat("p", 65)),
		hybrid.WithTimeout(0),
		hybrid.WithClock(nil),
		hybrid.WithMaxKeys(1),
		hybrid.WithLogger(nil),
		hybrid.WithRegion("eu", map[string]redis.UniversalClient{"eu": rdb}),
		hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": nil}),
		hybrid.WithRegion("eu", map[string]redis.UniversalClient{"u s": rdb}),
	} {
		if _, err := hybrid.New(rdb, time.Second, opt); err == nil {
			t.Error("a bad option: no error")
		}
	}
	h := newHybrid(t, rdb, storetest.NewClock(storetest.Epoch), time.Hour, hybrid.WithPrefix("app:v2"), hybrid.WithMaxKeys(64))
	for _, limits := range [][]core.Limit{
		nil,
		{{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 1, Period: time.Microsecond}}},
		{{Name: "a", Rate: core.PerMinute(1)}, {Name: "a", Rate: core.PerHour(1)}},
	} {
		if _, err := h.Bind(limits); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("Bind(%v): %v, want an ErrInvalidLimit", limits, err)
		}
	}
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}, core.WithStore(h)))
	if _, err := lim.Take(context.Background(), "k", 6); !errors.Is(err, core.ErrCostExceedsLimit) {
		t.Errorf("a cost over the limit: %v", err)
	}
	takeN(t, lim, "k", 1)
	if err := h.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Error("no key in Redis after a sync")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "app:v2{") {
			t.Errorf("key %q is not under the prefix and the client's hash tag", k)
		}
	}
}

// TestRedisAwayAtStart: a store whose Redis does not answer at start is
// still made, with its circuit open, and decides within its share.
func TestRedisAwayAtStart(t *testing.T) {
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = refused.Close() }) // after the store's Close: ends its probe
	h, err := hybrid.New(refused, time.Hour, hybrid.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}, core.WithStore(h)))
	if n := takeN(t, lim, "k", 12); n != 10 {
		t.Errorf("admitted %d of 12 under 10 with Redis away; one server's share is the whole limit", n)
	}
}

// TestServersShareExactly runs four servers on one limit,
// concurrently: the leases let through exactly the limit, not one more.
func TestServersShareExactly(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	limit := core.Limit{Name: "shared", Algorithm: core.FixedWindow, Rate: core.PerMinute(1000)}
	var lims []*core.Limiter
	for range 4 {
		h := newHybrid(t, srv.Client(t), clock, time.Hour)
		lims = append(lims, core.Must(core.NewLimiter(limit, core.WithStore(h))))
	}
	before := evalshas(t, srv.Client(t))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, lim := range lims {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 500 {
					d, err := lim.Take(context.Background(), "k", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Errorf("admitted %d of 8000 requests under a limit of 1000", got)
	}
	calls := evalshas(t, srv.Client(t)) - before
	t.Logf("8000 requests, 1000 admitted, %d round trips to Redis", calls)
	if calls > 400 {
		t.Errorf("%d round trips for 8000 requests; leases should make it far fewer", calls)
	}
}

// hashTotals reads, from every window hash in rdb, this region's count
// and the other regions' (fields t and R of the hybrid script).
func hashTotals(t testing.TB, rdb *redis.Client) (own, others int64) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if rdb.Type(ctx, k).Val() != "hash" || rdb.HExists(ctx, k, "g").Val() {
			continue
		}
		v := rdb.HMGet(ctx, k, "t", "R").Val()
		for i, x := range v {
			if s, ok := x.(string); ok {
				n, _ := strconv.ParseInt(s, 10, 64)
				if i == 0 {
					own += n
				} else {
					others += n
				}
			}
		}
	}
	return own, others
}

func takeN(t testing.TB, lim *core.Limiter, key string, n int) (admitted int) {
	t.Helper()
	for range n {
		d, err := lim.Take(context.Background(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestOutageSendsCountsOnce pauses Redis: the servers keep deciding,
// each within its share of the limit, and when Redis is back their counts
// arrive once, however many syncs send them.
func TestOutageSendsCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	limit := core.Limit{Name: "outage", Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}
	var hs []*hybrid.Store
	var lims []*core.Limiter
	for range 2 {
		h := newHybrid(t, srv.Client(t), clock, 20*time.Millisecond, hybrid.WithTimeout(100*time.Millisecond))
		hs = append(hs, h)
		lims = append(lims, core.Must(core.NewLimiter(limit, core.WithStore(h))))
	}
	before := takeN(t, lims[0], "k", 5) + takeN(t, lims[1], "k", 5)
	if before != 10 {
		t.Fatalf("admitted %d of 10 before the outage", before)
	}
	for _, h := range append(hs, hs[0]) { // both know the other's count
		if err := h.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause(t)
	start := time.Now()
	during := takeN(t, lims[0], "k", 100) + takeN(t, lims[1], "k", 100)
	t.Logf("200 decisions in %s during the outage", time.Since(start))
	// Each of the two servers admits up to its share (50) beyond its
	// lease: the pair stays within the limit plus what they had leased.
	if during < 50 || during > 90 {
		t.Errorf("admitted %d during the outage; want at most the 90 left, each server within its share", during)
	}
	srv.Resume(t)
	for _, h := range hs {
		h.Close() // the last sync sends what each counted
	}
	own, _ := hashTotals(t, srv.Client(t))
	if own != int64(before+during) {
		t.Errorf("Redis holds %d; the servers admitted %d", own, before+during)
	}
	// A second store's syncs (and a replay of them) change nothing.
	h := newHybrid(t, srv.Client(t), clock, time.Hour)
	lim := core.Must(core.NewLimiter(limit, core.WithStore(h)))
	n := takeN(t, lim, "k", 200)
	if before+during+n != 100 {
		t.Errorf("a new server admitted %d after %d were counted; want the rest of 100", n, before+during)
	}
	h.Close()
	if own2, _ := hashTotals(t, srv.Client(t)); own2 != own+int64(n) {
		t.Errorf("Redis holds %d after more syncs; want %d", own2, own+int64(n))
	}
}

func TestOperatorControls(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	limit := core.Limit{Name: "ops", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(10)}
	ha := newHybrid(t, srv.Client(t), clock, time.Hour)
	a := core.Must(core.NewLimiter(limit, core.WithStore(ha)))
	b := core.Must(core.NewLimiter(limit, core.WithStore(newHybrid(t, srv.Client(t), clock, time.Hour))))
	ctx := context.Background()
	n := 0
	for range 6 { // the two servers' requests interleave
		n += takeN(t, a, "k", 1) + takeN(t, b, "k", 1)
	}
	if n != 10 {
		t.Fatalf("admitted %d of 12 under 10", n)
	}
	st, err := a.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if st.Decision.Allowed || !st.Tracked {
		t.Errorf("inspect of a key over its limit: %+v", st)
	}
	if err := b.Grant(ctx, "k", 3, "support ticket"); err != nil {
		t.Fatal(err)
	}
	// Server a learns of the grant at its next sync.
	if err := ha.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := takeN(t, a, "k", 5); n != 3 {
		t.Errorf("admitted %d with a grant of 3", n)
	}
	if err := a.Grant(ctx, "k", 11, "too much"); !errors.Is(err, core.ErrInvalidGrant) {
		t.Errorf("a grant over the capacity: %v", err)
	}
	found, err := a.Reset(ctx, "k", "test")
	if err != nil || !found {
		t.Fatalf("reset: %v, %v", found, err)
	}
	if n := takeN(t, a, "k", 12); n != 10 {
		t.Errorf("admitted %d after a reset; want the whole limit, 10", n)
	}
	// b held counts from before the reset: they are void, and b sees a's.
	if n := takeN(t, b, "k", 5); n != 0 {
		t.Errorf("b admitted %d after a used the whole limit", n)
	}
}

// TestRegions runs two regions, each with its own Redis, linked by
// proxies that delay and cut: each region counts the other's requests,
// keeps limiting on its own when cut off, and converges once healed,
// without counting anything twice.
func TestRegions(t *testing.T) {
	eu, us := redistest.Start(t), redistest.Start(t)
	toUS, toEU := redistest.StartProxy(t, us.Addr()), redistest.StartProxy(t, eu.Addr())
	remote := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
			ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	clock := storetest.NewClock(storetest.Epoch)
	limit := core.Limit{Name: "global", Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}
	logs := newSignalBuffer()
	logger := hybrid.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))
	euH := newHybrid(t, eu.Client(t), clock, 20*time.Millisecond, logger, hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": remote(toUS.Addr())}))
	usH := newHybrid(t, us.Client(t), clock, 20*time.Millisecond, logger, hybrid.WithRegion("us", map[string]redis.UniversalClient{"eu": remote(toEU.Addr())}))
	euL := core.Must(core.NewLimiter(limit, core.WithStore(euH)))
	usL := core.Must(core.NewLimiter(limit, core.WithStore(usH)))
	toUS.SetDelay(30 * time.Millisecond)
	toEU.SetDelay(30 * time.Millisecond)

	converged := func(want int64) {
		t.Helper()
		// A region's own count holds its servers' leases until they are
		// given back, so a sum can meet want on its way: each region must
		// hold the other's count, too.
		both := func() bool {
			eo, er := hashTotals(t, eu.Client(t))
			uo, ur := hashTotals(t, us.Client(t))
			return eo+er == want && uo+ur == want && er == uo && ur == eo
		}
		for deadline := time.Now().Add(5 * time.Second); !both() && time.Now().Before(deadline); {
			for _, rdb := range []*redis.Client{eu.Client(t), us.Client(t)} { // woken by either Redis's changes
				if keyspace(t, rdb, 100*time.Millisecond, both) {
					break
				}
			}
		}
		eo, er := hashTotals(t, eu.Client(t))
		uo, ur := hashTotals(t, us.Client(t))
		if eo+er != want || uo+ur != want || er != uo || ur != eo {
			t.Fatalf("not converged to %d: eu %d+%d, us %d+%d", want, eo, er, uo, ur)
		}
	}
	admitted := int64(takeN(t, euL, "k", 30) + takeN(t, usL, "k", 20))
	if admitted != 50 {
		t.Fatalf("admitted %d of 50 under a limit of 100", admitted)
	}
	for i := range 20 { // other clients: one send carries many windows
		admitted += int64(takeN(t, euL, "other"+strconv.Itoa(i), 1))
	}
	converged(admitted) // each region's Redis: its own count and the other's
	if strings.Contains(logs.String(), "unreachable") {
		t.Fatalf("a send failed while the link was up:\n%s", logs.String())
	}

	toUS.Cut()
	toEU.Cut()
	// Cut off, each region limits on its own counts and the last it heard
	// of the other: each admits the 50 it believes are left.
	euCut, usCut := takeN(t, euL, "k", 80), takeN(t, usL, "k", 80)
	if euCut != 50 || usCut != 50 {
		t.Errorf("during the partition eu admitted %d, us %d; want 50 each", euCut, usCut)
	}
	// The counts made during the cut are being sent, and fail.
	if !logs.await(10*time.Second, "region unreachable") {
		t.Fatalf("the partition was not logged:\n%s", logs.String())
	}
	toUS.Heal()
	toEU.Heal()
	admitted += int64(euCut + usCut)
	converged(admitted) // nothing lost, nothing counted twice
	if n := takeN(t, euL, "k", 5) + takeN(t, usL, "k", 5); n != 0 {
		t.Errorf("after the partition healed, %d more admitted over a count of %d", n, admitted)
	}
}

// A signalBuffer is a log buffer that says when something is written.
type signalBuffer struct {
	testenv.SyncBuffer
	wrote chan struct{}
}

func newSignalBuffer() *signalBuffer { return &signalBuffer{wrote: make(chan struct{}, 1)} }

// Write appends p and signals it.
func (b *signalBuffer) Write(p []byte) (int, error) {
	n, err := b.SyncBuffer.Write(p)
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}

// await reports whether the buffer holds s within d, checked at every write.
func (b *signalBuffer) await(d time.Duration, s string) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !strings.Contains(b.String(), s) {
		select {
		case <-b.wrote:
		case <-deadline.C:
			return strings.Contains(b.String(), s)
		}
	}
	return true
}
