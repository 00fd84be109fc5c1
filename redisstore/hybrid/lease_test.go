package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// The traces below use a sliding window counter of 2400 a day, synced
// every hour (leases reach two intervals, two hours, ahead), and a window
// 0 filled to the limit, so that window 1's capacity at hour x is
// 2400 - 2400 × (24 - x) / 24 = 100 × x: 600 at 6 h, 700 at 7 h, and so on.
var dayCounter = core.Limit{Name: "day", Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: 2400, Period: 24 * time.Hour}}

// TestSlidingLeaseLastsAnInterval replays a client over its sliding
// window counter on one server: the lease taken at 6 h covers the capacity
// at 8 h (800), and the interval sync at 7 h tops it up to the capacity at
// 9 h (900), so the requests of 7, 8 and 9 h need no round trip of their
// own. Sized by the capacity at the time it is taken (600, then 100 at a
// time), the lease cost a round trip every hour. Each request is still
// decided by the counter's estimate at its own time: 600, 100, 100 and 100
// admitted, as the memory store admits.
func TestSlidingLeaseLastsAnInterval(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	clock := storetest.NewClock(storetest.Epoch) // a day's start
	h := newHybrid(t, rdb, clock, time.Hour)
	lim := core.Must(core.NewLimiter(dayCounter, core.WithStore(h)))
	mem := core.Must(core.NewLimiter(dayCounter, core.WithStore(&core.MemoryStore{Clock: clock.Now})))
	ctx := context.Background()
	take := func(n int) (admitted int) {
		t.Helper()
		for range n {
			d, err := lim.Take(ctx, "alice", 1)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := mem.Take(ctx, "alice", 1)
			if d.Allowed != want.Allowed {
				t.Fatalf("at %s: hybrid admitted %v, the counter %v", clock.Now().Sub(storetest.Epoch), d.Allowed, want.Allowed)
			}
			if d.Allowed {
				admitted++
			}
		}
		return admitted
	}
	if got := take(2400); got != 2400 {
		t.Fatalf("window 0: admitted %d, want 2400", got)
	}
	steps := []struct {
		at       time.Duration // from the start of window 1
		tick     bool          // the interval sync runs first
		requests int
		admitted int
		calls    int64 // script runs in Redis
	}{
		{at: 6 * time.Hour, requests: 700, admitted: 600, calls: 1}, // the ask: lease to 800
		{at: 7 * time.Hour, requests: 200, admitted: 100, calls: 0}, // within the lease
		{at: 7 * time.Hour, tick: true, calls: 1},                   // tops the lease up to 900
		{at: 8 * time.Hour, requests: 200, admitted: 100, calls: 0},
		{at: 9 * time.Hour, requests: 200, admitted: 100, calls: 0},
	}
	for _, s := range steps {
		clock.Set(storetest.Epoch.Add(24*time.Hour + s.at))
		before := evalshas(t, rdb)
		if s.tick {
			if err := h.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := take(s.requests)
		calls := evalshas(t, rdb) - before
		if got != s.admitted || calls != s.calls {
			t.Errorf("window 1 at %s (sync %v): admitted %d of %d with %d script runs, want %d with %d",
				s.at, s.tick, got, s.requests, calls, s.admitted, s.calls)
		}
	}
}

// TestSlidingLeaseAheadStaysExact replays two servers on one client: A's
// lease reaches two hours ahead, yet every admission, on either server,
// is within the counter's estimate over both at its own time, because
// each server counts what the other holds. At 6 h A leases the capacity at
// 8 h (800) and admits 600; B, seeing A's 800, admits nothing; at 7 h the
// 100 freed are A's, from its lease; at 9 h (capacity 900) A's lease is
// used up and B, with A's 800 held, gets the 100 freed.
func TestSlidingLeaseAheadStaysExact(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	a := core.Must(core.NewLimiter(dayCounter, core.WithStore(newHybrid(t, srv.Client(t), clock, time.Hour))))
	b := core.Must(core.NewLimiter(dayCounter, core.WithStore(newHybrid(t, srv.Client(t), clock, time.Hour))))
	if got := takeN(t, a, "k", 2400); got != 2400 {
		t.Fatalf("window 0: A admitted %d, want 2400", got)
	}
	steps := []struct {
		at         time.Duration
		aReq, bReq int
		aAdm, bAdm int
	}{
		{at: 6 * time.Hour, aReq: 700, bReq: 100, aAdm: 600, bAdm: 0},
		{at: 7 * time.Hour, aReq: 200, bReq: 100, aAdm: 100, bAdm: 0},
		{at: 8 * time.Hour, aReq: 200, bReq: 0, aAdm: 100, bAdm: 0},
		{at: 9 * time.Hour, aReq: 0, bReq: 200, aAdm: 0, bAdm: 100},
	}
	total := 0
	for _, s := range steps {
		clock.Set(storetest.Epoch.Add(24*time.Hour + s.at))
		ga, gb := takeN(t, a, "k", s.aReq), takeN(t, b, "k", s.bReq)
		total += ga + gb
		capacity := int(100 * s.at / time.Hour)
		if ga != s.aAdm || gb != s.bAdm || total > capacity {
			t.Errorf("window 1 at %s: A admitted %d, B %d (%d in the window, capacity %d), want %d and %d",
				s.at, ga, gb, total, capacity, s.aAdm, s.bAdm)
		}
	}
}

// TestSlidingPreviousWindowReadAfterItsEnd: server B last synced window 0
// when it held 1092 of its count (two interval syncs gave its lease
// back), and A then filled the window to 2400. At 6 h into window 1
// the counter's estimate is 2400 × 18/24 = 1800 plus window 1's count, so
// B may admit 600. B reads window 0 again once it has ended, and admits
// 600 of 1000; with the count it held (1092 × 18/24 = 819), it admitted
// all 1000.
func TestSlidingPreviousWindowReadAfterItsEnd(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	a := core.Must(core.NewLimiter(dayCounter, core.WithStore(newHybrid(t, srv.Client(t), clock, time.Hour))))
	hb := newHybrid(t, srv.Client(t), clock, time.Hour)
	b := core.Must(core.NewLimiter(dayCounter, core.WithStore(hb)))
	if got := takeN(t, b, "k", 1092); got != 1092 {
		t.Fatalf("window 0: B admitted %d, want 1092", got)
	}
	for range 2 { // the second interval sync, after none of B's requests, gives B's lease back
		if err := hb.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := takeN(t, a, "k", 1400); got != 1308 {
		t.Fatalf("window 0: A admitted %d, want the 1308 left", got)
	}
	clock.Set(storetest.Epoch.Add(30 * time.Hour))
	if got := takeN(t, b, "k", 1000); got != 600 {
		t.Errorf("window 1 at 6 h: B admitted %d of 1000, want 600 (2400 - 1800)", got)
	}
}
