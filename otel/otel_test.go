package ratekitotel_test

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/observe/observetest"
	ratekitotel "github.com/ratekit/ratekit/otel"
)

// harness is a meter provider whose metrics the test collects by hand.
type harness struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newHarness(t *testing.T) *harness {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &harness{t, reader, mp}
}

// collect returns the metrics recorded so far, by name.
func (h *harness) collect() map[string]metricdata.Metrics {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(h.t, h.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(h.t, "github.com/ratekit/ratekit/otel", sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs is an attribute set written as name=value pairs.
func attrs(kv ...string) attribute.Set {
	var a []attribute.KeyValue
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(a...)
}

// sum returns the value of counter name for the attribute set, 0 when it has
// no such data point.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string, set attribute.Set) int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	data, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 sum", name, m.Data)
	require.True(t, data.IsMonotonic, name)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Value
		}
	}
	return 0
}

// histogramCount returns the number of samples of histogram name for the
// attribute set.
func histogramCount(t *testing.T, ms map[string]metricdata.Metrics, name string, set attribute.Set) uint64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	data, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T, not a float64 histogram", name, m.Data)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Count
		}
	}
	return 0
}

// gauge returns the value of gauge name for each limit attribute.
func gauge(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]int64 {
	t.Helper()
	m, ok := ms[name]
	require.True(t, ok, "no metric %s", name)
	data, ok := m.Data.(metricdata.Gauge[int64])
	require.True(t, ok, "%s is a %T, not an int64 gauge", name, m.Data)
	out := map[string]int64{}
	for _, dp := range data.DataPoints {
		v, ok := dp.Attributes.Value("limit")
		require.True(t, ok)
		require.Equal(t, 1, dp.Attributes.Len())
		out[v.AsString()] = dp.Value
	}
	return out
}

// attributeValues returns every attribute of every data point, as
// key -> set of values.
func attributeValues(t *testing.T, ms map[string]metricdata.Metrics) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	add := func(set attribute.Set) {
		for _, kv := range set.ToSlice() {
			if out[string(kv.Key)] == nil {
				out[string(kv.Key)] = map[string]bool{}
			}
			out[string(kv.Key)][fmt.Sprint(kv.Value.AsInterface())] = true
		}
	}
	for name, m := range ms {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				add(dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				add(dp.Attributes)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range data.DataPoints {
				add(dp.Attributes)
			}
		default:
			t.Fatalf("%s: unexpected data %T", name, m.Data)
		}
	}
	return out
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newMemoryStore(t *testing.T) *core.MemoryStore {
	t.Helper()
	return &core.MemoryStore{Clock: storetest.NewClock(epoch).Now}
}

// total returns the sum of counter name over all its data points.
func total(t *testing.T, ms map[string]metricdata.Metrics, name string) int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	data, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 sum", name, m.Data)
	var n int64
	for _, dp := range data.DataPoints {
		n += dp.Value
	}
	return n
}

func TestFixedWindowCounts(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(newMemoryStore(t)), core.WithObserver(m.Observe))
	require.NoError(t, err)

	ctx := context.Background()
	for range 30 {
		_, err := lim.Take(ctx, "client-1", 1)
		require.NoError(t, err)
	}

	ms := h.collect()
	assert.Equal(t, int64(10), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "allowed")))
	assert.Equal(t, int64(20), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "denied")))
	// One limit: each request is one decision.
	assert.Equal(t, int64(10), sum(t, ms, "ratekit.decisions", attrs("limit", "api", "decision", "allowed")))
	assert.Equal(t, int64(20), sum(t, ms, "ratekit.decisions", attrs("limit", "api", "decision", "denied")))
	// Admissions leaving 1 and 0 of 10 are below 20%.
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.near_limit", attrs("limit", "api")))
	assert.Equal(t, uint64(30), histogramCount(t, ms, "ratekit.store.duration", attrs("store", "memory", "limit", "api")), "every decision timed")
	assert.NotContains(t, ms, "ratekit.store.errors")
	assert.NotContains(t, ms, "ratekit.tracked_keys")

	d := ms["ratekit.store.duration"]
	assert.Equal(t, "s", d.Unit)
	hist := d.Data.(metricdata.Histogram[float64])
	require.Len(t, hist.DataPoints, 1)
	bounds := hist.DataPoints[0].Bounds
	require.NotEmpty(t, bounds)
	assert.Equal(t, 0.000001, bounds[0], "1µs")
	assert.Equal(t, 1.0, bounds[len(bounds)-1])
}

