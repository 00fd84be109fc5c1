package ratekitprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/observe/observetest"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
)

var epoch = time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)

// newMetrics returns metrics registered in a fresh pedantic registry, which
// also checks that Collect agrees with Describe.
func newMetrics(t *testing.T, opts ...ratekitprom.Option) (*ratekitprom.Metrics, *prometheus.Registry) {
	t.Helper()
	m, err := ratekitprom.New(opts...)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	return m, reg
}

// newStore returns a memory store whose clock stands still.
func newStore(t *testing.T) *core.MemoryStore {
	t.Helper()
	return &core.MemoryStore{Clock: storetest.NewClock(epoch).Now}
}

// recorder forwards events to an observer and counts them.
type recorder struct {
	next func(core.Event)

	mu          sync.Mutex
	events      int
	withLatency int
}

func (r *recorder) observe(e core.Event) {
	r.mu.Lock()
	r.events++
	if e.Latency > 0 {
		r.withLatency++
	}
	r.mu.Unlock()
	r.next(e)
}

// histogram returns the store-duration histogram of a limit.
func histogram(t *testing.T, reg prometheus.Gatherer, limit string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "ratekit_store_duration_seconds" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return metric.GetHistogram()
				}
			}
		}
	}
	t.Fatalf("no store-duration histogram for limit %q", limit)
	return nil
}

func TestFixedWindowCounts(t *testing.T) {
	m, reg := newMetrics(t)
	rec := &recorder{next: m.Observe}
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(observetest.Remote{Store: newStore(t)}),
		core.WithObserver(rec.observe),
	)
	require.NoError(t, err)

	for range 30 {
		_, err := lim.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}

	const want = `
# HELP ratekit_near_limit_total Requests admitted with less than 20% of the limit remaining.
# TYPE ratekit_near_limit_total counter
ratekit_near_limit_total{limit="api"} 2
# HELP ratekit_requests_total Requests decided, once each, by the limit whose decision was the request's and that decision (allowed, denied, shadow_denied, soft_allowed, elastic_allowed, error_allowed, error_denied).
# TYPE ratekit_requests_total counter
ratekit_requests_total{decision="allowed",limit="api"} 10
ratekit_requests_total{decision="denied",limit="api"} 20
ratekit_requests_total{decision="elastic_allowed",limit="api"} 0
ratekit_requests_total{decision="error_allowed",limit="api"} 0
ratekit_requests_total{decision="error_denied",limit="api"} 0
ratekit_requests_total{decision="shadow_denied",limit="api"} 0
ratekit_requests_total{decision="soft_allowed",limit="api"} 0
# HELP ratekit_store_errors_total Decisions whose store call failed; their decision, error_allowed or error_denied, tells the fail mode.
# TYPE ratekit_store_errors_total counter
ratekit_store_errors_total{store="memory"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"ratekit_requests_total", "ratekit_near_limit_total", "ratekit_store_errors_total"))

	// Every decision of a single limit is committed, the rejections too,
	// so each carries the time spent in the store.
	assert.Equal(t, 30, rec.events)
	assert.Equal(t, 30, rec.withLatency)
	h := histogram(t, reg, "api")
	assert.Equal(t, uint64(30), h.GetSampleCount())
	assert.Less(t, h.GetSampleSum(), 1.0)
}

// TestMemoryStoreTimed: the decisions of a memory store are counted and
// timed, in the histogram's lowest buckets.
func TestMemoryStoreTimed(t *testing.T) {
	m, reg := newMetrics(t)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(10)},
		core.WithStore(newStore(t)), core.WithObserver(m.Observe))
	require.NoError(t, err)
	for range 12 {
		_, err := lim.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}
	const want = `
