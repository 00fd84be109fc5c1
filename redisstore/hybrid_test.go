package redisstore_test

import (
	"context"
	"errors"
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
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// newHybrid returns a hybrid store on rdb under the test clock, closed at
// the end of the test. The interval is long: tests sync by need, or by
// calling Close.
func newHybrid(t testing.TB, rdb redis.UniversalClient, c *storetest.Clock, interval time.Duration, opts ...redisstore.Option) *redisstore.Hybrid {
	t.Helper()
	opts = append([]redisstore.Option{redisstore.WithClock(c.Now), redisstore.WithTimeout(2 * time.Second)}, opts...)
	h, err := redisstore.NewHybrid(rdb, interval, opts...)
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

func TestHybridOneServerIsExact(t *testing.T) {
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

func TestHybridRefusesWhatItCannotMerge(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	if _, err := redisstore.NewHybrid(rdb, 0); err == nil {
		t.Fatal("interval 0: no error")
	}
	if _, err := redisstore.NewHybrid(rdb, -time.Second); err == nil {
		t.Fatal("negative interval: no error")
	}
	if _, err := redisstore.New(rdb, redisstore.WithRegion("eu", map[string]redis.UniversalClient{"us": rdb})); err == nil {
		t.Fatal("WithRegion on New: no error")
	}
	if _, err := redisstore.NewHybrid(rdb, time.Second, redisstore.WithFallback(2)); err == nil {
		t.Fatal("WithFallback on NewHybrid: no error")
	}
	if _, err := redisstore.NewHybrid(rdb, time.Second, redisstore.WithRegion("eu", nil)); err == nil {
		t.Fatal("a region without peers: no error")
	}
	if _, err := redisstore.NewHybrid(rdb, time.Second, redisstore.WithRegion("e u", map[string]redis.UniversalClient{"us": rdb})); err == nil {
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

// TestHybridServersShareExactly runs four servers on one limit,
// concurrently: the leases let through exactly the limit, not one more.
func TestHybridServersShareExactly(t *testing.T) {
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
