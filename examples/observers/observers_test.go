// Package observers_test attaches the Prometheus and the OpenTelemetry
// observers to one limiter: core.WithObserver adds an observer, and every
// observer sees every decision.
package observers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitotel "github.com/ratekit/ratekit/otel"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
)

// remote hides the memory store from the limiter, which then times its
// decisions as those of a store across the network.
type remote struct{ core.Store }

func (r remote) Bind(ls []core.Limit) (core.Counter, error) {
	c, err := r.Store.Bind(ls)
	return struct{ core.Counter }{c}, err
}

// TestPrometheusAndOpenTelemetry: both observers on one limiter, with two
// limits, in shadow, soft and elastic modes too, on a memory store and on a timed
// one, under concurrent traffic: both count every decision, alike, and
// as the limits decided.
func TestPrometheusAndOpenTelemetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []core.Option
		// requests: "limit decision" → requests, each under the limit
		// whose decision was the request's (the per-second one, the more
		// restrictive); decisions: → each limit's decisions.
		requests, decisions map[string]int64
		remote              bool
	}{
		{"enforcing", nil,
			map[string]int64{"second allowed": 8, "second denied": 40},
			map[string]int64{"second allowed": 8, "minute allowed": 8, "second denied": 40}, false},
		{"enforcing-timed", nil,
			map[string]int64{"second allowed": 8, "second denied": 40},
			map[string]int64{"second allowed": 8, "minute allowed": 8, "second denied": 40}, true},
		// In shadow mode every request passes: the per-second limit
		// would reject 20 per key, which the per-minute limit admits
		// (without counting them: its limits decide a request all or
		// nothing).
		{"shadow", []core.Option{core.WithShadow()},
			map[string]int64{"second allowed": 8, "second shadow_denied": 40},
			map[string]int64{"second allowed": 8, "second shadow_denied": 40, "minute allowed": 48}, false},
		// 50% more: 6 per key pass the per-second limit, 2 of them soft.
		{"soft", []core.Option{core.WithSoftPercent(50)},
			map[string]int64{"second allowed": 8, "second soft_allowed": 4, "second denied": 36},
			map[string]int64{"second allowed": 8, "second soft_allowed": 4, "minute allowed": 12, "second denied": 36}, false},
		// Elastic, 50% while there is room (always, here): the bucket's
		// burst of 4 stretches to 6, the last 2 per key elastic.
		{"elastic", []core.Option{core.WithElastic(50, func() bool { return true })},
			map[string]int64{"second allowed": 8, "second elastic_allowed": 4, "second denied": 36},
			map[string]int64{"second allowed": 8, "second elastic_allowed": 4, "minute allowed": 12, "second denied": 36}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prom, err := ratekitprom.New()
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(prom)
			reader := sdkmetric.NewManualReader()
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer provider.Shutdown(context.Background())
			otel, err := ratekitotel.New(provider)
			if err != nil {
				t.Fatal(err)
			}

			var store core.Store = &core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch).Now}
			if tc.remote {
				store = remote{store}
			}
			opts := append([]core.Option{core.WithStore(store),
				core.WithLimit(core.Limit{Name: "minute", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(10)}),
				core.WithObserver(prom.Observe), core.WithObserver(otel.Observe)}, tc.opts...)
			lim, err := core.NewLimiter(core.Limit{Name: "second", Algorithm: core.TokenBucket, Rate: core.PerSecond(4)}, opts...)
			if err != nil {
				t.Fatal(err)
			}

			// Two keys, 24 requests each, from 16 goroutines at once.
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 3 {
						if _, err := lim.Take(context.Background(), fmt.Sprint("client-", g%2), 1); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			close(start)
			wg.Wait()

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			fromOTel := map[string]map[string]int64{"ratekit.requests": {}, "ratekit.decisions": {}}
			var timed uint64
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch m.Name {
					case "ratekit.requests", "ratekit.decisions":
						for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
							limit, _ := dp.Attributes.Value(attribute.Key("limit"))
							decision, _ := dp.Attributes.Value(attribute.Key("decision"))
							fromOTel[m.Name][limit.AsString()+" "+decision.AsString()] += dp.Value
						}
					case "ratekit.store.duration":
						for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
							timed += dp.Count
						}
					}
				}
			}
			if !equal(fromOTel["ratekit.requests"], tc.requests) {
				t.Errorf("OpenTelemetry counted requests %v, want %v", fromOTel["ratekit.requests"], tc.requests)
			}
			if !equal(fromOTel["ratekit.decisions"], tc.decisions) {
				t.Errorf("OpenTelemetry counted decisions %v, want %v", fromOTel["ratekit.decisions"], tc.decisions)
			}

			var b strings.Builder
			var total int64
			for _, c := range []struct {
				name, help string
				want       map[string]int64
			}{
				{"ratekit_requests_total", "Requests decided, once each, by the limit whose decision was the request's and that decision (allowed, denied, shadow_denied, soft_allowed, elastic_allowed, error_allowed, error_denied).", tc.requests},
				{"ratekit_decisions_total", "Decisions of each limit, one per limit that decided a request, by limit and decision.", tc.decisions},
			} {
				fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
				for _, limit := range []string{"minute", "second"} {
					for _, decision := range []string{"allowed", "denied", "elastic_allowed", "error_allowed", "error_denied", "shadow_denied", "soft_allowed"} {
						n := c.want[limit+" "+decision]
						if c.name == "ratekit_decisions_total" {
							total += n
						}
						fmt.Fprintf(&b, "%s{decision=%q,limit=%q} %d\n", c.name, decision, limit, n)
					}
				}
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), "ratekit_requests_total", "ratekit_decisions_total"); err != nil {
				t.Errorf("Prometheus: %v", err)
			}

			// Both time the same events: every decision, on either store.
			promTimed := uint64(0)
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() == "ratekit_store_duration_seconds" {
					for _, m := range f.GetMetric() {
						promTimed += m.GetHistogram().GetSampleCount()
					}
				}
			}
			wantTimed := uint64(total)
			if timed != wantTimed || promTimed != wantTimed {
				t.Errorf("timed events: OpenTelemetry %d, Prometheus %d, want %d", timed, promTimed, wantTimed)
			}
		})
	}
}

func equal(a, b map[string]int64) bool {
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
