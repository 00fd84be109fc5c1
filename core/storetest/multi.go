package storetest

import (
	"context"

	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// RunAllOrNothing checks that the limits bound together decide a request
// at once: it is counted by every limit or by none. First a hand-computed
// trace, then, for every pair of algorithms, 64 goroutines at once on one
// key under 3 per second and 5 per minute: exactly 3 are admitted, the
// per-minute limit has counted those 3 and no other, and two seconds
// later exactly 2 more pass.
func RunAllOrNothing(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	t.Run("trace", func(t *testing.T) {
		clock := NewClock(Epoch.Add(time.Second))
		s := newStore(t, clock)
		c, err := s.Bind([]core.Limit{
			{Name: "second", Algorithm: core.FixedWindow, Rate: core.PerSecond(3)},
			{Name: "minute", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(5)},
		})
		if err != nil {
			t.Fatal(err)
		}
		ds := make([]core.Decision, 2)
		take := func(step string, allowed bool, rem0, rem1 int) {
			t.Helper()
			if _, err := c.Take(ctx, "client", 1, ds); err != nil {
				t.Fatal(err)
			}
			if (ds[0].Allowed && ds[1].Allowed) != allowed || ds[0].Remaining != rem0 || ds[1].Remaining != rem1 {
				t.Fatalf("%s: got %+v / %+v, want allowed %v, remaining %d and %d", step, ds[0], ds[1], allowed, rem0, rem1)
			}
		}
		take("1st", true, 2, 4)
		take("2nd", true, 1, 3)
		take("3rd", true, 0, 2)
		take("4th: the second's limit rejects, the minute's does not count it", false, 0, 1)
		clock.Advance(time.Second)
		take("5th: the minute's limit counted 3", true, 2, 1)
		take("6th", true, 1, 0)
		take("7th: the minute's limit rejects, the second's does not count it", false, 0, 0)
		if err := c.Peek(ctx, "client", 0, ds); err != nil || ds[0].Remaining != 1 {
			t.Fatalf("after the 7th: second's remaining %d (%v), want 1", ds[0].Remaining, err)
		}
	})
	for _, a := range algorithms {
		for _, b := range algorithms {
			t.Run(a.String()+"+"+b.String(), func(t *testing.T) {
				clock := NewClock(Epoch.Add(time.Second))
				s := newStore(t, clock)
				c, err := s.Bind([]core.Limit{
					{Name: "second", Algorithm: a, Rate: core.PerSecond(3)},
					{Name: "minute", Algorithm: b, Rate: core.PerMinute(5)},
				})
				if err != nil {
					t.Fatal(err)
				}
				if got := takeConcurrently(t, []core.Counter{c}, 2, 64, 2); got != 3 {
					t.Fatalf("64 goroutines: %d admitted, want 3", got)
				}
				ds := make([]core.Decision, 2)
				if err := c.Peek(ctx, "hot-key", 0, ds); err != nil || ds[1].Remaining != 2 {
					t.Fatalf("the minute's limit has %d remaining (%v), want 2: rejected requests were counted", ds[1].Remaining, err)
				}
				clock.Advance(2 * time.Second) // every per-second limit is full again
				admitted := 0
				for i := 0; i < 10; i++ {
					if _, err := c.Take(ctx, "hot-key", 1, ds); err != nil {
						t.Fatal(err)
					}
					if ds[0].Allowed && ds[1].Allowed {
						admitted++
					}
				}
				if admitted != 2 {
					t.Fatalf("2 s later: %d of 10 admitted, want 2", admitted)
				}
			})
		}
	}
}

var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

// RunRefund checks that a refund gives back what a Take counted: right
// after an admitted request of cost 2 and its refund, the key answers as
// it did before the request. A window refund after the window has passed
// changes nothing in the new window.
func RunRefund(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, l := range Limits() {
		t.Run(limitName(l), func(t *testing.T) {
			clock := NewClock(Epoch.Add(250 * time.Millisecond))
			c := bind(t, newStore(t, clock), l)
			if _, err := c.Take(ctx, "client", 1); err != nil {
				t.Fatal(err)
			}
			before, err := c.Peek(ctx, "client", 1)
			if err != nil {
				t.Fatal(err)
			}
			var ds [1]core.Decision
			at, err := c.Counter.Take(ctx, "client", 2, ds[:])
			if err != nil || !ds[0].Allowed {
				t.Fatalf("take of cost 2: %+v %v", ds[0], err)
			}
			if err := c.Refund(ctx, "client", 2, at, ds[:]); err != nil {
				t.Fatal(err)
			}
			after, err := c.Peek(ctx, "client", 1)
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Fatalf("after the refund:\n got %+v\nwant %+v", after, before)
			}
		})
	}
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(alg.String()+"/past-window", func(t *testing.T) {
			clock := NewClock(Epoch.Add(59 * time.Second))
			l := core.Limit{Algorithm: alg, Rate: core.PerMinute(10)}
			c := bind(t, newStore(t, clock), l)
			var ds [1]core.Decision
			at, err := c.Counter.Take(ctx, "client", 4, ds[:])
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Second)
			if _, err := c.Take(ctx, "client", 1); err != nil {
				t.Fatal(err)
			}
			want, _ := c.Peek(ctx, "client", 0)
			if err := c.Refund(ctx, "client", 4, at, ds[:]); err != nil {
				t.Fatal(err)
			}
			got, _ := c.Peek(ctx, "client", 0)
			if alg == core.FixedWindow && got != want {
				t.Fatalf("a refund for the last window changed this one:\n got %+v\nwant %+v", got, want)
			}
			if alg == core.SlidingWindowCounter && got.Remaining != 9 {
				// 1 in this window; the previous window's 4 given back.
				t.Fatalf("remaining %d after refunding the previous window, want 9", got.Remaining)
			}
		})
	}
}

// RunBlock checks that a limit of 0 requests rejects every request with a
// RetryAfter of one period, and that a limit bound with it counts nothing.
func RunBlock(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, NewClock(Epoch.Add(time.Second)))
			block := core.Limit{Name: "blocked", Algorithm: alg, Rate: core.Rate{Count: 0, Period: time.Minute}}
			c, err := s.Bind([]core.Limit{{Name: "api", Algorithm: alg, Rate: core.PerMinute(5)}, block})
			if err != nil {
				t.Fatal(err)
			}
			ds := make([]core.Decision, 2)
			for i := 0; i < 3; i++ {
				if _, err := c.Take(ctx, "client", 1, ds); err != nil {
					t.Fatal(err)
				}
				want := core.Decision{Name: "blocked", Window: time.Minute, ResetAfter: time.Minute, RetryAfter: time.Minute}
				if ds[1] != want {
					t.Fatalf("take %d: block decided %+v, want %+v", i, ds[1], want)
				}
			}
			if err := c.Peek(ctx, "client", 0, ds); err != nil || ds[0].Remaining != 5 {
				t.Fatalf("the limit bound with the block counted: remaining %d (%v), want 5", ds[0].Remaining, err)
			}
			if _, err := s.Bind([]core.Limit{{Rate: core.Rate{Count: 0, Period: time.Minute}, Burst: 2, Algorithm: core.TokenBucket}}); err == nil {
				t.Fatal("a burst on a limit of 0 was accepted")
			}
		})
	}
}
