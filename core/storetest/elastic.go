package storetest

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// An elasticStep is one request of an elastic trace: the clock moves by
// advance, the capacity signal is set to room, and the request's decision
// must be the one given. reset is checked when it is not zero.
type elasticStep struct {
	advance   time.Duration
	room      bool
	allowed   bool
	remaining int
	retry     time.Duration
	elastic   bool
	reset     time.Duration
}

// elasticTraces are hand-computed traces of a limit of 5 per 10 seconds
// under core.WithElastic(100, ...): a ceiling of 10 while the signal
// reports room, the limit itself while it does not. Every decision
// reports Quota 5.
var elasticTraces = []struct {
	alg   core.Algorithm
	steps []elasticStep
}{
	{core.FixedWindow, []elasticStep{
		// Within the limit, the signal changes nothing: 3 with room, 2
		// without, and the 6th is rejected without room.
		{room: true, allowed: true, remaining: 4},
		{room: true, allowed: true, remaining: 3},
		{room: true, allowed: true, remaining: 2},
		{room: false, allowed: true, remaining: 1},
		{room: false, allowed: true, remaining: 0},
		{room: false, retry: 10 * time.Second, reset: 10 * time.Second},
		// Room: 5 more, each beyond the limit, then the ceiling.
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, retry: 10 * time.Second},
		// The signal drops: held at the limit, which the 10 exceed.
		{room: false, retry: 10 * time.Second},
		// The next window: the limit again, then room for one more.
		{advance: 10 * time.Second, room: false, allowed: true, remaining: 4},
		{room: false, allowed: true, remaining: 3},
		{room: false, allowed: true, remaining: 2},
		{room: false, allowed: true, remaining: 1},
		{room: false, allowed: true, remaining: 0},
		{room: false, retry: 10 * time.Second},
		{room: true, allowed: true, elastic: true},
	}},
	{core.SlidingWindowLog, []elasticStep{
		// t=0: 5 within the limit.
		{room: true, allowed: true, remaining: 4},
		{room: true, allowed: true, remaining: 3},
		{room: true, allowed: true, remaining: 2},
		{room: true, allowed: true, remaining: 1},
		{room: true, allowed: true, remaining: 0},
		// t=1s: 5 elastic; the ceiling waits for the entries of t=0 (9s).
		{advance: time.Second, room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, retry: 9 * time.Second},
		// Without room the limit needs 6 entries gone: those of t=1s too.
		{room: false, retry: 10 * time.Second},
		// t=10s: the entries of t=0 are gone, 5 remain: over the limit,
		// within the ceiling.
		{advance: 9 * time.Second, room: false, retry: time.Second},
		{room: true, allowed: true, elastic: true},
		// t=11s: one entry (t=10s) remains.
		{advance: time.Second, room: false, allowed: true, remaining: 3},
	}},
	{core.SlidingWindowCounter, []elasticStep{
		// t=0, the start of a window: 5 within, 5 elastic.
		{room: true, allowed: true, remaining: 4},
		{room: true, allowed: true, remaining: 3},
		{room: true, allowed: true, remaining: 2},
		{room: true, allowed: true, remaining: 1},
		{room: true, allowed: true, remaining: 0},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		{room: true, allowed: true, elastic: true},
		// The ceiling: at 11s, 10 x 9/10 = 9 weighted, room for 1 of 10.
		{room: true, retry: 11 * time.Second},
		// The limit: at 16s, ceil(10 x 4/10) = 4 weighted, room for 1 of 5.
		{room: false, retry: 16 * time.Second},
		{advance: 16 * time.Second, room: false, allowed: true, remaining: 0},
		// Room: 1 + 4 of 10 used, the 6th is elastic.
		{room: true, allowed: true, elastic: true},
		// The limit: 2 + 4 of 5; at 18s, 2 + 2.
		{room: false, retry: 2 * time.Second},
		{advance: 2 * time.Second, room: false, allowed: true, remaining: 0},
	}},
}

