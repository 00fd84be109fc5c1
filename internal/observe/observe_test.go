package observe_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/observe"
	"github.com/ratekit/ratekit/internal/observe/observetest"
	"github.com/ratekit/ratekit/rules"
)

func TestClassify(t *testing.T) {
	c := observe.NewConfig("test")
	allowed := func(remaining int) core.Event {
		return core.Event{Outcome: core.Allowed, Decision: core.Decision{Allowed: true, Quota: 10, Remaining: remaining}}
	}
	for name, tc := range map[string]struct {
		e    core.Event
		want observe.Count
	}{
		"allowed, far":        {allowed(2), observe.Count{}},
		"allowed, near":       {allowed(1), observe.Count{Near: true}},
		"allowed, no quota":   {core.Event{Outcome: core.Allowed}, observe.Count{}},
		"decisive":            {core.Event{Outcome: core.Denied, Decisive: true}, observe.Count{Request: true}},
		"denied, none left":   {core.Event{Outcome: core.Denied, Decision: core.Decision{Quota: 10}}, observe.Count{}},
		"soft, none left":     {core.Event{Outcome: core.SoftAllowed, Decision: core.Decision{Allowed: true, Quota: 10}}, observe.Count{}},
		"store failed, open":  {core.Event{Outcome: core.ErrorAllowed, Decisive: true}, observe.Count{Request: true, StoreError: true}},
		"store failed, close": {core.Event{Outcome: core.ErrorDenied}, observe.Count{StoreError: true}},
		"a later outcome":     {core.Event{Outcome: core.Outcome(200)}, observe.Count{}},
		"missing key":         {core.Event{Outcome: core.MissingKey}, observe.Count{MissingKey: true}},
		"missing key, marked": {core.Event{Outcome: core.MissingKey, Decisive: true}, observe.Count{MissingKey: true}},
	} {
		assert.Equal(t, tc.want, c.Classify(&tc.e), name)
	}
	require.NoError(t, c.SetNearLimit(0.5))
	assert.True(t, c.Classify(ptr(allowed(4))).Near)
	assert.False(t, c.Classify(ptr(allowed(5))).Near)
}

// TestOutcomes: every outcome core names has its series from a limit's
// first event, and the help of the requests names them all; but
// MissingKey, a request no limit decided, which has its own metric.
func TestOutcomes(t *testing.T) {
	assert.NotContains(t, observe.Outcomes, core.MissingKey)
	assert.Equal(t, "missing_key", core.MissingKey.String())
	for o := range core.Outcome(math.MaxUint8) {
		if strings.HasPrefix(o.String(), "outcome_") || o == core.MissingKey {
			continue
		}
		assert.Contains(t, observe.Outcomes, o, o.String())
		assert.Contains(t, observe.Requests.Help, o.String())
	}
}

