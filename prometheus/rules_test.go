package ratekitprom_test

import (
	"context"
	"net/http/httptest"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/rules"
)

// limitsWithSeries returns, by metric name, the limit labels of its
// series.
func limitsWithSeries(t *testing.T, g prometheus.Gatherer) map[string][]string {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := map[string][]string{}
	for _, mf := range mfs {
		seen := map[string]bool{}
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "limit" && !seen[l.GetValue()] {
					seen[l.GetValue()] = true
					out[mf.GetName()] = append(out[mf.GetName()], l.GetValue())
				}
			}
		}
		sort.Strings(out[mf.GetName()])
	}
	return out
}

// TrackRules: the rules' limits are labelled by their descriptor paths,
// ratekit_tracked_keys counts the keys of each, and the series of a rule
// that a reload removed are gone at the next scrape, while the others
// keep their counts.
func TestTrackRules(t *testing.T) {
	m, reg := newMetrics(t)
	store := newStore(t)
	engine, err := rules.NewEngine(rules.WithStore(store), rules.WithLimiterOptions(core.WithObserver(m.Observe)))
	require.NoError(t, err)
	require.NoError(t, m.TrackRules(engine))
	require.Error(t, m.TrackRules(engine), "twice")
	require.Error(t, m.TrackRules(nil))

	minute := func(n int) *rules.RateLimit { return &rules.RateLimit{Unit: "minute", RequestsPerUnit: n} }
	require.NoError(t, engine.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: minute(100)},
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: minute(2)},
	}}))
	take := func(method, path, peer string) {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = peer + ":4711"
		checks, err := engine.Checks(rules.HTTPRequest(r), nil)
		require.NoError(t, err)
		_, _ = core.TakeAll(context.Background(), checks, 1)
	}
	for range 3 {
		take("POST", "/login", "192.0.2.1")
	}
	take("GET", "/", "192.0.2.2")

	both := []string{"api/remote_address", "api/remote_address@POST/login"}
	got := limitsWithSeries(t, reg)
	for _, name := range []string{"ratekit_requests_total", "ratekit_decisions_total", "ratekit_tracked_keys", "ratekit_store_duration_seconds"} {
		assert.Equal(t, both, got[name], name)
	}
	assert.Equal(t, 2.0, gaugeValue(t, reg, "ratekit_tracked_keys", map[string]string{"limit": "api/remote_address"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "ratekit_tracked_keys", map[string]string{"limit": "api/remote_address@POST/login"}))
	// 4 requests: the third login denied by the login rule, the others
	// decided by it (2 of 2 is more restrictive than 100), but the GET.
	assert.Equal(t, 2.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "api/remote_address@POST/login", "decision": "allowed"}))
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "api/remote_address@POST/login", "decision": "denied"}))
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "api/remote_address", "decision": "allowed"}))

	// The login rule goes.
	require.NoError(t, engine.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: minute(100)},
	}}))
	got = limitsWithSeries(t, reg)
	for _, name := range []string{"ratekit_requests_total", "ratekit_decisions_total", "ratekit_near_limit_total",
		"ratekit_actions_total", "ratekit_tracked_keys", "ratekit_store_duration_seconds"} {
		for _, l := range got[name] {
			assert.NotEqual(t, "api/remote_address@POST/login", l, "%s keeps the removed rule's series", name)
		}
	}
	assert.Equal(t, []string{"api/remote_address"}, got["ratekit_requests_total"])
	assert.Equal(t, 1.0, counterValue(t, reg, "ratekit_requests_total", map[string]string{"limit": "api/remote_address", "decision": "allowed"}), "kept")

	// A request still in flight under the old rules brings a series back
	// for a moment; the next scrape removes it again.
	m.Observe(core.Event{Limit: "api/remote_address@POST/login", Outcome: core.Allowed, Decisive: true})
	assert.Equal(t, []string{"api/remote_address"}, limitsWithSeries(t, reg)["ratekit_requests_total"])

	// The rule comes back: its series start afresh and stay.
	require.NoError(t, engine.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: minute(100)},
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: minute(2)},
	}}))
	take("POST", "/login", "192.0.2.9")
	assert.Equal(t, both, limitsWithSeries(t, reg)["ratekit_requests_total"])
	assert.Equal(t, both, limitsWithSeries(t, reg)["ratekit_requests_total"], "a second scrape keeps them")
}

// TestTrackRulesSameNameAsMemoryStore: a rule's limit named as a limit of
// WithMemoryStore is one series of ratekit_tracked_keys, the sum of both,
// and the scrape does not fail on a duplicate series.
func TestTrackRulesSameNameAsMemoryStore(t *testing.T) {
	store, other := newStore(t), newStore(t)
	const name = "api/remote_address"
	limit := core.Limit{Name: name, Rate: core.PerMinute(100)}
	m, reg := newMetrics(t, ratekitprom.WithMemoryStore(other, limit))
	lim, err := core.NewLimiter(limit, core.WithStore(other))
	require.NoError(t, err)
	_, err = lim.Take(context.Background(), "client", 1)
	require.NoError(t, err)
	engine, err := rules.NewEngine(rules.WithStore(store))
	require.NoError(t, err)
	require.NoError(t, engine.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 100}},
	}}))
	require.NoError(t, m.TrackRules(engine))
	for _, peer := range []string{"192.0.2.1", "192.0.2.2"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer + ":4711"
		checks, err := engine.Checks(rules.HTTPRequest(r), nil)
		require.NoError(t, err)
		_, err = core.TakeAll(context.Background(), checks, 1)
		require.NoError(t, err)
	}
	assert.Equal(t, 3.0, gaugeValue(t, reg, "ratekit_tracked_keys", map[string]string{"limit": name}))
}