# HELP ratekit_requests_total Requests decided, once each, by the limit whose decision was the request's and that decision (allowed, denied, shadow_denied, soft_allowed, elastic_allowed, error_allowed, error_denied).
# TYPE ratekit_requests_total counter
ratekit_requests_total{decision="allowed",limit="api"} 10
ratekit_requests_total{decision="denied",limit="api"} 2
ratekit_requests_total{decision="elastic_allowed",limit="api"} 0
ratekit_requests_total{decision="error_allowed",limit="api"} 0
ratekit_requests_total{decision="error_denied",limit="api"} 0
ratekit_requests_total{decision="shadow_denied",limit="api"} 0
ratekit_requests_total{decision="soft_allowed",limit="api"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_requests_total"))
	h := histogram(t, reg, "api")
	assert.Equal(t, uint64(12), h.GetSampleCount())
	assert.Less(t, h.GetSampleSum(), 12*0.01, "12 memory decisions took 10ms each?")
	assert.Equal(t, 1e-6, h.GetBucket()[0].GetUpperBound(), "the lowest bucket")
}

func TestNearLimitFraction(t *testing.T) {
	m, reg := newMetrics(t, ratekitprom.WithNearLimit(0.5))
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(newStore(t)),
		core.WithObserver(m.Observe),
	)
	require.NoError(t, err)
	for range 12 {
		_, err := lim.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}
	// Remaining 4, 3, 2, 1 and 0 are below half of 10; rejections never count.
	assert.Equal(t, 5.0, counterValue(t, reg, "ratekit_near_limit_total", map[string]string{"limit": "api"}))
}

// The store durations go to the configured buckets.
func TestBuckets(t *testing.T) {
	m, reg := newMetrics(t, ratekitprom.WithBuckets([]float64{0.001, 0.01}), ratekitprom.WithStore("redis"))
	for _, d := range []time.Duration{500 * time.Microsecond, 5 * time.Millisecond, 50 * time.Millisecond, 0} {
		m.Observe(core.Event{Limit: "api", Outcome: core.Allowed, Latency: d})
	}
	h := histogram(t, reg, "api")
	assert.Equal(t, uint64(4), h.GetSampleCount(), "every decision is a sample, one faster than the clock's resolution too")
	require.Len(t, h.GetBucket(), 2)
	assert.Equal(t, uint64(2), h.GetBucket()[0].GetCumulativeCount())
	assert.Equal(t, uint64(3), h.GetBucket()[1].GetCumulativeCount())
	assert.InDelta(t, 0.0555, h.GetSampleSum(), 1e-9)
}

var errDown = errors.New("store down")

func TestStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		closed   bool
		decision string
	}{
		{"open", false, "error_allowed"},
		{"closed", true, "error_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t, ratekitprom.WithStore("redis"))
			rec := &recorder{next: m.Observe}
			lim, err := core.NewLimiter(
				core.Limit{Name: "api", Rate: core.PerSecond(10)},
				core.WithStore(observetest.FailingStore{Err: errDown}),
				observetest.FailMode(tc.closed),
				core.WithObserver(rec.observe),
				core.WithLogger(slog.New(slog.DiscardHandler)),
			)
			require.NoError(t, err)
			for range 5 {
				_, err := lim.Take(context.Background(), "client-42", 1)
				require.ErrorIs(t, err, errDown)
			}

			for _, d := range []string{"allowed", "denied", "error_allowed", "error_denied"} {
				want := 0.0
				if d == tc.decision {
					want = 5
				}
				assert.Equal(t, want, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "api", "decision": d}), d)
			}
			assert.Equal(t, 5.0, counterValue(t, reg, "ratekit_store_errors_total", map[string]string{"store": "redis"}))
			assert.Equal(t, 0.0, counterValue(t, reg, "ratekit_near_limit_total", map[string]string{"limit": "api"}))
			assert.Equal(t, uint64(rec.withLatency), histogram(t, reg, "api").GetSampleCount())
			assert.Equal(t, 5, rec.events)
		})
	}
}