// TestMemoryStoreTimed: the decisions of the memory store are recorded in
// the duration histogram, each of them, in its lowest buckets.
func TestMemoryStoreTimed(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(10)},
		core.WithStore(newMemoryStore(t)), core.WithObserver(m.Observe))
	require.NoError(t, err)
	for range 12 {
		_, err := lim.Take(context.Background(), "k", 1)
		require.NoError(t, err)
	}

	ms := h.collect()
	assert.Equal(t, int64(10), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "allowed")))
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "denied")))
	hist := ms["ratekit.store.duration"].Data.(metricdata.Histogram[float64])
	require.Len(t, hist.DataPoints, 1)
	dp := hist.DataPoints[0]
	assert.True(t, dp.Attributes.Equals(ptr(attrs("store", "memory", "limit", "api"))))
	assert.Equal(t, uint64(12), dp.Count, "every decision of the memory store is recorded")
	assert.GreaterOrEqual(t, dp.Sum, 0.0)
	assert.Less(t, dp.Sum, 12*0.01, "12 memory decisions took 10ms each?")
	assert.Equal(t, 0.000001, dp.Bounds[0])

	// A decision faster than the clock's resolution is recorded too, as 0.
	m.Observe(core.Event{Limit: "fast", Outcome: core.Allowed, Decisive: true})
	hist = h.collect()["ratekit.store.duration"].Data.(metricdata.Histogram[float64])
	for _, dp := range hist.DataPoints {
		if dp.Attributes.Equals(ptr(attrs("store", "memory", "limit", "fast"))) {
			assert.Equal(t, uint64(1), dp.Count)
			assert.Equal(t, uint64(1), dp.BucketCounts[0], "in the lowest bucket")
			assert.Equal(t, 0.0, dp.Sum)
			return
		}
	}
	t.Fatal("the decision of no latency is not recorded")
}

func ptr[T any](v T) *T { return &v }

func TestNearLimitFraction(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp, ratekitotel.WithNearLimit(0.5))
	require.NoError(t, err)
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(newMemoryStore(t)), core.WithObserver(m.Observe))
	require.NoError(t, err)
	for range 12 {
		_, err := lim.Take(context.Background(), "k", 1)
		require.NoError(t, err)
	}
	// Remaining 4, 3, 2, 1, 0 are below 5; the 2 rejections are not counted.
	assert.Equal(t, int64(5), sum(t, h.collect(), "ratekit.near_limit", attrs("limit", "api")))
}

var errDown = errors.New("store down: client 10.1.2.3 key secret-api-key")

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
			h := newHarness(t)
			m, err := ratekitotel.New(h.mp, ratekitotel.WithStore("redis"))
			require.NoError(t, err)
			lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerSecond(10)},
				core.WithStore(observetest.FailingStore{Err: errDown}), observetest.FailMode(tc.closed),
				core.WithObserver(m.Observe), core.WithLogger(discard()))
			require.NoError(t, err)
			for range 3 {
				d, err := lim.Take(context.Background(), "client-1", 1)
				require.ErrorIs(t, err, errDown)
				require.Equal(t, !tc.closed, d.Allowed)
			}

			ms := h.collect()
			assert.Equal(t, int64(3), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", tc.decision)))
			assert.Equal(t, int64(0), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "allowed")))
			assert.Equal(t, int64(0), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "denied")))
			assert.Equal(t, int64(3), sum(t, ms, "ratekit.decisions", attrs("limit", "api", "decision", tc.decision)))
			assert.Equal(t, int64(3), sum(t, ms, "ratekit.store.errors", attrs("store", "redis")))
			assert.Equal(t, uint64(3), histogramCount(t, ms, "ratekit.store.duration", attrs("store", "redis", "limit", "api")))
			assert.NotContains(t, ms, "ratekit.near_limit")
			for key, values := range attributeValues(t, ms) {
				for v := range values {
					assert.NotContains(t, v, "down", "attribute %s", key)
				}
			}
		})
	}
}

