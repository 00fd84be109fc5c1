package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// events records every event an observer sees.
type events []core.Event

func (es *events) observe(e core.Event) { *es = append(*es, e) }

// decisive returns the limits and outcomes of the Decisive events, and
// how many events there were.
func (es events) decisive() (got []string, n int) {
	for _, e := range es {
		if e.Decisive {
			got = append(got, e.Limit+" "+e.Outcome.String())
		}
	}
	return got, len(es)
}

// Each request has exactly one Decisive event, on the limit whose
// decision is the request's: the most restrictive when it passes, the
// rejecting one (of the longest Retry-After) when it does not, across the
// limits of one limiter and the checks of TakeAll, the checks not asked
// before the rejection included; a store failure's event is decisive.
func TestDecisiveEvent(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	store := newMemory(t, clock)
	var seen events
	observe := core.WithObserver(seen.observe)
	two, err := core.NewLimiter(core.Limit{Name: "second", Algorithm: core.FixedWindow, Rate: core.PerSecond(3)},
		core.WithLimit(core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}),
		core.WithStore(store), observe)
	require.NoError(t, err)

	step := func(what string, take func() core.Decision, want []string, n int) {
		t.Helper()
		seen = nil
		d := take()
		got, count := seen.decisive()
		assert.Equal(t, want, got, "%s (decision of %q)", what, d.Name)
		assert.Equal(t, n, count, "%s: events", what)
	}
	takeTwo := func() core.Decision { d, _ := two.Take(ctx, "k", 1); return d }
	// Remaining 2 of 3 and 1 of 2: the minute limit is the more restrictive.
	step("admitted by both", takeTwo, []string{"minute allowed"}, 2)
	step("admitted, minute now at 0", takeTwo, []string{"minute allowed"}, 2)
	step("rejected by the minute", takeTwo, []string{"minute denied"}, 1)

	// TakeAll: a passing check, one that rejects with a Retry-After of a
	// second, and one that, once spent, is asked only to find the longest
	// Retry-After (an hour).
	first, _ := core.NewLimiter(core.Limit{Name: "first", Rate: core.PerMinute(100)}, core.WithStore(store), observe)
	rejecting, _ := core.NewLimiter(core.Limit{Name: "rejecting", Algorithm: core.FixedWindow, Rate: core.PerSecond(1)}, core.WithStore(store), observe)
	hourly, _ := core.NewLimiter(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(1)}, core.WithStore(store), observe)
	checks := []core.Check{{Limiter: first, Key: "a"}, {Limiter: rejecting, Key: "a"}, {Limiter: hourly, Key: "a"}}
	takeAll := func() core.Decision { d, _ := core.TakeAll(ctx, checks, 1); return d }
	step("TakeAll admitted", takeAll, []string{"hourly allowed"}, 3)
	step("TakeAll rejected by two checks", takeAll, []string{"hourly denied"}, 2)
	clock.Advance(time.Second)
	step("TakeAll rejected by the last check alone", takeAll, []string{"hourly denied"}, 1)

	// A store failure, fail open.
	failing, _ := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)}, core.WithStore(&failingStore{}), observe)
	step("store failure", func() core.Decision { d, _ := failing.Take(ctx, "k", 1); return d }, []string{"api error_allowed"}, 1)

	// A shadow limit that would reject: its event is decisive only
	// without enforcing checks.
	shadow, _ := core.NewLimiter(core.Limit{Name: "shadow", Algorithm: core.FixedWindow, Rate: core.Rate{Period: time.Hour}},
		core.WithStore(store), core.WithShadow(), observe)
	step("shadow alone", func() core.Decision { d, _ := shadow.Take(ctx, "k", 1); return d }, []string{"shadow shadow_denied"}, 1)
	step("shadow beside an enforcing check", func() core.Decision {
		d, _ := core.TakeAll(ctx, []core.Check{{Limiter: first, Key: "b"}, {Limiter: shadow, Key: "b"}}, 1)
		return d
	}, []string{"first allowed"}, 2)
}

// Observed decisions of the memory store are timed: every event carries
// the time the store took, on the system clock, whether the store reads it
// or has a clock of its own (which may stand still).
func TestMemoryLatencyObserved(t *testing.T) {
	still := storetest.NewClock(storetest.Epoch)
	for name, store := range map[string]*core.MemoryStore{"system clock": {}, "injected clock": {Clock: still.Now}} {
		t.Run(name, func(t *testing.T) {
			var seen events
			lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(10)}, core.WithStore(store), core.WithObserver(seen.observe))
			require.NoError(t, err)
			for range 100 {
				_, _ = lim.Take(context.Background(), "k", 1)
			}
			require.Len(t, seen, 100)
			timed := 0
			for _, e := range seen {
				require.GreaterOrEqual(t, e.Latency, time.Duration(0))
				require.Less(t, e.Latency, time.Second, "a latency is the decision's, not the store's age")
				if e.Latency > 0 {
					timed++
				}
			}
			assert.Greater(t, timed, 0, "no decision of the memory store was timed")
		})
	}
}