func TestTwoLimits(t *testing.T) {
	m, reg := newMetrics(t)
	rec := &recorder{next: m.Observe}
	lim, err := core.NewLimiter(
		core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(5)},
		core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(100)}),
		core.WithStore(newStore(t)),
		core.WithObserver(rec.observe),
	)
	require.NoError(t, err)
	for range 8 {
		_, err := lim.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}

	// Five requests pass both limits; three are rejected by "burst", and
	// "hourly", which would have admitted them, does not count them. Each
	// request counts once, under burst, the more restrictive limit
	// (remaining 4 of 5 against 99 of 100 on the first request).
	for _, c := range []struct {
		limit, decision   string
		requests, decided float64
	}{
		{"burst", "allowed", 5, 5},
		{"burst", "denied", 3, 3},
		{"hourly", "allowed", 0, 5},
		{"hourly", "denied", 0, 0},
	} {
		labels := map[string]string{"limit": c.limit, "decision": c.decision}
		assert.Equal(t, c.requests, counterValue(t, reg, "ratekit_requests_total", labels), "requests %s %s", c.limit, c.decision)
		assert.Equal(t, c.decided, counterValue(t, reg, "ratekit_decisions_total", labels), "decisions %s %s", c.limit, c.decision)
	}
	// Burst 5: remaining 0 after the fifth request. Hourly 100: remaining
	// 95 and above, far from the limit.
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_near_limit_total", map[string]string{"limit": "burst"}))
	assert.Equal(t, 0.0, counterValue(t, reg, "ratekit_near_limit_total", map[string]string{"limit": "hourly"}))
	// Each limit's decisions are timed: one store call for both limits,
	// observed for each.
	assert.Equal(t, uint64(8), histogram(t, reg, "burst").GetSampleCount())
	assert.Equal(t, uint64(5), histogram(t, reg, "hourly").GetSampleCount())
	assert.Equal(t, 13, rec.events)
}

func TestTrackedKeys(t *testing.T) {
	api := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}
	unnamed := core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(100)}
	idle := core.Limit{Name: "idle", Rate: core.PerSecond(1)}
	s1, s2 := newStore(t), newStore(t)
	m, reg := newMetrics(t,
		ratekitprom.WithMemoryStore(s1, api, idle),
		ratekitprom.WithMemoryStore(s2, unnamed),
	)
	lim1, err := core.NewLimiter(api, core.WithStore(s1), core.WithObserver(m.Observe))
	require.NoError(t, err)
	lim2, err := core.NewLimiter(unnamed, core.WithStore(s2), core.WithObserver(m.Observe))
	require.NoError(t, err)

	ctx := context.Background()
	for i := range 21 {
		_, err := lim1.Take(ctx, fmt.Sprintf("client-%d", i%7), 1) // 7 keys, 3 requests each
		require.NoError(t, err)
		_, err = lim2.Take(ctx, fmt.Sprintf("client-%d", i), 1) // 21 keys
		require.NoError(t, err)
	}

	const want = `
# HELP ratekit_tracked_keys Keys the memory store tracks for the limit.
# TYPE ratekit_tracked_keys gauge
ratekit_tracked_keys{limit="100-per-1s"} 21
ratekit_tracked_keys{limit="api"} 7
ratekit_tracked_keys{limit="idle"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_tracked_keys"))
	assert.Equal(t, 21.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "100-per-1s", "decision": "allowed"}),
		"the default name labels both metrics alike")
}

// TestTrackedKeysSummed: a limit name given for two stores, or twice, is
// one series, the sum of the keys tracked for it.
func TestTrackedKeysSummed(t *testing.T) {
	api := core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}
	s1, s2 := newStore(t), newStore(t)
	m, reg := newMetrics(t, ratekitprom.WithMemoryStore(s1, api), ratekitprom.WithMemoryStore(s2, api))
	for i, s := range []*core.MemoryStore{s1, s2, s2} {
		lim, err := core.NewLimiter(api, core.WithStore(s), core.WithObserver(m.Observe))
		require.NoError(t, err)
		_, err = lim.Take(context.Background(), fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	const want = `
# HELP ratekit_tracked_keys Keys the memory store tracks for the limit.
# TYPE ratekit_tracked_keys gauge
ratekit_tracked_keys{limit="api"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_tracked_keys"))
}

