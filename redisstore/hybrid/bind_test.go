package hybrid_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// The Store contract: limits with the same name, algorithm and period
// share counters, however many times they are bound. On a hybrid store,
// two bindings of one limit decide on one set of local counts.

// TestBindingsShareCounts alternates two limiters of one limit, on
// one hybrid store, on one key: together they admit the limit, not one
// more, and a limiter bound after the counts were taken starts from them.
func TestBindingsShareCounts(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	clock := storetest.NewClock(storetest.Epoch)
	h := newHybrid(t, rdb, clock, time.Hour)
	for _, algo := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(algo.String(), func(t *testing.T) {
			limit := core.Limit{Name: "x-" + algo.String(), Algorithm: algo, Rate: core.PerMinute(5)}
			a := core.Must(core.NewLimiter(limit, core.WithStore(h)))
			b := core.Must(core.NewLimiter(limit, core.WithStore(h)))
			admitted := 0
			for i := range 20 {
				lim := a
				if i%2 == 1 {
					lim = b
				}
				admitted += takeN(t, lim, "k", 1)
			}
			if admitted != 5 {
				t.Errorf("two bindings admitted %d of 20 under a limit of 5", admitted)
			}
			// A third binding (a rules reload) sees the window full.
			c := core.Must(core.NewLimiter(limit, core.WithStore(h)))
			if n := takeN(t, c, "k", 3); n != 0 {
				t.Errorf("a binding made later admitted %d in a full window", n)
			}
			// Another key, and another limit over the same key, count
			// apart: a limiter of two limits shares the one it has in
			// common with a and b.
			other := core.Limit{Name: "y-" + algo.String(), Algorithm: algo, Rate: core.PerMinute(4)}
			both := core.Must(core.NewLimiter(other, core.WithStore(h), core.WithLimit(limit)))
			if n := takeN(t, both, "k2", 2) + takeN(t, a, "k2", 1) + takeN(t, b, "k2", 5); n != 5 {
				t.Errorf("admitted %d on key k2, want 5", n)
			}
			onlyY := core.Must(core.NewLimiter(other, core.WithStore(h)))
			if n := takeN(t, onlyY, "k2", 5); n != 2 {
				t.Errorf("limit y admitted %d after 2, want 2", n)
			}
			// Syncs while only x decides k2 give back y's leases and may
			// forget what this server holds of k2 under y: its count comes
			// back from Redis.
			for range 3 {
				takeN(t, a, "k2", 1)
				if err := h.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if n := takeN(t, onlyY, "k2", 2); n != 0 {
				t.Errorf("limit y admitted %d on k2 after its 4 were counted and synced", n)
			}
			// A reset through one binding clears the counts of every
			// binding of its limits, and only of those.
			if n := takeN(t, both, "k3", 3); n != 3 {
				t.Fatalf("admitted %d of 3 on k3", n)
			}
			if _, err := a.Reset(context.Background(), "k3", "test"); err != nil {
				t.Fatal(err)
			}
			if n := takeN(t, b, "k3", 6); n != 5 {
				t.Errorf("b admitted %d after a reset by a, want the whole limit, 5", n)
			}
			if n := takeN(t, onlyY, "k3", 3); n != 1 {
				t.Errorf("limit y admitted %d on k3 after 3 counted and a reset of x, want 1", n)
			}
			// A grant through one binding pays the requests of another;
			// Inspect through one sees the counts of every binding.
			if n := takeN(t, a, "k4", 6); n != 5 {
				t.Fatalf("admitted %d of 6 on k4", n)
			}
			if err := b.Grant(context.Background(), "k4", 2, "test"); err != nil {
				t.Fatal(err)
			}
			if n := takeN(t, a, "k4", 3); n != 2 {
				t.Errorf("a admitted %d with a grant of 2 given through b", n)
			}
			st, err := c.Inspect(context.Background(), "k4")
			if err != nil {
				t.Fatal(err)
			}
			if st.Decision.Allowed || !st.Tracked {
				t.Errorf("inspect through a third binding of a key over its limit: %+v", st)
			}
		})
	}
}

