package ratekitprom_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
)

func ExampleNew() {
	m, err := ratekitprom.New()
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry() // a server calls prometheus.MustRegister(m)
	reg.MustRegister(m)

	// A fixed clock makes the example exact; servers use the system clock.
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)).Now}
	lim, _ := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
		core.WithStore(store),
		core.WithObserver(m.Observe),
		core.WithActionObserver(m.ObserveAction), // counts Reset and Grant
	)
	for range 5 {
		lim.Take(context.Background(), "client-42", 1)
	}
	// An operator resets the client; the reason goes to the log, not to a label.
	lim.Reset(context.Background(), "client-42", "support ticket 1234")

	families, _ := reg.Gather()
	for _, f := range families {
		switch f.GetName() {
		case "ratekit_actions_total":
			for _, series := range f.GetMetric() {
				labels := series.GetLabel() // sorted by name: action, limit, result
				fmt.Printf("limit=%s action=%s result=%s %v\n", labels[1].GetValue(), labels[0].GetValue(), labels[2].GetValue(), series.GetCounter().GetValue())
			}
		case "ratekit_requests_total":
			for _, series := range f.GetMetric() {
				labels := series.GetLabel() // sorted by name: decision, limit
				fmt.Printf("limit=%s decision=%s %v\n", labels[1].GetValue(), labels[0].GetValue(), series.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// limit=api action=grant result=error 0
	// limit=api action=grant result=ok 0
	// limit=api action=reset result=error 0
	// limit=api action=reset result=not_found 0
	// limit=api action=reset result=ok 1
	// limit=api decision=allowed 3
	// limit=api decision=denied 2
	// limit=api decision=elastic_allowed 0
	// limit=api decision=error_allowed 0
	// limit=api decision=error_denied 0
	// limit=api decision=shadow_denied 0
	// limit=api decision=soft_allowed 0
}