func TestActionOf(t *testing.T) {
	errDown := errors.New("down")
	for _, tc := range []struct {
		a    core.Action
		want observe.Action
	}{
		{core.Action{Kind: core.ActionReset, Found: true}, observe.Action{Kind: core.ActionReset, Result: "ok"}},
		{core.Action{Kind: core.ActionReset}, observe.Action{Kind: core.ActionReset, Result: "not_found"}},
		{core.Action{Kind: core.ActionReset, Err: errDown}, observe.Action{Kind: core.ActionReset, Result: "error"}},
		{core.Action{Kind: core.ActionGrant}, observe.Action{Kind: core.ActionGrant, Result: "ok"}},
		{core.Action{Kind: core.ActionGrant, Err: errDown}, observe.Action{Kind: core.ActionGrant, Result: "error"}},
		{core.Action{Kind: "freeze", Reason: "ticket 1"}, observe.Action{Kind: "freeze", Result: "ok"}},
	} {
		got := observe.ActionOf(tc.a)
		assert.Equal(t, tc.want, got, "%+v", tc.a)
		if tc.a.Kind == core.ActionReset || tc.a.Kind == core.ActionGrant {
			assert.Contains(t, observe.Actions, got)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// options is an exporter's options, as ratekitprom's and ratekitotel's.
type options func(*observe.Config) error

func TestConfigErrors(t *testing.T) {
	store := &core.MemoryStore{}
	for _, tc := range []struct {
		name string
		opt  options
		want string
	}{
		{"nil option", nil, "test: nil option"},
		{"empty store", func(c *observe.Config) error { return c.SetStore("") }, "test: WithStore: the store name is empty"},
		{"store not UTF-8", func(c *observe.Config) error { return c.SetStore("\xff") }, "not valid UTF-8"},
		{"store too long", func(c *observe.Config) error { return c.SetStore(strings.Repeat("s", 65)) }, "longer than 64 bytes"},
		{"near zero", func(c *observe.Config) error { return c.SetNearLimit(0) }, "test: WithNearLimit: fraction 0 must be in (0, 1]"},
		{"near NaN", func(c *observe.Config) error { return c.SetNearLimit(math.NaN()) }, "must be in (0, 1]"},
		{"near above one", func(c *observe.Config) error { return c.SetNearLimit(1.01) }, "must be in (0, 1]"},
		{"no buckets", func(c *observe.Config) error { return c.SetBuckets(nil) }, "test: WithBuckets: no buckets"},
		{"bucket infinite", func(c *observe.Config) error { return c.SetBuckets([]float64{1, math.Inf(1)}) }, "positive and finite"},
		{"buckets repeated", func(c *observe.Config) error { return c.SetBuckets([]float64{1, 1}) }, "must increase"},
		{"nil memory store", func(c *observe.Config) error { return c.AddMemoryStore(nil, []core.Limit{{Rate: core.PerSecond(1)}}) }, "test: WithMemoryStore: the store is nil"},
		{"no limits", func(c *observe.Config) error { return c.AddMemoryStore(store, nil) }, "no limits"},
		{"invalid limit", func(c *observe.Config) error { return c.AddMemoryStore(store, []core.Limit{{Name: "x"}}) }, "invalid limit"},
	} {
		c := observe.NewConfig("test")
		err := observe.Apply(c, c, []options{tc.opt})
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}

	c := observe.NewConfig("test")
	require.NoError(t, observe.Apply(c, c, []options{
		func(c *observe.Config) error { return c.SetStore(strings.Repeat("s", 64)) },
		func(c *observe.Config) error { return c.SetNearLimit(1) },
		func(c *observe.Config) error { return c.SetBuckets([]float64{0.1, 1}) },
	}))
	assert.Equal(t, []float64{0.1, 1}, c.Buckets)
	assert.Equal(t, "Requests admitted with less than 100% of the limit remaining.", c.Help(observe.NearLimit))
	assert.Equal(t, observe.StoreErrors.Help, c.Help(observe.StoreErrors))
	assert.Equal(t, "memory", observe.NewConfig("test").Store)
}

// take decides n requests of distinct keys on a limiter of l on s.
func take(t *testing.T, s core.Store, l core.Limit, prefix string, n int) {
	t.Helper()
	lim, err := core.NewLimiter(l, core.WithStore(s))
	require.NoError(t, err)
	for i := range n {
		_, err := lim.Take(context.Background(), fmt.Sprint(prefix, i), 1)
		require.NoError(t, err)
	}
}

// TestTrackedKeys: the keys of the memory stores' limits, and those of
// the rules in force of followed engines whose store counts its keys, are
// summed per limit name; the rules' limits in force are named, whatever
// their store.
func TestTrackedKeys(t *testing.T) {
	s1, s2, ruled := &core.MemoryStore{}, &core.MemoryStore{}, &core.MemoryStore{}
	everyone := core.Limit{Name: "api/remote_address", Rate: core.PerMinute(100)}
	unnamed := core.Limit{Rate: core.PerMinute(100)}
	idle := core.Limit{Name: "idle", Rate: core.PerMinute(1)}
	c := observe.NewConfig("test")
	require.NoError(t, c.AddMemoryStore(s1, []core.Limit{everyone, unnamed}))
	require.NoError(t, c.AddMemoryStore(s2, []core.Limit{everyone, idle}))
	take(t, s1, everyone, "a-", 2)
	take(t, s1, unnamed, "b-", 3)
	take(t, s2, everyone, "c-", 4)

	counts, inForce := c.TrackedKeys()
	assert.Equal(t, []observe.KeyCount{{"api/remote_address", 6}, {"100-per-1m0s", 3}, {"idle", 0}}, counts)
	assert.Nil(t, inForce, "no engine followed")

	config := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 100}},
		{Key: "remote_address", Match: &rules.Match{Path: "/login"}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}}
	engine, err := rules.NewEngine(rules.WithStore(ruled))
	require.NoError(t, err)
	require.NoError(t, engine.Load(config))
	remote, err := rules.NewEngine(rules.WithStore(observetest.Remote{Store: &core.MemoryStore{}}))
	require.NoError(t, err)
	require.NoError(t, remote.Load(rules.Config{Domain: "other", Descriptors: config.Descriptors[:1]}))
	require.NoError(t, c.Follow(engine))
	require.NoError(t, c.Follow(remote))
	require.ErrorContains(t, c.Follow(engine), "test: TrackRules: the engine is already followed")
	require.ErrorContains(t, c.Follow(nil), "test: TrackRules: the engine is nil")
	for _, path := range []string{"/", "/login"} {
		r := httptest.NewRequest("GET", path, nil)
		checks, err := engine.Checks(rules.HTTPRequest(r), nil)
		require.NoError(t, err)
		_, err = core.TakeAll(context.Background(), checks, 1)
		require.NoError(t, err)
	}

	counts, inForce = c.TrackedKeys()
	assert.Equal(t, []observe.KeyCount{{"api/remote_address", 6 + 1}, {"100-per-1m0s", 3}, {"idle", 0}, {"api/remote_address@/login", 1}}, counts)
	assert.Equal(t, map[string]bool{"api/remote_address": true, "api/remote_address@/login": true, "other/remote_address": true}, inForce)
}

