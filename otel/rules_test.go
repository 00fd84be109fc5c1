package ratekitotel_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/observe/observetest"
	ratekitotel "github.com/ratekit/ratekit/otel"
	"github.com/ratekit/ratekit/rules"
)

// The limit names of the two rules of twoRules.
const (
	everyone = "api/remote_address"
	login    = "api/remote_address@POST/login"
)

// twoRules limits each client to 100 requests a minute, and its POSTs to
// /login to 2; oneRule drops the login rule.
var (
	twoRules = rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: perMinute(100)},
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: perMinute(2)},
	}}
	oneRule = rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: perMinute(100)},
	}}
)

func perMinute(n int) *rules.RateLimit { return &rules.RateLimit{Unit: "minute", RequestsPerUnit: n} }

// take decides a request of peer under the rules in force in e.
func take(t *testing.T, e *rules.Engine, method, path, peer string) {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = peer + ":4711"
	checks, err := e.Checks(rules.HTTPRequest(r), nil)
	require.NoError(t, err)
	_, err = core.TakeAll(context.Background(), checks, 1)
	require.NoError(t, err)
}

// TestTrackRules: ratekit.tracked_keys reports the keys of the limits of
// the rules in force, beside those given to WithMemoryStore, and stops
// reporting a limit that a reload removed; the counters keep its series,
// which OpenTelemetry cannot delete.
func TestTrackRules(t *testing.T) {
	h := newHarness(t)
	store, other := newMemoryStore(t), newMemoryStore(t)
	global := core.Limit{Name: "global", Rate: core.PerSecond(1000)}
	m, err := ratekitotel.New(h.mp, ratekitotel.WithMemoryStore(other, global))
	require.NoError(t, err)
	engine, err := rules.NewEngine(rules.WithStore(store), rules.WithLimiterOptions(core.WithObserver(m.Observe)))
	require.NoError(t, err)
	require.NoError(t, m.TrackRules(engine))
	require.ErrorContains(t, m.TrackRules(engine), "already followed")
	require.ErrorContains(t, m.TrackRules(nil), "engine is nil")

	// No rules yet.
	assert.Equal(t, map[string]int64{"global": 0}, gauge(t, h.collect(), "ratekit.tracked_keys"))

	require.NoError(t, engine.Load(twoRules))
	for range 3 {
		take(t, engine, "POST", "/login", "192.0.2.1")
	}
	take(t, engine, "GET", "/", "192.0.2.2")
	ms := h.collect()
	assert.Equal(t, map[string]int64{"global": 0, everyone: 2, login: 1}, gauge(t, ms, "ratekit.tracked_keys"))
	// The logins are decided by the login rule (2 of 2 against 100),
	// the third denied; the GET by the other rule alone.
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.requests", attrs("limit", login, "decision", "allowed")))
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.requests", attrs("limit", login, "decision", "denied")))
	assert.Equal(t, int64(1), sum(t, ms, "ratekit.requests", attrs("limit", everyone, "decision", "allowed")))
	assert.Equal(t, int64(4), total(t, ms, "ratekit.requests"))
	assert.Equal(t, int64(3), sum(t, ms, "ratekit.decisions", attrs("limit", everyone, "decision", "allowed")))

	// The login rule goes: the gauge no longer reports it, and keeps
	// reading the rule that stays.
	require.NoError(t, engine.Load(oneRule))
	take(t, engine, "GET", "/", "192.0.2.3")
	ms = h.collect()
	assert.Equal(t, map[string]int64{"global": 0, everyone: 3}, gauge(t, ms, "ratekit.tracked_keys"))
	// The counters cannot forget it: its series stay, unchanged.
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.requests", attrs("limit", login, "decision", "allowed")))
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.requests", attrs("limit", everyone, "decision", "allowed")))

	// The rule comes back, its keys with it (same identity, same store).
	require.NoError(t, engine.Load(twoRules))
	assert.Equal(t, map[string]int64{"global": 0, everyone: 3, login: 1}, gauge(t, h.collect(), "ratekit.tracked_keys"))
}

// TestTrackRulesSums: a rule's limit named as one of WithMemoryStore, or
// as one of another engine, is reported as one sum with it.
func TestTrackRulesSums(t *testing.T) {
	h := newHarness(t)
	store, other := newMemoryStore(t), newMemoryStore(t)
	m, err := ratekitotel.New(h.mp, ratekitotel.WithMemoryStore(other, core.Limit{Name: everyone, Rate: core.PerMinute(100)}))
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: everyone, Rate: core.PerMinute(100)}, core.WithStore(other))
	require.NoError(t, err)
	_, err = lim.Take(context.Background(), "client", 1)
	require.NoError(t, err)
	for _, s := range []*core.MemoryStore{store, newMemoryStore(t)} {
		engine, err := rules.NewEngine(rules.WithStore(s))
		require.NoError(t, err)
		require.NoError(t, engine.Load(twoRules))
		require.NoError(t, m.TrackRules(engine))
		take(t, engine, "GET", "/", "192.0.2.1")
		take(t, engine, "GET", "/", "192.0.2.2")
	}
	assert.Equal(t, map[string]int64{everyone: 1 + 2 + 2, login: 0}, gauge(t, h.collect(), "ratekit.tracked_keys"))
}

// TestTrackRulesOtherStore: the limits of an engine whose store does not
// count its keys are not reported; without memory stores, the gauge has
// nothing to report.
func TestTrackRulesOtherStore(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp, ratekitotel.WithStore("remote"))
	require.NoError(t, err)
	engine, err := rules.NewEngine(rules.WithStore(observetest.Remote{Store: newMemoryStore(t)}),
		rules.WithLimiterOptions(core.WithObserver(m.Observe)))
	require.NoError(t, err)
	require.NoError(t, engine.Load(twoRules))
	require.NoError(t, m.TrackRules(engine))
	take(t, engine, "POST", "/login", "192.0.2.1")

	ms := h.collect()
	assert.NotContains(t, ms, "ratekit.tracked_keys")
	assert.Equal(t, int64(1), total(t, ms, "ratekit.requests"))
	assert.Equal(t, int64(2), total(t, ms, "ratekit.decisions"))
	hist := ms["ratekit.store.duration"].Data.(metricdata.Histogram[float64])
	assert.Len(t, hist.DataPoints, 2, "one per rule")
}
