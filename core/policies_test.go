package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// TestPolicies: a limiter's decisions list all of its limits, in the
// order given, whichever decided: the memory store's lanes (one limit,
// two), the path of observers and of three limits, another store, soft
// and elastic throttling (the limit itself), a shaping bucket's capacity,
// a block left out.
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	burst := core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(2)}                                       // q=2, refills in 1 s
	hourly := core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(3)}                                       // q=3, 3600 s
	daily := core.Limit{Name: "daily", Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: 1000, Period: 24 * time.Hour}} // q=1000, 86400 s
	slow := core.Limit{Name: "slow", Algorithm: core.TokenBucket, Rate: core.PerMinute(40), Burst: 10}                             // 1.5 s a token: 15 s
	const two = `"burst";q=2;w=1, "hourly";q=3;w=3600`
	observed := core.WithObserver(func(core.Event) {})
	for _, tc := range []struct {
		name  string
		limit core.Limit
		opts  []core.Option
		want  string
	}{
		{"one limit", hourly, nil, `"hourly";q=3;w=3600`},
		{"a bucket's window rounded up", slow, nil, `"slow";q=10;w=15`},
		{"two limits", burst, []core.Option{core.WithLimit(hourly)}, two},
		{"two limits, observed", burst, []core.Option{core.WithLimit(hourly), observed}, two},
		{"three limits", burst, []core.Option{core.WithLimit(hourly), core.WithLimit(daily)}, two + `, "daily";q=1000;w=86400`},
		{"another store", burst, []core.Option{core.WithLimit(hourly), core.WithStore(remote{&core.MemoryStore{}})}, two},
		{"soft: the limit itself", burst, []core.Option{core.WithLimit(hourly), core.WithSoftPercent(50)}, two},
		{"elastic: the limit itself", burst, []core.Option{core.WithLimit(hourly), core.WithElastic(50, func() bool { return true })}, two},
		{"shadow", burst, []core.Option{core.WithLimit(hourly), core.WithShadow()}, two},
		{"a block is no quota policy", burst, []core.Option{core.WithLimit(core.Limit{Name: "banned", Rate: core.Rate{Period: time.Hour}})}, `"burst";q=2;w=1`},
		{"shaping: its capacity", core.Limit{Name: "shaped", Algorithm: core.LeakyBucket, Rate: core.PerSecond(10), Burst: 20, Shaping: true, MaxDelay: 500 * time.Millisecond}, nil, `"shaped";q=6;w=2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			opts := append([]core.Option{core.WithStore(&core.MemoryStore{Clock: clock.Now})}, tc.opts...)
			lim, err := core.NewLimiter(tc.limit, opts...)
			require.NoError(t, err)
			names := map[string]bool{}
			for i := range 6 { // admissions and rejections, by one limit and another
				d, err := lim.Take(ctx, "k", 1)
				require.NoError(t, err)
				assert.Equal(t, tc.want, d.Policies, "decision %d (by %s, allowed %v)", i, d.Name, d.Allowed)
				names[d.Name+"/"+strconv.FormatBool(d.Allowed)] = true
				if i == 2 {
					clock.Advance(time.Second) // the burst refills; the hour does not
				}
			}
			if len(tc.opts) > 0 && tc.want == two && !tc.limit.Shaping {
				assert.Greater(t, len(names), 1, "the decisions came from several limits or outcomes: %v", names)
			}
		})
	}
}

// remote hides the memory store from the limiter: the path of other
// stores.
type remote struct{ core.Store }

func (r remote) Bind(ls []core.Limit) (core.Counter, error) {
	c, err := r.Store.Bind(ls)
	return struct{ core.Counter }{c}, err
}

// TestTakeAllPolicies: TakeAll's decisions list the limits of every
// check, in the order of the checks, whichever check decided and whether
// it admitted or rejected; a limiter checked twice, or two limiters of the
// same limits, are listed once; shadow checks are left out beside
// enforcing ones, and listed when all are shadow; more sets of checks
// than a limiter keeps are still listed right.
func TestTakeAllPolicies(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	s := &core.MemoryStore{Clock: clock.Now}
	newLim := func(l core.Limit, opts ...core.Option) *core.Limiter {
		lim, err := core.NewLimiter(l, append([]core.Option{core.WithStore(s)}, opts...)...)
		require.NoError(t, err)
		return lim
	}
	global := newLim(core.Limit{Name: "global", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	perKey := newLim(core.Limit{Name: "per-key", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithLimit(core.Limit{Name: "per-key-day", Algorithm: core.FixedWindow, Rate: core.Rate{Count: 100, Period: 24 * time.Hour}}))
	twin := newLim(core.Limit{Name: "global", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	shadow := newLim(core.Limit{Name: "trial", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}, core.WithShadow())
	const both = `"global";q=5;w=60, "per-key";q=2;w=60, "per-key-day";q=100;w=86400`

	// checks returns the checks of ls for key; global counts every key
	// together.
	checks := func(key string, ls ...*core.Limiter) []core.Check {
		cs := make([]core.Check, len(ls))
		for i, l := range ls {
			cs[i] = core.Check{Limiter: l, Key: key}
			if l == global {
				cs[i].Key = "all"
			}
		}
		return cs
	}
	var names []string
	var allowed []bool
	for _, key := range []string{"alice", "alice", "alice", "bob", "bob", "carol", "dave"} {
		d, err := core.TakeAll(ctx, checks(key, global, perKey, shadow), 1)
		require.NoError(t, err)
		names, allowed = append(names, d.Name), append(allowed, d.Allowed)
		assert.Equal(t, both, d.Policies, "%s: decided by %s, allowed %v", key, d.Name, d.Allowed)
	}
	// The trace: alice's two admissions leave her 1, then 0 of per-key
	// (and 4, then 3 of global): per-key decides, and rejects her third
	// request (not counted). Bob's likewise, global at 2 then 1. Carol
	// has 1 of per-key and 0 of global: global decides, and rejects dave.
	assert.Equal(t, []string{"per-key", "per-key", "per-key", "per-key", "per-key", "global", "global"}, names)
	assert.Equal(t, []bool{true, true, false, true, true, true, false}, allowed)

	d, err := core.TakeAll(ctx, checks("dave", perKey, global), 0)
	require.NoError(t, err)
	assert.Equal(t, `"per-key";q=2;w=60, "per-key-day";q=100;w=86400, "global";q=5;w=60`, d.Policies, "the order of the checks")

	d, err = core.TakeAll(ctx, checks("dave", global, twin, perKey, global), 0)
	require.NoError(t, err)
	assert.Equal(t, both, d.Policies, "each item once")

	d, err = core.TakeAll(ctx, checks("dave", shadow, shadow), 0)
	require.NoError(t, err)
	assert.Equal(t, `"trial";q=1;w=60`, d.Policies, "all shadow: theirs")

	d, err = core.TakeAll(ctx, nil, 1)
	require.NoError(t, err)
	assert.Empty(t, d.Policies, "no checks, no policies")

	// Sets of checks beyond those a limiter keeps, each with a limiter
	// of its own after global.
	for i := range 40 {
		l := newLim(core.Limit{Name: "n" + strconv.Itoa(i), Rate: core.PerMinute(i + 1)})
		for range 2 {
			d, err := core.TakeAll(ctx, checks("erin", global, l), 0)
			require.NoError(t, err)
			assert.Equal(t, `"global";q=5;w=60, "n`+strconv.Itoa(i)+`";q=`+strconv.Itoa(i+1)+`;w=60`, d.Policies)
		}
	}
}

// TestTakeAllPoliciesAllocs: the list of a set of checks is made once:
// TakeAll of two checks on a memory store allocates nothing, admitted or
// rejected.
func TestTakeAllPoliciesAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are noise under the race detector")
	}
	ctx := context.Background()
	a := core.Must(core.NewLimiter(core.Limit{Name: "a", Rate: core.PerSecond(1_000_000)}))
	b := core.Must(core.NewLimiter(core.Limit{Name: "b", Rate: core.PerSecond(1_000_000)}))
	c := core.Must(core.NewLimiter(core.Limit{Name: "c", Algorithm: core.FixedWindow, Rate: core.PerHour(1)}))
	for name, checks := range map[string][]core.Check{
		"admitted": {{Limiter: a, Key: "k"}, {Limiter: b, Key: "k"}},
		"rejected": {{Limiter: a, Key: "k"}, {Limiter: c, Key: "k"}},
	} {
		d, err := core.TakeAll(ctx, checks, 1)
		require.NoError(t, err)
		require.Contains(t, d.Policies, ", ")
		allocs := testing.AllocsPerRun(100, func() { _, _ = core.TakeAll(ctx, checks, 1) })
		assert.Zero(t, allocs, "%s: allocations per TakeAll", name)
	}
}