// TestNoRequestDataInLabels drives traffic and operator actions with
// random keys and reasons and checks that every label value is a limit
// name, the store name, a decision, an action or a result, and that the
// number of series does not grow with the number of keys.
func TestNoRequestDataInLabels(t *testing.T) {
	limits := []core.Limit{
		{Name: "per-client", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(3)},
		{Name: "hourly", Algorithm: core.TokenBucket, Rate: core.PerHour(1000)},
	}
	store := newStore(t)
	m, reg := newMetrics(t, ratekitprom.WithStore("shared-memory"), ratekitprom.WithMemoryStore(store, limits...))
	lim, err := core.NewLimiter(limits[0], core.WithLimit(limits[1]), core.WithStore(store),
		core.WithObserver(m.Observe), core.WithActionObserver(m.ObserveAction), core.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)

	allowed := map[string]bool{"per-client": true, "hourly": true, "shared-memory": true}
	for _, d := range []string{"allowed", "denied", "shadow_denied", "soft_allowed", "elastic_allowed", "error_allowed", "error_denied",
		"reset", "grant", "ok", "not_found", "error"} {
		allowed[d] = true
	}
	labelNames := map[string]bool{"limit": true, "decision": true, "store": true, "action": true, "result": true}

	ctx := context.Background()
	take := func(key string) {
		for range 1 + rand.IntN(5) {
			_, err := lim.Take(ctx, key, 1)
			require.NoError(t, err)
		}
	}
	take("first-client")
	before := seriesCount(t, reg)

	keys := map[string]bool{}
	for i := range 1000 {
		key := fmt.Sprintf("%016x", rand.Uint64())
		keys[key] = true
		take(key)
		reason := "ticket " + key
		keys[reason] = true
		switch i % 4 {
		case 0:
			_, err := lim.Reset(ctx, key, reason)
			require.NoError(t, err)
		case 1:
			require.NoError(t, lim.Grant(ctx, key, 1, reason))
		case 2:
			require.ErrorIs(t, lim.Grant(ctx, key, 0, reason), core.ErrInvalidGrant)
		}
	}

	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				assert.True(t, labelNames[l.GetName()], "%s has label %q", mf.GetName(), l.GetName())
				assert.True(t, allowed[l.GetValue()], "%s has label value %q", mf.GetName(), l.GetValue())
				assert.False(t, keys[l.GetValue()], "%s has a key as label value", mf.GetName())
			}
		}
	}
	// 2 limits × 7 decisions, as requests and as decisions, 2 limits × 5
	// actions and results,
	// near-limit, duration and missing keys per limit, the store's
	// errors, tracked keys per limit.
	assert.Equal(t, 2*2*7+2*5+2+2+2+1+2, seriesCount(t, reg))
	assert.Equal(t, before, seriesCount(t, reg))
	// A reset key's state is full; the store drops it when it sweeps.
	assert.LessOrEqual(t, gaugeValue(t, reg, "ratekit_tracked_keys", map[string]string{"limit": "per-client"}), 1000.0+1)
	assert.Equal(t, 250.0, counterValue(t, reg, "ratekit_actions_total", map[string]string{"limit": "per-client", "action": "reset", "result": "ok"}))
	assert.Equal(t, 250.0, counterValue(t, reg, "ratekit_actions_total", map[string]string{"limit": "per-client", "action": "grant", "result": "ok"}))
	assert.Equal(t, 250.0, counterValue(t, reg, "ratekit_actions_total", map[string]string{"limit": "per-client", "action": "grant", "result": "error"}))
}

func TestObserveConcurrent(t *testing.T) {
	m, reg := newMetrics(t)
	names := []string{"a", "b", "c"}
	const goroutines, per = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				o := core.Allowed
				if i%2 == 1 {
					o = core.Denied
				}
				m.Observe(core.Event{Limit: names[(g+i)%len(names)], Outcome: o, Latency: time.Microsecond, Decisive: i%4 < 2})
			}
		}()
	}
	wg.Wait()
	var requests, decisions float64
	for _, n := range names {
		for _, d := range []string{"allowed", "denied"} {
			requests += counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": n, "decision": d})
			decisions += counterValue(t, reg, "ratekit_decisions_total", map[string]string{"limit": n, "decision": d})
		}
	}
	assert.Equal(t, float64(goroutines*per/2), requests)
	assert.Equal(t, float64(goroutines*per), decisions)
}

