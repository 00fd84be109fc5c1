package ratekitotel_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitotel "github.com/ratekit/ratekit/otel"
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