// bucketTrace is the trace of both buckets (as meters, a token bucket and
// a policing leaky bucket are the same): 5 per 10 seconds is a request
// every 2 seconds, a burst of 5 (10 seconds to refill), raised to 10 (20
// seconds) with room.
var bucketTrace = []elasticStep{
	{room: true, allowed: true, remaining: 4, reset: 2 * time.Second},
	{room: true, allowed: true, remaining: 3},
	{room: true, allowed: true, remaining: 2},
	{room: true, allowed: true, remaining: 1},
	{room: true, allowed: true, remaining: 0, reset: 10 * time.Second},
	{room: true, allowed: true, elastic: true, reset: 12 * time.Second},
	{room: true, allowed: true, elastic: true},
	{room: true, allowed: true, elastic: true},
	{room: true, allowed: true, elastic: true},
	{room: true, allowed: true, elastic: true, reset: 20 * time.Second},
	// The raised burst is empty: one more in 2 seconds with room.
	{room: true, retry: 2 * time.Second, reset: 20 * time.Second},
	// Without room, the bucket must first refill the 10 seconds beyond
	// its burst: 12 seconds, not the 2 an empty bucket of 5 needs.
	{room: false, retry: 12 * time.Second, reset: 20 * time.Second},
	{advance: 11 * time.Second, room: false, retry: time.Second, reset: 9 * time.Second},
	{advance: time.Second, room: false, allowed: true, remaining: 0, reset: 10 * time.Second},
	// Room again: 8 of 20 seconds free, 4 of 10, beyond the limit.
	{room: true, allowed: true, elastic: true, reset: 12 * time.Second},
	// Back within the limit at t=24s, the bucket at 0.
	{advance: 12 * time.Second, room: false, allowed: true, remaining: 4, reset: 2 * time.Second},
}

// RunElastic checks elastic throttling (core.WithElastic) on a store: the
// limit as configured and the limit raised for room share their counters,
// under every algorithm. Hand-computed traces toggle the signal mid-way;
// then many goroutines at once on one key, with the signal off, on, and
// flipping at random, never pass the limit (off) or the ceiling (on).
func RunElastic(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	traces := elasticTraces
	traces = append(traces[:len(traces):len(traces)],
		struct {
			alg   core.Algorithm
			steps []elasticStep
		}{core.TokenBucket, bucketTrace},
		struct {
			alg   core.Algorithm
			steps []elasticStep
		}{core.LeakyBucket, bucketTrace})
	for _, tr := range traces {
		t.Run("trace/"+tr.alg.String(), func(t *testing.T) {
			clock := NewClock(Epoch)
			var room atomic.Bool
			lim, err := core.NewLimiter(core.Limit{Name: "elastic", Algorithm: tr.alg, Rate: core.Rate{Count: 5, Period: 10 * time.Second}},
				core.WithStore(newStore(t, clock)), core.WithElastic(100, room.Load))
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tr.steps {
				clock.Advance(s.advance)
				room.Store(s.room)
				d, err := lim.Take(ctx, "client", 1)
				if err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry || d.Elastic != s.elastic ||
					d.Quota != 5 || d.Soft || (s.reset != 0 && d.ResetAfter != s.reset) {
					t.Fatalf("step %d (room %v): got %+v\nwant allowed %v, remaining %d, retry %s, elastic %v, quota 5, reset %s",
						i+1, s.room, d, s.allowed, s.remaining, s.retry, s.elastic, s.reset)
				}
			}
		})
	}
	for _, alg := range algorithms {
		t.Run("concurrency/"+alg.String(), func(t *testing.T) {
			clock := NewClock(Epoch.Add(time.Second))
			var room atomic.Bool
			spare := func() bool { return room.Load() }
			flip := func() bool { return rand.Uint64()&1 == 0 } // a signal that changes at every call
			s := newStore(t, clock)
			limit := core.Limit{Name: "elastic", Algorithm: alg, Rate: core.Rate{Count: 8, Period: time.Minute}}
			lim, err := core.NewLimiter(limit, core.WithStore(s), core.WithElastic(100, spare))
			if err != nil {
				t.Fatal(err)
			}
			flipping, err := core.NewLimiter(limit, core.WithStore(s), core.WithElastic(100, flip))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name     string
				lim      *core.Limiter
				room     bool
				min, max int // admissions
			}{
				{"no room", lim, false, 8, 8},
				{"room", lim, true, 16, 16},
				{"flipping", flipping, false, 8, 16},
			} {
				room.Store(c.room)
				within, elastic := fire(t, c.lim, c.name, 64)
				if within != 8 || within+elastic < c.min || within+elastic > c.max {
					t.Errorf("%s: %d admitted within the limit of 8 and %d elastic; want 8 and %d to %d in all",
						c.name, within, elastic, c.min, c.max)
				}
			}
		})
	}
}

// fire sends n requests at once on a fresh key and counts the admissions
// within the limit and the elastic ones.
func fire(t *testing.T, lim *core.Limiter, key string, n int) (within, elastic int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := lim.Take(context.Background(), key, 1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case d.Allowed && d.Elastic:
				elastic++
			case d.Allowed:
				within++
			}
		}()
	}
	close(start)
	wg.Wait()
	return within, elastic
}
