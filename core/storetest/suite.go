package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// NewStore builds a fresh, empty store whose time comes from clock.
type NewStore func(t *testing.T, clock *Clock) core.Store

// Run runs the whole conformance suite.
func Run(t *testing.T, newStore NewStore) {
	t.Run("traces", func(t *testing.T) { RunTraces(t, newStore) })
	t.Run("retry-after-is-true", func(t *testing.T) { RunRetryAfter(t, newStore) })
	t.Run("remaining-is-true", func(t *testing.T) { RunRemaining(t, newStore) })
	t.Run("peek-counts-nothing", func(t *testing.T) { RunPeek(t, newStore) })
	t.Run("identity", func(t *testing.T) { RunIdentity(t, newStore) })
	t.Run("bad-cost", func(t *testing.T) { RunBadCost(t, newStore) })
	t.Run("concurrency", func(t *testing.T) { RunConcurrency(t, newStore, 64, 4) })
	t.Run("all-or-nothing", func(t *testing.T) { RunAllOrNothing(t, newStore) })
	t.Run("refund", func(t *testing.T) { RunRefund(t, newStore) })
	t.Run("block", func(t *testing.T) { RunBlock(t, newStore) })
	t.Run("operate", func(t *testing.T) { RunOperate(t, newStore) })
	t.Run("operate-concurrency", func(t *testing.T) { RunOperateConcurrency(t, newStore) })
}

// One is a Counter of one limit, deciding into one Decision.
type One struct{ core.Counter }

// Take decides and counts a request by the counter's limit.
func (c One) Take(ctx context.Context, key string, cost int) (core.Decision, error) {
	var ds [1]core.Decision
	_, err := c.Counter.Take(ctx, key, cost, ds[:])
	return ds[0], err
}

// Peek decides a request without counting it.
func (c One) Peek(ctx context.Context, key string, cost int) (core.Decision, error) {
	var ds [1]core.Decision
	err := c.Counter.Peek(ctx, key, cost, ds[:])
	return ds[0], err
}

func bind(t *testing.T, s core.Store, l core.Limit) One {
	t.Helper()
	c, err := s.Bind([]core.Limit{l})
	if err != nil {
		t.Fatalf("Bind(%+v): %v", l, err)
	}
	return One{c}
}

// RunTraces replays every trace of Traces.
func RunTraces(t *testing.T, newStore NewStore) {
	for _, tr := range Traces() {
		t.Run(tr.Name, func(t *testing.T) {
			clock := NewClock(Epoch)
			c := bind(t, newStore(t, clock), tr.Limit)
			for i, st := range tr.Steps {
				clock.Set(Epoch.Add(st.At))
				key := st.Key
				if key == "" {
					key = "client"
				}
				var d core.Decision
				var err error
				if st.Peek {
					d, err = c.Peek(context.Background(), key, st.Cost)
				} else {
					d, err = c.Take(context.Background(), key, st.Cost)
				}
				if err != nil {
					t.Fatalf("step %d (at %s, cost %d): %v", i, st.At, st.Cost, err)
				}
				got := Want{d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay}
				if got != st.Want {
					t.Fatalf("step %d (at %s, key %q, cost %d, peek %v):\n got %+v\nwant %+v", i, st.At, key, st.Cost, st.Peek, got, st.Want)
				}
				if d.Quota != capacity(tr.Limit) {
					t.Fatalf("step %d: Quota = %d, want %d", i, d.Quota, capacity(tr.Limit))
				}
			}
		})
	}
}

// capacity is the Decision.Limit of l: its burst or count, or for a
// shaping leaky bucket with a delay bound, the requests that fit in it.
func capacity(l core.Limit) int {
	c := l.Rate.Count
	if l.Burst > 0 {
		c = l.Burst
	}
	if l.Shaping && l.MaxDelay > 0 {
		if byDelay := int(l.MaxDelay/(l.Rate.Period/time.Duration(l.Rate.Count))) + 1; byDelay < c {
			c = byDelay
		}
	}
	return c
}

// Limits returns one limit of each algorithm (and a shaping leaky bucket)
// for the property tests, with awkward periods that do not divide evenly.
func Limits() []core.Limit {
	return []core.Limit{
		{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 7, Period: 10 * time.Second}, Burst: 4},
		{Algorithm: core.LeakyBucket, Rate: core.Rate{Count: 3, Period: 2 * time.Second}, Burst: 5},
		{Algorithm: core.LeakyBucket, Rate: core.Rate{Count: 3, Period: 2 * time.Second}, Burst: 5, Shaping: true, MaxDelay: 1100 * time.Millisecond},
		{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 5, Period: 7 * time.Second}},
		{Algorithm: core.SlidingWindowLog, Rate: core.Rate{Count: 5, Period: 7 * time.Second}},
		{Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: 5, Period: 7 * time.Second}},
		{Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: 100, Period: time.Hour}},
	}
}

