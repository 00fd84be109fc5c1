package ratekitotel_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitotel "github.com/ratekit/ratekit/otel"
	"github.com/ratekit/ratekit/rules"
)

func Example() {
	// A meter provider whose metrics are collected by hand; a service uses
	// its exporter's reader instead.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	metrics, err := ratekitotel.New(provider)
	if err != nil {
		fmt.Println(err)
		return
	}
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Unix(0, 0)).Now}
	limiter, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(store),
		core.WithObserver(metrics.Observe),             // records the decisions
		core.WithActionObserver(metrics.ObserveAction)) // records Reset and Grant
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 30 {
		if _, err := limiter.Take(context.Background(), "client-42", 1); err != nil {
			fmt.Println(err)
		}
	}
	// An operator resets the client; the reason goes to the log, not to an attribute.
	if _, err := limiter.Reset(context.Background(), "client-42", "support ticket 1234"); err != nil {
		fmt.Println(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "ratekit.requests":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					decision, _ := dp.Attributes.Value("decision")
					if decision.AsString() == "allowed" {
						fmt.Println("allowed:", dp.Value)
					}
				}
			case "ratekit.actions":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					action, _ := dp.Attributes.Value("action")
					result, _ := dp.Attributes.Value("result")
					fmt.Printf("%s %s: %d\n", action.AsString(), result.AsString(), dp.Value)
				}
			}
		}
	}
	// Output:
	// allowed: 10
	// reset ok: 1
}

func ExampleMetrics_TrackRules() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	metrics, err := ratekitotel.New(provider)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The rules' limiters report to the metrics, and the metrics follow
	// the rules in force.
	engine, err := rules.NewEngine(rules.WithLimiterOptions(core.WithObserver(metrics.Observe)))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := metrics.TrackRules(engine); err != nil {
		fmt.Println(err)
		return
	}
	perMinute := func(n int) *rules.RateLimit { return &rules.RateLimit{Unit: "minute", RequestsPerUnit: n} }
	everyone := rules.Descriptor{Key: "remote_address", RateLimit: perMinute(100)}
	logins := rules.Descriptor{Key: "remote_address", RateLimit: perMinute(5),
		Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}}

	// trackedKeys prints the gauge ratekit.tracked_keys, by limit.
	trackedKeys := func() {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			fmt.Println(err)
			return
		}
		var lines []string
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "ratekit.tracked_keys" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					limit, _ := dp.Attributes.Value("limit")
					lines = append(lines, fmt.Sprintf("  %s: %d", limit.AsString(), dp.Value))
				}
			}
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	}

	if err := engine.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{everyone, logins}}); err != nil {
		fmt.Println(err)
		return
	}
	r := httptest.NewRequest("POST", "/login", nil) // from 192.0.2.1
	checks, err := engine.Checks(rules.HTTPRequest(r), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := core.TakeAll(context.Background(), checks, 1); err != nil {
		fmt.Println(err)
	}
	fmt.Println("two rules:")
	trackedKeys()

	// A reload drops the login rule: the gauge no longer reports it.
	if err := engine.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{everyone}}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("one rule:")
	trackedKeys()
	// Output:
	// two rules:
	//   api/remote_address: 1
	//   api/remote_address@POST/login: 1
	// one rule:
	//   api/remote_address: 1
}