// TestBindingsShareCountsConcurrently runs two bindings of one
// limit at once on one key: exactly the limit is admitted.
func TestBindingsShareCountsConcurrently(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	h := newHybrid(t, rdb, storetest.NewClock(storetest.Epoch), time.Hour)
	limit := core.Limit{Name: "together", Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}
	var admitted atomic.Int64
	done := make(chan struct{})
	for range 4 {
		lim := core.Must(core.NewLimiter(limit, core.WithStore(h)))
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
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
	for range 4 {
		<-done
	}
	if got := admitted.Load(); got != 100 {
		t.Errorf("four bindings admitted %d of 400 under a limit of 100", got)
	}
}

// TestPlansShareCounts switches one client between two plans of one
// limit name (5 and 10 a minute) on every request: each request is decided
// by its plan's count on the one window they share, as the exact store
// decides it.
func TestPlansShareCounts(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	h := newHybrid(t, srv.Client(t), clock, time.Hour)
	exact, err := redisstore.New(srv.Client(t), redisstore.WithClock(clock.Now), redisstore.WithPrefix("exact:"))
	if err != nil {
		t.Fatal(err)
	}
	for _, algo := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(algo.String(), func(t *testing.T) {
			free := core.Limit{Name: "plan-" + algo.String(), Algorithm: algo, Rate: core.PerMinute(5)}
			paid := free
			paid.Rate = core.PerMinute(10)
			var n atomic.Int64
			plan := func(context.Context, string) (core.Limit, error) {
				if n.Load()%2 == 0 {
					return free, nil
				}
				return paid, nil
			}
			hyb := core.Must(core.NewPlanLimiter(plan, core.WithStore(h)))
			ref := core.Must(core.NewPlanLimiter(plan, core.WithStore(exact)))
			admitted, freeAdmitted := 0, 0
			for i := range 30 {
				n.Store(int64(i))
				d, err := hyb.Take(context.Background(), "alice", 1)
				if err != nil {
					t.Fatal(err)
				}
				want, err := ref.Take(context.Background(), "alice", 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != want.Allowed {
					t.Fatalf("request %d (plan of %d): hybrid admitted %t, exact %t", i, d.Quota, d.Allowed, want.Allowed)
				}
				if d.Allowed {
					admitted++
					if i%2 == 0 {
						freeAdmitted++
					}
				}
			}
			// By hand: the count runs 0..5 over requests 0..4, admitted by
			// either plan; then only the paid plan admits, up to 10.
			if admitted != 10 || freeAdmitted != 3 {
				t.Errorf("admitted %d (%d on the free plan), want 10 (3)", admitted, freeAdmitted)
			}
		})
	}
}

// TestElasticSharesCounts toggles the capacity signal of a limiter
// with elastic throttling (5 a minute, up to 10 with room) on every
// request: without room nothing is admitted once 5 are counted, with room
// nothing once 10 are.
func TestElasticSharesCounts(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	clock := storetest.NewClock(storetest.Epoch)
	h := newHybrid(t, rdb, clock, time.Hour)
	for _, algo := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(algo.String(), func(t *testing.T) {
			var room atomic.Bool
			limit := core.Limit{Name: "elastic-" + algo.String(), Algorithm: algo, Rate: core.PerMinute(5)}
			lim := core.Must(core.NewLimiter(limit, core.WithStore(h), core.WithElastic(100, room.Load)))
			counted, elastic := 0, 0
			for i := range 40 {
				room.Store(i%2 == 1)
				d, err := lim.Take(context.Background(), "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case !d.Allowed:
				case !room.Load() && counted >= 5:
					t.Fatalf("request %d without room admitted with %d counted", i, counted)
				case room.Load() && counted >= 10:
					t.Fatalf("request %d with room admitted with %d counted", i, counted)
				default:
					counted++
					if d.Elastic {
						elastic++
					}
				}
			}
			if counted != 10 || elastic != 5 {
				t.Errorf("admitted %d (%d elastic) of 40, want 10 (5)", counted, elastic)
			}
		})
	}
}