// TestTwoLimits: a request under two limits counts once in
// ratekit.requests, under the more restrictive limit, and twice in
// ratekit.decisions, once per limit.
func TestTwoLimits(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	lim, err := core.NewLimiter(
		core.Limit{Name: "per-second", Algorithm: core.FixedWindow, Rate: core.PerSecond(5)},
		core.WithLimit(core.Limit{Name: "per-hour", Algorithm: core.FixedWindow, Rate: core.PerHour(100)}),
		core.WithStore(newMemoryStore(t)), core.WithObserver(m.Observe))
	require.NoError(t, err)

	// One request, under both limits.
	_, err = lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	ms := h.collect()
	assert.Equal(t, int64(1), total(t, ms, "ratekit.requests"), "one request, counted once")
	assert.Equal(t, int64(2), total(t, ms, "ratekit.decisions"), "one request, decided by two limits")
	// Remaining 4 of 5 against 99 of 100: per-second decides the request.
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.requests", attrs("limit", "per-second", "decision", "allowed")))
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.decisions", attrs("limit", "per-second", "decision", "allowed")))
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.decisions", attrs("limit", "per-hour", "decision", "allowed")))

	for range 7 {
		_, err := lim.Take(context.Background(), "k", 1)
		require.NoError(t, err)
	}
	ms = h.collect()
	// The 5 admitted requests are decided by both limits, and counted as
	// requests under per-second, the more restrictive; the 3 rejected are
	// rejected by per-second, and per-hour does not decide them.
	for _, c := range []struct {
		limit, decision   string
		requests, decided int64
	}{
		{"per-second", "allowed", 5, 5},
		{"per-second", "denied", 3, 3},
		{"per-hour", "allowed", 0, 5},
		{"per-hour", "denied", 0, 0},
	} {
		set := attrs("limit", c.limit, "decision", c.decision)
		assert.Equal(t, c.requests, sum(t, ms, "ratekit.requests", set), "requests %s %s", c.limit, c.decision)
		assert.Equal(t, c.decided, sum(t, ms, "ratekit.decisions", set), "decisions %s %s", c.limit, c.decision)
	}
	assert.Equal(t, int64(8), total(t, ms, "ratekit.requests"))
	assert.Equal(t, int64(13), total(t, ms, "ratekit.decisions"))
	assert.Len(t, ms["ratekit.requests"].Data.(metricdata.Sum[int64]).DataPoints, 2)
	assert.Len(t, ms["ratekit.decisions"].Data.(metricdata.Sum[int64]).DataPoints, 3)
	assert.Equal(t, "{request}", ms["ratekit.requests"].Unit)
	assert.Equal(t, "{decision}", ms["ratekit.decisions"].Unit)
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.near_limit", attrs("limit", "per-second")))
	assert.Equal(t, int64(0), sum(t, ms, "ratekit.near_limit", attrs("limit", "per-hour")))
	// Each limit's decisions are timed: one store call for both limits,
	// recorded for each.
	assert.Equal(t, uint64(8), histogramCount(t, ms, "ratekit.store.duration", attrs("store", "memory", "limit", "per-second")))
	assert.Equal(t, uint64(5), histogramCount(t, ms, "ratekit.store.duration", attrs("store", "memory", "limit", "per-hour")))
}