func limitName(l core.Limit) string {
	name := l.Algorithm.String()
	if l.Shaping {
		name += "-shaping"
	}
	return fmt.Sprintf("%s/%d-per-%s", name, l.Rate.Count, l.Rate.Period)
}

// RunRetryAfter checks, over random traffic, that every rejection's
// RetryAfter is true and tight: a retry one nanosecond early is still
// rejected, a retry after exactly RetryAfter is admitted.
func RunRetryAfter(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, l := range Limits() {
		t.Run(limitName(l), func(t *testing.T) {
			clock := NewClock(Epoch.Add(123456789))
			c := bind(t, newStore(t, clock), l)
			rng := rand.New(rand.NewPCG(1, uint64(l.Rate.Count)))
			rejections := 0
			for i := 0; i < 400 && rejections < 60; i++ {
				clock.Advance(time.Duration(rng.Int64N(int64(l.Rate.Period) / int64(l.Rate.Count))))
				cost := 1 + rng.IntN(2)
				d, err := c.Take(ctx, "client", cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					continue
				}
				rejections++
				if d.RetryAfter <= 0 {
					t.Fatalf("rejection %d with RetryAfter %s", i, d.RetryAfter)
				}
				clock.Advance(d.RetryAfter - 1)
				early, err := c.Peek(ctx, "client", cost)
				if err != nil {
					t.Fatal(err)
				}
				if early.Allowed {
					t.Fatalf("request %d: retry 1ns before RetryAfter (%s) would be admitted", i, d.RetryAfter)
				}
				clock.Advance(1)
				again, err := c.Take(ctx, "client", cost)
				if err != nil {
					t.Fatal(err)
				}
				if !again.Allowed {
					t.Fatalf("request %d: retry after RetryAfter (%s) rejected: %+v", i, d.RetryAfter, again)
				}
			}
			if rejections < 10 {
				t.Fatalf("only %d rejections: the traffic does not exercise the limit", rejections)
			}
		})
	}
}

// RunRemaining checks, over random traffic, that Remaining is exact: after
// a decision with Remaining r, r more requests of cost 1 at the same
// instant are admitted and the next one is not.
func RunRemaining(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, l := range Limits() {
		t.Run(limitName(l), func(t *testing.T) {
			clock := NewClock(Epoch.Add(987654321))
			c := bind(t, newStore(t, clock), l)
			rng := rand.New(rand.NewPCG(2, uint64(l.Rate.Count)))
			for i := 0; i < 40; i++ {
				clock.Advance(time.Duration(rng.Int64N(int64(l.Rate.Period) / 2)))
				d, err := c.Take(ctx, "client", 1)
				if err != nil {
					t.Fatal(err)
				}
				for j := 0; j < d.Remaining; j++ {
					e, err := c.Take(ctx, "client", 1)
					if err != nil {
						t.Fatal(err)
					}
					if !e.Allowed {
						t.Fatalf("round %d: Remaining was %d but request %d was rejected", i, d.Remaining, j+1)
					}
				}
				e, err := c.Take(ctx, "client", 1)
				if err != nil {
					t.Fatal(err)
				}
				if e.Allowed {
					t.Fatalf("round %d: Remaining was %d but request %d was admitted", i, d.Remaining, d.Remaining+1)
				}
			}
		})
	}
}

// RunPeek checks that Peek answers as Take would and counts nothing.
func RunPeek(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, l := range Limits() {
		t.Run(limitName(l), func(t *testing.T) {
			clock := NewClock(Epoch.Add(5 * time.Millisecond))
			c := bind(t, newStore(t, clock), l)
			for i := 0; i < 3*capacity(l); i++ {
				p, err := c.Peek(ctx, "client", 1)
				if err != nil {
					t.Fatal(err)
				}
				p2, _ := c.Peek(ctx, "client", 1)
				d, err := c.Take(ctx, "client", 1)
				if err != nil {
					t.Fatal(err)
				}
				if p != p2 || p.Allowed != d.Allowed || p.RetryAfter != d.RetryAfter || p.Delay != d.Delay ||
					(p.Allowed && (p.Remaining != d.Remaining || p.ResetAfter != d.ResetAfter)) {
					t.Fatalf("request %d: Peek %+v, again %+v, then Take %+v", i, p, p2, d)
				}
				clock.Advance(l.Rate.Period / time.Duration(4*l.Rate.Count))
			}
		})
	}
}