// An outcome that core adds later is counted under its number.
func TestUnknownOutcome(t *testing.T) {
	m, reg := newMetrics(t)
	o := core.Outcome(200)
	m.Observe(core.Event{Limit: "api", Outcome: o, Decisive: true})
	m.Observe(core.Event{Limit: "api", Outcome: o})
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "api", "decision": "outcome_200"}))
	assert.Equal(t, 2.0, counterValue(t, reg, "ratekit_decisions_total", map[string]string{"limit": "api", "decision": "outcome_200"}))
}

// TestActions: each operator action is counted once, by its limit, its
// action and its result, and neither the reason nor the key shows in any
// label, value or help text.
func TestActions(t *testing.T) {
	m, reg := newMetrics(t)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(newStore(t)), core.WithActionObserver(m.ObserveAction),
		core.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.Take(ctx, "client-42", 1)
	require.NoError(t, err)

	found, err := lim.Reset(ctx, "client-42", "ticket 1: alice@example.com")
	require.NoError(t, err)
	assert.True(t, found)
	found, err = lim.Reset(ctx, "client-unknown", "ticket 2: bob@example.com")
	require.NoError(t, err)
	assert.False(t, found)
	require.NoError(t, lim.Grant(ctx, "client-42", 5, "ticket 3: launch day"))
	require.ErrorIs(t, lim.Grant(ctx, "client-42", 0, "ticket 4: typo"), core.ErrInvalidGrant)

	const want = `
# HELP ratekit_actions_total Operator actions on keys, by limit, action (reset, grant) and result (ok, not_found, error).
# TYPE ratekit_actions_total counter
ratekit_actions_total{action="grant",limit="api",result="error"} 1
ratekit_actions_total{action="grant",limit="api",result="ok"} 1
ratekit_actions_total{action="reset",limit="api",result="error"} 0
ratekit_actions_total{action="reset",limit="api",result="not_found"} 1
ratekit_actions_total{action="reset",limit="api",result="ok"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_actions_total"))
	assertNotExported(t, reg, "ticket", "alice", "bob", "launch", "typo", "client-", "invalid grant")
}

// TestActionErrors: the actions on which the store fails are counted with
// result error, and the store's error message is no label.
func TestActionErrors(t *testing.T) {
	m, reg := newMetrics(t, ratekitprom.WithStore("redis"))
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerSecond(10)},
		core.WithStore(observetest.FailingStore{Err: errDown}), core.WithActionObserver(m.ObserveAction),
		core.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		_, err := lim.Reset(ctx, "client-42", "ticket 1")
		require.ErrorIs(t, err, errDown)
	}
	require.ErrorIs(t, lim.Grant(ctx, "client-42", 1, "ticket 2"), errDown)

	for _, c := range []struct {
		action, result string
		want           float64
	}{
		{"reset", "ok", 0},
		{"reset", "not_found", 0},
		{"reset", "error", 2},
		{"grant", "ok", 0},
		{"grant", "error", 1},
	} {
		assert.Equal(t, c.want, counterValue(t, reg, "ratekit_actions_total",
			map[string]string{"limit": "api", "action": c.action, "result": c.result}), "%s %s", c.action, c.result)
	}
	// The store's errors count decisions, not actions.
	assert.Equal(t, 0.0, counterValue(t, reg, "ratekit_store_errors_total", map[string]string{"store": "redis"}))
	assertNotExported(t, reg, "ticket", "client-", errDown.Error())
}

// TestActionSeriesWithDecisions: a limit's action series are created, at
// zero, with its other series at its first decision, so that a dashboard
// sees the first action as an increase.
func TestActionSeriesWithDecisions(t *testing.T) {
	m, reg := newMetrics(t)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(newStore(t)), core.WithObserver(m.Observe), core.WithActionObserver(m.ObserveAction))
	require.NoError(t, err)
	_, err = lim.Take(context.Background(), "client-42", 1)
	require.NoError(t, err)
	const want = `
# HELP ratekit_actions_total Operator actions on keys, by limit, action (reset, grant) and result (ok, not_found, error).
# TYPE ratekit_actions_total counter
ratekit_actions_total{action="grant",limit="api",result="error"} 0
ratekit_actions_total{action="grant",limit="api",result="ok"} 0
ratekit_actions_total{action="reset",limit="api",result="error"} 0
ratekit_actions_total{action="reset",limit="api",result="not_found"} 0
ratekit_actions_total{action="reset",limit="api",result="ok"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_actions_total"))
}

// TestObserveActionConcurrent: limiters of three limits, each used by
// three goroutines that grant, reset and reset a key never seen.
func TestObserveActionConcurrent(t *testing.T) {
	m, reg := newMetrics(t)
	names := []string{"a", "b", "c"}
	store := newStore(t)
	lims := make([]*core.Limiter, len(names))
	for i, n := range names {
		var err error
		lims[i], err = core.NewLimiter(core.Limit{Name: n, Algorithm: core.TokenBucket, Rate: core.PerMinute(10)},
			core.WithStore(store), core.WithActionObserver(m.ObserveAction), core.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
	}
	const goroutines, per = 9, 100
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lim, key := lims[g%len(lims)], fmt.Sprint("client-", g)
			for i := range per {
				reason := fmt.Sprintf("ticket %d-%d", g, i)
				assert.NoError(t, lim.Grant(ctx, key, 1, reason))
				found, err := lim.Reset(ctx, key, reason)
				assert.NoError(t, err)
				assert.True(t, found, "the grant is there to reset")
				found, err = lim.Reset(ctx, fmt.Sprint("unknown-", g), reason)
				assert.NoError(t, err)
				assert.False(t, found)
			}
		}()
	}
	wg.Wait()
	for _, n := range names {
		for _, c := range []struct{ action, result string }{{"grant", "ok"}, {"reset", "ok"}, {"reset", "not_found"}} {
			assert.Equal(t, float64(goroutines/len(names)*per), counterValue(t, reg, "ratekit_actions_total",
				map[string]string{"limit": n, "action": c.action, "result": c.result}), "%s %s %s", n, c.action, c.result)
		}
	}
	assertNotExported(t, reg, "ticket", "client-", "unknown-")
}