func TestTrackedKeys(t *testing.T) {
	h := newHarness(t)
	store, other := newMemoryStore(t), newMemoryStore(t)
	named := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)}
	unnamed := core.Limit{Rate: core.PerMinute(100)} // named "100-per-1m0s" by core
	idle := core.Limit{Name: "idle", Rate: core.PerMinute(1)}
	m, err := ratekitotel.New(h.mp,
		ratekitotel.WithMemoryStore(store, named, unnamed),
		ratekitotel.WithMemoryStore(other, named, idle))
	require.NoError(t, err)

	lim, err := core.NewLimiter(named, core.WithLimit(unnamed), core.WithStore(store), core.WithObserver(m.Observe))
	require.NoError(t, err)
	for i := range 7 {
		_, err := lim.Take(context.Background(), fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	lim2, err := core.NewLimiter(named, core.WithStore(other), core.WithObserver(m.Observe))
	require.NoError(t, err)
	for i := range 3 {
		_, err := lim2.Take(context.Background(), fmt.Sprint("other-", i), 1)
		require.NoError(t, err)
	}

	ms := h.collect()
	assert.Equal(t, map[string]int64{"api": 10, "100-per-1m0s": 7, "idle": 0}, gauge(t, ms, "ratekit.tracked_keys"))
	// The gauge names the unnamed limit as core's events do.
	assert.Equal(t, int64(7), sum(t, ms, "ratekit.decisions", attrs("limit", "100-per-1m0s", "decision", "allowed")))

	// Read at collection time.
	for i := range 5 {
		_, err := lim2.Take(context.Background(), fmt.Sprint("more-", i), 1)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(15), gauge(t, h.collect(), "ratekit.tracked_keys")["api"])
}

func TestNoRequestDataInAttributes(t *testing.T) {
	h := newHarness(t)
	store := newMemoryStore(t)
	perKey := core.Limit{Name: "per-key", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(2)}
	global := core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)}
	m, err := ratekitotel.New(h.mp, ratekitotel.WithStore("memory"), ratekitotel.WithMemoryStore(store, perKey, global))
	require.NoError(t, err)
	lim, err := core.NewLimiter(perKey, core.WithLimit(global), core.WithStore(store),
		core.WithObserver(m.Observe), core.WithActionObserver(m.ObserveAction), core.WithLogger(discard()))
	require.NoError(t, err)

	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := map[string]bool{}
	for i := range 1000 {
		key := fmt.Sprintf("%x", rng.Uint64())
		keys[key] = true
		for range 1 + rng.IntN(4) {
			_, err := lim.Take(ctx, key, 1)
			require.NoError(t, err)
		}
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

	allowed := map[string]map[string]bool{
		"limit":    {"per-key": true, "global": true},
		"store":    {"memory": true},
		"decision": {"allowed": true, "denied": true, "error_allowed": true, "error_denied": true},
		"action":   {"reset": true, "grant": true},
		"result":   {"ok": true, "not_found": true, "error": true},
	}
	ms := h.collect()
	assert.Equal(t, int64(250), sum(t, ms, "ratekit.actions", attrs("limit", "per-key", "action", "reset", "result", "ok")))
	assert.Equal(t, int64(250), sum(t, ms, "ratekit.actions", attrs("limit", "per-key", "action", "grant", "result", "ok")))
	assert.Equal(t, int64(250), sum(t, ms, "ratekit.actions", attrs("limit", "per-key", "action", "grant", "result", "error")))
	values := attributeValues(t, ms)
	require.NotEmpty(t, values)
	for key, vs := range values {
		require.Contains(t, allowed, key)
		for v := range vs {
			assert.True(t, allowed[key][v], "attribute %s=%q", key, v)
			assert.False(t, keys[v], "attribute %s=%q is a request key", key, v)
		}
	}
	assert.True(t, values["decision"]["denied"], "the traffic should hit the per-key limit")
}

func TestConcurrentFirstSight(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	const goroutines, perLimit = 8, 50
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perLimit {
				for l := range 10 {
					out := core.Allowed
					if i%2 == 1 {
						out = core.Denied
					}
					// The events of the even limits are decisive.
					m.Observe(core.Event{Limit: fmt.Sprint("limit-", l), Outcome: out, Latency: time.Microsecond, Decisive: l%2 == 0})
				}
			}
		}()
	}
	wg.Wait()
	ms := h.collect()
	for l := range 10 {
		name := fmt.Sprint("limit-", l)
		requests := int64(0)
		if l%2 == 0 {
			requests = goroutines * perLimit / 2
		}
		for _, d := range []string{"allowed", "denied"} {
			assert.Equal(t, requests, sum(t, ms, "ratekit.requests", attrs("limit", name, "decision", d)), "%s %s", name, d)
			assert.Equal(t, int64(goroutines*perLimit/2), sum(t, ms, "ratekit.decisions", attrs("limit", name, "decision", d)), "%s %s", name, d)
		}
		assert.Equal(t, uint64(goroutines*perLimit), histogramCount(t, ms, "ratekit.store.duration", attrs("store", "memory", "limit", name)))
	}
}

func TestFutureOutcome(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	future := core.Outcome(200)
	m.Observe(core.Event{Limit: "api", Outcome: future, Decisive: true})
	m.Observe(core.Event{Limit: "api", Outcome: future})
	ms := h.collect()
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", "outcome_200")))
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.decisions", attrs("limit", "api", "decision", "outcome_200")))
}