func TestLimits(t *testing.T) {
	var built atomic.Int32
	limits := observe.NewLimits(func(name string) *string {
		built.Add(1)
		return &name
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				name := fmt.Sprint("limit-", (g+i)%10)
				assert.Equal(t, name, *limits.Get(name))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(10), built.Load(), "each limit built once")

	a := limits.Get("limit-1")
	removed := 0
	limits.Delete("limit-1", func() { removed++ })
	limits.Delete("limit-1", func() { removed++ })
	limits.Delete("never-seen", func() { removed++ })
	assert.Equal(t, 1, removed, "only a limit with series is removed")
	assert.NotSame(t, a, limits.Get("limit-1"), "built afresh")
	assert.Equal(t, int32(11), built.Load())

	assert.Zero(t, testing.AllocsPerRun(100, func() { limits.Get("limit-2") }))
}

func TestByOutcome(t *testing.T) {
	var built []core.Outcome
	b := observe.NewByOutcome(func(o core.Outcome) *string {
		built = append(built, o)
		s := o.String()
		return &s
	})
	assert.Equal(t, observe.Outcomes, built, "the known outcomes, at once")
	assert.Equal(t, "denied", *b.Get(core.Denied))
	assert.Equal(t, "outcome_200", *b.Get(core.Outcome(200)))
	assert.Same(t, b.Get(core.Outcome(200)), b.Get(core.Outcome(200)), "a later outcome, built once")
	assert.Len(t, built, len(observe.Outcomes)+1)
	assert.Zero(t, testing.AllocsPerRun(100, func() { b.Get(core.ErrorDenied) }))

	// Later outcomes, first seen by several goroutines at once: each is
	// built once, and all get its one value.
	var n atomic.Int32
	c := observe.NewByOutcome(func(o core.Outcome) *core.Outcome { n.Add(1); return &o })
	got := make([][]*core.Outcome, 8)
	var wg sync.WaitGroup
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range core.Outcome(50) {
				got[g] = append(got[g], c.Get(o+100))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(len(observe.Outcomes)+50), n.Load())
	for g := range got {
		assert.Equal(t, got[0], got[g])
	}
}

func TestByAction(t *testing.T) {
	b := observe.NewByAction(func(a observe.Action) string { return string(a.Kind) + " " + a.Result })
	assert.Equal(t, "reset not_found", b.Get(observe.Action{Kind: core.ActionReset, Result: "not_found"}))
	assert.Equal(t, "freeze ok", b.Get(observe.Action{Kind: "freeze", Result: "ok"}), "a later action")
	assert.Zero(t, testing.AllocsPerRun(100, func() { b.Get(observe.Action{Kind: core.ActionGrant, Result: "ok"}) }))
}

// TestMetrics: the metrics' labels are the label constants, and no two
// metrics share a name.
func TestMetrics(t *testing.T) {
	labels := map[string]bool{observe.LabelLimit: true, observe.LabelDecision: true, observe.LabelStore: true,
		observe.LabelAction: true, observe.LabelResult: true}
	names := map[string]bool{}
	for _, m := range []observe.Metric{observe.Requests, observe.Decisions, observe.NearLimit, observe.OperatorActions,
		observe.StoreDuration, observe.StoreErrors, observe.TrackedKeys, observe.MissingKeys, observe.OutOfMemory} {
		assert.False(t, names[m.Prometheus] || names[m.OTel], m.Prometheus)
		names[m.Prometheus], names[m.OTel] = true, true
		assert.True(t, strings.HasPrefix(m.Prometheus, "ratekit_") && strings.HasPrefix(m.OTel, "ratekit."), m.Prometheus)
		assert.NotEmpty(t, m.Help, m.Prometheus)
		for _, l := range m.Labels {
			assert.True(t, labels[l], "%s: label %q", m.Prometheus, l)
		}
	}
}