// An action that core adds later is counted under its name.
func TestUnknownAction(t *testing.T) {
	m, reg := newMetrics(t)
	m.ObserveAction(core.Action{Kind: "freeze", Limit: "api", Reason: "ticket 1"})
	m.ObserveAction(core.Action{Kind: "freeze", Limit: "api", Err: errDown})
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_actions_total", map[string]string{"limit": "api", "action": "freeze", "result": "ok"}))
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_actions_total", map[string]string{"limit": "api", "action": "freeze", "result": "error"}))
}

func TestObserveActionDoesNotAllocate(t *testing.T) {
	m, _ := newMetrics(t)
	actions := []core.Action{
		{Kind: core.ActionReset, Limit: "api", Found: true, Reason: "ticket 1"},
		{Kind: core.ActionReset, Limit: "api"},
		{Kind: core.ActionGrant, Limit: "api", Amount: 5},
		{Kind: core.ActionGrant, Limit: "api", Err: core.ErrInvalidGrant},
	}
	for _, a := range actions {
		m.ObserveAction(a)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, a := range actions {
			m.ObserveAction(a)
		}
	})
	assert.Zero(t, allocs)
}

// assertNotExported checks that none of texts shows anywhere in what reg
// exports: metric names, help, label names and values.
func assertNotExported(t *testing.T, reg prometheus.Gatherer, texts ...string) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.NotEmpty(t, mfs)
	for _, mf := range mfs {
		out := mf.String()
		for _, text := range texts {
			assert.NotContains(t, out, text, mf.GetName())
		}
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	m, _ := newMetrics(t)
	events := []core.Event{
		{Limit: "api", Outcome: core.Allowed, Decision: core.Decision{Allowed: true, Quota: 10, Remaining: 1}, Latency: 100 * time.Nanosecond},
		{Limit: "api", Outcome: core.Denied, Decision: core.Decision{Quota: 10}, Latency: time.Millisecond},
		{Limit: "api", Outcome: core.ErrorAllowed, Err: errDown, Latency: time.Second},
		{Limit: "api", Outcome: core.ErrorDenied, Err: errDown},
	}
	for _, e := range events {
		m.Observe(e)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, e := range events {
			m.Observe(e)
		}
	})
	assert.Zero(t, allocs)
}