// TestElastic: the admissions of elastic throttling beyond the limit are
// counted under their own decision, while the signal reports room and not
// after.
func TestElastic(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	var room atomic.Bool
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(newMemoryStore(t)), core.WithObserver(m.Observe), core.WithElastic(50, room.Load))
	require.NoError(t, err)
	ctx := context.Background()
	room.Store(true)
	for range 20 {
		_, err := lim.Take(ctx, "client-1", 1)
		require.NoError(t, err)
	}
	room.Store(false)
	for range 5 {
		_, err := lim.Take(ctx, "client-1", 1)
		require.NoError(t, err)
	}
	ms := h.collect()
	for decision, want := range map[string]int64{"allowed": 10, "elastic_allowed": 5, "denied": 10} {
		assert.Equal(t, want, sum(t, ms, "ratekit.requests", attrs("limit", "api", "decision", decision)), decision)
		assert.Equal(t, want, sum(t, ms, "ratekit.decisions", attrs("limit", "api", "decision", decision)), decision)
	}
}

// TestActions: each operator action is counted once, by its limit, its
// action and its result, and neither the reason nor the key shows in any
// attribute or description.
func TestActions(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithStore(newMemoryStore(t)), core.WithActionObserver(m.ObserveAction), core.WithLogger(discard()))
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

	ms := h.collect()
	for _, c := range []struct {
		action, result string
		want           int64
	}{
		{"reset", "ok", 1},
		{"reset", "not_found", 1},
		{"reset", "error", 0},
		{"grant", "ok", 1},
		{"grant", "error", 1},
	} {
		assert.Equal(t, c.want, sum(t, ms, "ratekit.actions", attrs("limit", "api", "action", c.action, "result", c.result)), "%s %s", c.action, c.result)
	}
	assert.Len(t, ms["ratekit.actions"].Data.(metricdata.Sum[int64]).DataPoints, 4)
	assert.Equal(t, "{action}", ms["ratekit.actions"].Unit)
	assertNotExported(t, ms, "ticket", "alice", "bob", "launch", "typo", "client-", "invalid grant")
}

// TestActionErrors: the actions on which the store fails are counted with
// result error, and the store's error message is no attribute.
func TestActionErrors(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp, ratekitotel.WithStore("redis"))
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerSecond(10)},
		core.WithStore(observetest.FailingStore{Err: errDown}), core.WithActionObserver(m.ObserveAction), core.WithLogger(discard()))
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		_, err := lim.Reset(ctx, "client-42", "ticket 1")
		require.ErrorIs(t, err, errDown)
	}
	require.ErrorIs(t, lim.Grant(ctx, "client-42", 1, "ticket 2"), errDown)

	ms := h.collect()
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.actions", attrs("limit", "api", "action", "reset", "result", "error")))
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.actions", attrs("limit", "api", "action", "grant", "result", "error")))
	assert.Len(t, ms["ratekit.actions"].Data.(metricdata.Sum[int64]).DataPoints, 2)
	// The store's errors count decisions, not actions.
	assert.NotContains(t, ms, "ratekit.store.errors")
	assertNotExported(t, ms, "ticket", "client-", "down", "10.1.2.3", "secret")
}