// RunIdentity checks that limits with the same name and algorithm share
// counters, even when the rate changed, and that other limits never do.
// A window keeps its counts: a client that used 3 of 5 has 3 left when
// the limit rises to 6. A bucket keeps the time it needs to refill (3/5
// of its burst in use: 2 left), or, in a store that can, its level in
// requests (3 left).
func RunIdentity(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewClock(Epoch)
			s := newStore(t, clock)
			five := core.Limit{Name: "api", Algorithm: alg, Rate: core.PerHour(5)}
			c := bind(t, s, five)
			for i := 0; i < 3; i++ {
				if d, err := c.Take(ctx, "client", 1); err != nil || !d.Allowed {
					t.Fatalf("take %d: %+v %v", i, d, err)
				}
			}
			six := five
			six.Rate = core.PerHour(6)
			d, err := bind(t, s, six).Peek(ctx, "client", 0)
			if err != nil || !(d.Remaining == 3 || d.Remaining == 2 && (alg == core.TokenBucket || alg == core.LeakyBucket)) {
				t.Fatalf("same limit, raised to 6: remaining %d (%v), want 3 (or 2 for a bucket)", d.Remaining, err)
			}
			other := five
			other.Name = "api2"
			if d, _ := bind(t, s, other).Peek(ctx, "client", 0); d.Remaining != 5 {
				t.Fatalf("another name shares counters: remaining %d, want 5", d.Remaining)
			}
			otherAlg := five
			otherAlg.Algorithm = algorithms[(int(alg))%5]
			if d, _ := bind(t, s, otherAlg).Peek(ctx, "client", 0); d.Remaining != 5 {
				t.Fatalf("another algorithm shares counters: remaining %d, want 5", d.Remaining)
			}
		})
	}
}

// RunBadCost checks that impossible costs are errors, not rejections.
func RunBadCost(t *testing.T, newStore NewStore) {
	for _, l := range Limits() {
		c := bind(t, newStore(t, NewClock(Epoch)), l)
		for _, cost := range []int{-1, capacity(l) + 1} {
			_, err := c.Take(context.Background(), "client", cost)
			if !errors.Is(err, core.ErrCostExceedsLimit) {
				t.Errorf("%s: cost %d: err = %v, want ErrCostExceedsLimit", limitName(l), cost, err)
			}
		}
	}
}

// RunConcurrency fires 10x the capacity of each limit at one key from
// goroutines at once, with the clock standing still: exactly the capacity
// must be admitted.
func RunConcurrency(t *testing.T, newStore NewStore, goroutines, stores int) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewClock(Epoch.Add(time.Second))
			l := core.Limit{Name: "hot", Algorithm: alg, Rate: core.PerHour(100)}
			s := newStore(t, clock)
			counters := make([]core.Counter, stores)
			for i := range counters {
				counters[i] = bind(t, s, l).Counter
			}
			per := max(1, 10*l.Rate.Count/goroutines)
			if got := TakeConcurrently(t, counters, goroutines, per); got != l.Rate.Count {
				t.Fatalf("admitted %d of %d requests, want exactly %d", got, per*goroutines, l.Rate.Count)
			}
		})
	}
}

// TakeConcurrently starts goroutines that each take per requests of cost
// 1 at one key, spread over the counters (counters[g%len(counters)]), all
// at once, and returns how many were admitted. A store error fails the
// test. Stores shared by servers use it with counters from independent
// clients.
func TakeConcurrently(t testing.TB, counters []core.Counter, goroutines, per int) int {
	t.Helper()
	return takeConcurrently(t, counters, 1, goroutines, per)
}

// takeConcurrently is TakeConcurrently over counters of the given number
// of limits: a request is admitted when every limit admits it.
func takeConcurrently(t testing.TB, counters []core.Counter, limits, goroutines, per int) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	start := make(chan struct{})
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(c core.Counter) {
			defer wg.Done()
			<-start
			ds := make([]core.Decision, limits)
			for i := 0; i < per; i++ {
				_, err := c.Take(context.Background(), "hot-key", 1, ds)
				if err != nil {
					errs <- err
					return
				}
				if allAllowed(ds) {
					admitted.Add(1)
				}
			}
		}(counters[g%len(counters)])
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(admitted.Load())
}

func allAllowed(ds []core.Decision) bool {
	for i := range ds {
		if !ds[i].Allowed {
			return false
		}
	}
	return true
}