func TestOptionErrors(t *testing.T) {
	store := newStore(t)
	api := core.Limit{Name: "api", Rate: core.PerSecond(10)}
	for _, tc := range []struct {
		name string
		opts []ratekitprom.Option
		want string
	}{
		{"nil option", []ratekitprom.Option{nil}, "nil option"},
		{"empty store", []ratekitprom.Option{ratekitprom.WithStore("")}, "store name is empty"},
		{"store not UTF-8", []ratekitprom.Option{ratekitprom.WithStore("\xff")}, "not valid UTF-8"},
		{"store name too long", []ratekitprom.Option{ratekitprom.WithStore(strings.Repeat("s", 65))}, "longer than 64 bytes"},
		{"near limit zero", []ratekitprom.Option{ratekitprom.WithNearLimit(0)}, "must be in (0, 1]"},
		{"near limit negative", []ratekitprom.Option{ratekitprom.WithNearLimit(-0.1)}, "must be in (0, 1]"},
		{"near limit above one", []ratekitprom.Option{ratekitprom.WithNearLimit(1.5)}, "must be in (0, 1]"},
		{"near limit NaN", []ratekitprom.Option{ratekitprom.WithNearLimit(math.NaN())}, "must be in (0, 1]"},
		{"no buckets", []ratekitprom.Option{ratekitprom.WithBuckets(nil)}, "no buckets"},
		{"bucket zero", []ratekitprom.Option{ratekitprom.WithBuckets([]float64{0, 1})}, "positive and finite"},
		{"bucket NaN", []ratekitprom.Option{ratekitprom.WithBuckets([]float64{math.NaN()})}, "positive and finite"},
		{"bucket infinite", []ratekitprom.Option{ratekitprom.WithBuckets([]float64{1, math.Inf(1)})}, "positive and finite"},
		{"buckets decreasing", []ratekitprom.Option{ratekitprom.WithBuckets([]float64{0.1, 0.01})}, "must increase"},
		{"buckets repeated", []ratekitprom.Option{ratekitprom.WithBuckets([]float64{0.1, 0.1})}, "must increase"},
		{"nil memory store", []ratekitprom.Option{ratekitprom.WithMemoryStore(nil, api)}, "store is nil"},
		{"memory store without limits", []ratekitprom.Option{ratekitprom.WithMemoryStore(store)}, "no limits"},
		{"invalid limit", []ratekitprom.Option{ratekitprom.WithMemoryStore(store, core.Limit{Name: "bad"})}, "invalid limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ratekitprom.New(tc.opts...)
			assert.Nil(t, m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// counterValue returns the value of the counter with exactly the given
// labels, failing the test if there is none.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return find(t, g, name, labels).GetCounter().GetValue()
}

func gaugeValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return find(t, g, name, labels).GetGauge().GetValue()
}

func find(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, metric := range mf.GetMetric() {
			if len(metric.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range metric.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue metrics
				}
			}
			return metric
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

func seriesCount(t *testing.T, g prometheus.Gatherer) int {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// TestShadowAndSoft: the decisions of shadow mode and soft throttling get
// their own decision values.
func TestShadowAndSoft(t *testing.T) {
	m, reg := newMetrics(t)
	newLim := func(name string, opt core.Option) *core.Limiter {
		lim, err := core.NewLimiter(core.Limit{Name: name, Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
			core.WithStore(newStore(t)), core.WithObserver(m.Observe), opt)
		require.NoError(t, err)
		return lim
	}
	shadow, soft := newLim("new-limit", core.WithShadow()), newLim("soft", core.WithSoftPercent(50))
	for range 30 {
		d, err := shadow.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		_, err = soft.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}
	const want = `
# HELP ratekit_requests_total Requests decided, once each, by the limit whose decision was the request's and that decision (allowed, denied, shadow_denied, soft_allowed, elastic_allowed, error_allowed, error_denied).
# TYPE ratekit_requests_total counter
ratekit_requests_total{decision="allowed",limit="new-limit"} 10
ratekit_requests_total{decision="denied",limit="new-limit"} 0
ratekit_requests_total{decision="elastic_allowed",limit="new-limit"} 0
ratekit_requests_total{decision="error_allowed",limit="new-limit"} 0
ratekit_requests_total{decision="error_denied",limit="new-limit"} 0
ratekit_requests_total{decision="shadow_denied",limit="new-limit"} 20
ratekit_requests_total{decision="soft_allowed",limit="new-limit"} 0
ratekit_requests_total{decision="allowed",limit="soft"} 10
ratekit_requests_total{decision="denied",limit="soft"} 15
ratekit_requests_total{decision="elastic_allowed",limit="soft"} 0
ratekit_requests_total{decision="error_allowed",limit="soft"} 0
ratekit_requests_total{decision="error_denied",limit="soft"} 0
ratekit_requests_total{decision="shadow_denied",limit="soft"} 0
ratekit_requests_total{decision="soft_allowed",limit="soft"} 5
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_requests_total"))
}

// TestElastic: the admissions of elastic throttling beyond the limit get
// their own decision value, counted while the signal reports room and not
// after.
func TestElastic(t *testing.T) {
	m, reg := newMetrics(t)
	var room atomic.Bool
	lim, err := core.NewLimiter(core.Limit{Name: "elastic", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(newStore(t)), core.WithObserver(m.Observe), core.WithElastic(50, room.Load))
	require.NoError(t, err)
	room.Store(true)
	for range 20 {
		_, err := lim.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}
	room.Store(false)
	for range 5 {
		_, err := lim.Take(context.Background(), "client-42", 1)
		require.NoError(t, err)
	}
	const want = `
# HELP ratekit_decisions_total Decisions of each limit, one per limit that decided a request, by limit and decision.
# TYPE ratekit_decisions_total counter
ratekit_decisions_total{decision="allowed",limit="elastic"} 10
ratekit_decisions_total{decision="denied",limit="elastic"} 10
ratekit_decisions_total{decision="elastic_allowed",limit="elastic"} 5
ratekit_decisions_total{decision="error_allowed",limit="elastic"} 0
ratekit_decisions_total{decision="error_denied",limit="elastic"} 0
ratekit_decisions_total{decision="shadow_denied",limit="elastic"} 0
ratekit_decisions_total{decision="soft_allowed",limit="elastic"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_decisions_total"))
}

// TestBesideAnotherObserver: core.WithObserver adds observers, and the
// metrics count every decision, and every request once, when another
// observer is attached too.
func TestBesideAnotherObserver(t *testing.T) {
	m, reg := newMetrics(t)
	var mu sync.Mutex
	seen := map[string]int{} // limit/decision → events
	other := func(e core.Event) {
		label := map[core.Outcome]string{core.Allowed: "allowed", core.Denied: "denied"}[e.Outcome]
		mu.Lock()
		seen[e.Limit+"/"+label]++
		mu.Unlock()
	}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithLimit(core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(4)}),
		core.WithStore(newStore(t)), core.WithObserver(other), core.WithObserver(m.Observe))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_, err := lim.Take(context.Background(), fmt.Sprint("client-", g%2), 1)
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	// Two keys, 20 requests each: 4 pass both limits, 16 are denied by burst.
	want := map[string]int{"api/allowed": 8, "burst/allowed": 8, "burst/denied": 32}
	assert.Equal(t, want, seen)
	for k, n := range want {
		limit, decision, _ := strings.Cut(k, "/")
		assert.Equal(t, float64(n), counterValue(t, reg, "ratekit_decisions_total", map[string]string{"limit": limit, "decision": decision}), k)
	}
	assert.Equal(t, 0.0, counterValue(t, reg, "ratekit_decisions_total", map[string]string{"limit": "api", "decision": "denied"}))
	// Each of the 40 requests once, all under burst, the more restrictive
	// limit (3 of 4 remaining, and less, against 9 of 10): the 8 admitted
	// and the 32 denied.
	var requests float64
	for _, l := range []string{"api", "burst"} {
		for _, d := range []string{"allowed", "denied"} {
			requests += counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": l, "decision": d})
		}
	}
	assert.Equal(t, 40.0, requests)
	assert.Equal(t, 8.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "burst", "decision": "allowed"}))
	assert.Equal(t, 32.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "burst", "decision": "denied"}))
}
