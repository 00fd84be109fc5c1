package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// RunOperate checks the operator's controls of a counter, for every limit
// of Limits: Inspect counts nothing and tells a key's state and grant;
// Reset puts a key back to full capacity and says whether there was
// anything to reset; a grant admits exactly its amount beyond the limit,
// is refunded to, adds up, expires, and refuses amounts it cannot give.
func RunOperate(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, l := range Limits() {
		t.Run(limitName(l), func(t *testing.T) {
			clock := NewClock(Epoch.Add(250 * time.Millisecond))
			c := bind(t, newStore(t, clock), l)
			full := capacity(l)
			var ds [1]core.Decision
			var gs [1]core.Grant
			inspect := func(step string) (core.Decision, core.Grant, bool) {
				t.Helper()
				tracked, err := c.Inspect(ctx, "client", ds[:], gs[:])
				if err != nil {
					t.Fatalf("%s: inspect: %v", step, err)
				}
				return ds[0], gs[0], tracked
			}
			take := func(step string, want bool) core.Decision {
				t.Helper()
				d, err := c.Take(ctx, "client", 1)
				if err != nil || d.Allowed != want {
					t.Fatalf("%s: take: allowed %v, want %v (%+v, %v)", step, d.Allowed, want, d, err)
				}
				return d
			}

			d, g, tracked := inspect("unknown key")
			if tracked || !d.Allowed || d.Remaining != full-1 || g != (core.Grant{}) {
				t.Fatalf("unknown key: tracked %v, %+v, grant %+v; want untracked, %d left", tracked, d, g, full-1)
			}
			if found, err := c.Reset(ctx, "client"); err != nil || found {
				t.Fatalf("reset of an unknown key: found %v, %v", found, err)
			}
			for i := 0; i < full; i++ {
				take("use the capacity", true)
			}
			peek, _ := c.Peek(ctx, "client", 1)
			if d, _, tracked = inspect("used up"); !tracked || d != peek {
				t.Fatalf("used up: tracked %v, inspect %+v, want Peek's %+v", tracked, d, peek)
			}
			if again, _, _ := inspect("again"); again != d {
				t.Fatalf("inspect counted: %+v, then %+v", d, again)
			}

			// A grant of 2 admits 2 more, each marked Granted, and no more.
			if err := c.Grant(ctx, "client", 2, time.Minute); err != nil {
				t.Fatal(err)
			}
			if d, g, _ = inspect("granted"); !d.Allowed || !d.Granted || d.Remaining != 1 || g != (core.Grant{Amount: 2, ExpiresIn: time.Minute}) {
				t.Fatalf("granted 2: %+v, grant %+v", d, g)
			}
			if d = take("first granted", true); !d.Granted || d.Remaining != 1 || d.RetryAfter != 0 {
				t.Fatalf("first granted request: %+v", d)
			}
			var tds [1]core.Decision
			at, err := c.Counter.Take(ctx, "client", 1, tds[:])
			if err != nil || !tds[0].Granted || tds[0].Remaining != 0 {
				t.Fatalf("second granted request: %+v %v", tds[0], err)
			}
			take("grant used up", false)
			if err := c.Refund(ctx, "client", 1, at, tds[:]); err != nil {
				t.Fatal(err)
			}
			take("refunded to the grant", true)
			take("used up again", false)

			// Bad grants change nothing.
			for _, n := range []int{0, -1, full + 1} {
				if err := c.Grant(ctx, "client", n, time.Minute); !errors.Is(err, core.ErrInvalidGrant) {
					t.Fatalf("grant of %d: %v, want ErrInvalidGrant", n, err)
				}
			}
			if err := c.Grant(ctx, "client", full, time.Minute); err != nil {
				t.Fatalf("grant of the capacity: %v", err)
			}
			if err := c.Grant(ctx, "client", 1, time.Minute); !errors.Is(err, core.ErrInvalidGrant) {
				t.Fatalf("grant beyond the capacity outstanding: %v, want ErrInvalidGrant", err)
			}
			if _, g, _ = inspect("capacity granted"); g.Amount != full {
				t.Fatalf("after a refused grant: grant %+v, want %d", g, full)
			}

			// A grant expires: the key is back to what its limit says.
			clock.Advance(time.Minute)
			if _, g, _ = inspect("expired"); g != (core.Grant{}) {
				t.Fatalf("grant after its minute: %+v", g)
			}

			// Reset: full capacity, grants gone, says so once.
			if err := c.Grant(ctx, "client", 1, time.Hour); err != nil {
				t.Fatal(err)
			}
			take("before the reset", true)
			if found, err := c.Reset(ctx, "client"); err != nil || !found {
				t.Fatalf("reset: found %v, %v", found, err)
			}
			if d, g, _ = inspect("reset"); d.Remaining != full-1 || g != (core.Grant{}) || d.Granted {
				t.Fatalf("after the reset: %+v, grant %+v; want %d left and no grant", d, g, full-1)
			}
			for i := 0; i < full; i++ {
				take("after the reset", true)
			}
			take("after the reset, over", false)
		})
	}
}

// RunOperateConcurrency fires requests at one key from many goroutines,
// with the clock standing still, while grants are given: exactly the
// capacity plus the grants is admitted. Then, with resets racing the
// requests, no more than a full capacity per reset is ever admitted.
func RunOperateConcurrency(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := core.Limit{Name: "race", Algorithm: alg, Rate: core.PerHour(20)}
			c := bind(t, newStore(t, NewClock(Epoch)), l)
			const grants, each = 5, 3
			var admitted atomic.Int64
			var wg sync.WaitGroup
			fire := func(n int) {
				defer wg.Done()
				for i := 0; i < n; i++ {
					d, err := c.Take(ctx, "client", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go fire(10)
			}
			for i := 0; i < grants; i++ {
				if err := c.Grant(ctx, "client", each, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			wg.Add(8) // whatever is left of the grants
			for g := 0; g < 8; g++ {
				go fire(5)
			}
			wg.Wait()
			if got := admitted.Load(); got != 20+grants*each {
				t.Fatalf("admitted %d, want the capacity 20 and %d granted", got, grants*each)
			}

			admitted.Store(0)
			var resets atomic.Int64
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go fire(20)
			}
			for i := 0; i < 4; i++ {
				if found, err := c.Reset(ctx, "client"); err != nil {
					t.Fatal(err)
				} else if found {
					resets.Add(1)
				}
			}
			wg.Wait()
			if got, most := admitted.Load(), 20*resets.Load(); got > most {
				t.Fatalf("admitted %d after %d resets that found counts, more than %d", got, resets.Load(), most)
			}
		})
	}
}