// TestObserveActionConcurrent: limiters of three limits, each used by
// three goroutines that grant, reset and reset a key never seen.
func TestObserveActionConcurrent(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	names := []string{"a", "b", "c"}
	store := newMemoryStore(t)
	lims := make([]*core.Limiter, len(names))
	for i, n := range names {
		lims[i], err = core.NewLimiter(core.Limit{Name: n, Algorithm: core.TokenBucket, Rate: core.PerMinute(10)},
			core.WithStore(store), core.WithActionObserver(m.ObserveAction), core.WithLogger(discard()))
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
	ms := h.collect()
	for _, n := range names {
		for _, c := range []struct{ action, result string }{{"grant", "ok"}, {"reset", "ok"}, {"reset", "not_found"}} {
			assert.Equal(t, int64(goroutines/len(names)*per), sum(t, ms, "ratekit.actions", attrs("limit", n, "action", c.action, "result", c.result)),
				"%s %s %s", n, c.action, c.result)
		}
	}
	assertNotExported(t, ms, "ticket", "client-", "unknown-")
}

// An action that core adds later is counted under its name.
func TestFutureAction(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	m.ObserveAction(core.Action{Kind: "freeze", Limit: "api", Reason: "ticket 1"})
	m.ObserveAction(core.Action{Kind: "freeze", Limit: "api", Err: errDown})
	ms := h.collect()
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.actions", attrs("limit", "api", "action", "freeze", "result", "ok")))
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.actions", attrs("limit", "api", "action", "freeze", "result", "error")))
}

// assertNotExported checks that none of texts shows in the metrics' names,
// descriptions, units, attribute keys or attribute values.
func assertNotExported(t *testing.T, ms map[string]metricdata.Metrics, texts ...string) {
	t.Helper()
	require.NotEmpty(t, ms)
	var out []string
	for name, m := range ms {
		out = append(out, name, m.Description, m.Unit)
	}
	for key, values := range attributeValues(t, ms) {
		out = append(out, key)
		for v := range values {
			out = append(out, v)
		}
	}
	for _, s := range out {
		for _, text := range texts {
			assert.NotContains(t, s, text)
		}
	}
}

func TestOptionErrors(t *testing.T) {
	mp := newHarness(t).mp
	store := newMemoryStore(t)
	for name, tc := range map[string]struct {
		provider metric.MeterProvider
		opts     []ratekitotel.Option
		want     string
	}{
		"nil provider":       {nil, nil, "meter provider is nil"},
		"typed nil provider": {(*sdkmetric.MeterProvider)(nil), nil, "meter provider is nil"},
		"zero fraction":      {mp, []ratekitotel.Option{ratekitotel.WithNearLimit(0)}, "fraction 0 must be in (0, 1]"},
		"negative fraction":  {mp, []ratekitotel.Option{ratekitotel.WithNearLimit(-0.1)}, "must be in (0, 1]"},
		"fraction above one": {mp, []ratekitotel.Option{ratekitotel.WithNearLimit(1.5)}, "must be in (0, 1]"},
		"NaN fraction":       {mp, []ratekitotel.Option{ratekitotel.WithNearLimit(math.NaN())}, "must be in (0, 1]"},
		"empty store name":   {mp, []ratekitotel.Option{ratekitotel.WithStore("")}, "store name is empty"},
		"store not UTF-8":    {mp, []ratekitotel.Option{ratekitotel.WithStore("\xff")}, "not valid UTF-8"},
		"long store name":    {mp, []ratekitotel.Option{ratekitotel.WithStore(strings.Repeat("s", 65))}, "longer than 64 bytes"},
		"nil memory store":   {mp, []ratekitotel.Option{ratekitotel.WithMemoryStore(nil, core.Limit{Rate: core.PerSecond(1)})}, "store is nil"},
		"no limits":          {mp, []ratekitotel.Option{ratekitotel.WithMemoryStore(store)}, "no limits"},
		"bad limit":          {mp, []ratekitotel.Option{ratekitotel.WithMemoryStore(store, core.Limit{Name: "x"})}, "invalid limit"},
		"nil option":         {mp, []ratekitotel.Option{nil}, "nil option"},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := ratekitotel.New(tc.provider, tc.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, m)
		})
	}

	m, err := ratekitotel.New(mp, ratekitotel.WithNearLimit(1))
	require.NoError(t, err)
	assert.NotNil(t, m)
}

// TestBesideAnotherObserver: core.WithObserver adds observers, and the
// metrics count every decision, and every request once, when another
// observer is attached too.
func TestBesideAnotherObserver(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string]int64{} // limit/decision → events
	other := func(e core.Event) {
		label := map[core.Outcome]string{core.Allowed: "allowed", core.Denied: "denied"}[e.Outcome]
		mu.Lock()
		seen[e.Limit+"/"+label]++
		mu.Unlock()
	}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithLimit(core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(4)}),
		core.WithStore(newMemoryStore(t)), core.WithObserver(m.Observe), core.WithObserver(other))
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
	want := map[string]int64{"api/allowed": 8, "burst/allowed": 8, "burst/denied": 32}
	assert.Equal(t, want, seen)
	ms := h.collect()
	for k, n := range want {
		limit, decision, _ := strings.Cut(k, "/")
		assert.Equal(t, n, sum(t, ms, "ratekit.decisions", attrs("limit", limit, "decision", decision)), k)
	}
	assert.Equal(t, int64(0), sum(t, ms, "ratekit.decisions", attrs("limit", "api", "decision", "denied")))
	// Each of the 40 requests once, all under burst: it rejects 32, and
	// admits 8 with fewer remaining (3 of 4 and less) than api (9 of 10
	// and less).
	assert.Equal(t, int64(40), total(t, ms, "ratekit.requests"))
	assert.Equal(t, int64(8), sum(t, ms, "ratekit.requests", attrs("limit", "burst", "decision", "allowed")))
	assert.Equal(t, int64(32), sum(t, ms, "ratekit.requests", attrs("limit", "burst", "decision", "denied")))
}
