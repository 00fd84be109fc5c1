package ratekitotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratekit/ratekit/core"
	ratekitotel "github.com/ratekit/ratekit/otel"
)

// BenchmarkDecision measures a decision on a memory-store token bucket that
// is never exhausted, without an observer, with an observer that does
// nothing, and with the OpenTelemetry observer on an SDK meter provider.
func BenchmarkDecision(b *testing.B) {
	limit := core.Limit{Name: "bench", Algorithm: core.TokenBucket, Rate: core.PerSecond(1_000_000_000), Burst: core.MaxCount}
	run := func(b *testing.B, opts ...core.Option) {
		store := &core.MemoryStore{}
		lim, err := core.NewLimiter(limit, append(opts, core.WithStore(store))...)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := lim.Take(ctx, "client", 1); err != nil { // first sight of the key and the limit
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			d, err := lim.Take(ctx, "client", 1)
			if err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	}
	b.Run("no-observer", func(b *testing.B) { run(b) })
	// What core spends on any observer: building and passing the events.
	b.Run("empty-observer", func(b *testing.B) { run(b, core.WithObserver(func(core.Event) {})) })
	b.Run("otel", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer mp.Shutdown(context.Background())
		m, err := ratekitotel.New(mp)
		if err != nil {
			b.Fatal(err)
		}
		run(b, core.WithObserver(m.Observe))
	})
}

// BenchmarkObserve measures Observe alone, for a decisive event, which
// touches the request and decision counters and the duration histogram.
func BenchmarkObserve(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	m, err := ratekitotel.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	e := core.Event{Limit: "bench", Outcome: core.Allowed,
		Decision: core.Decision{Allowed: true, Quota: 100, Remaining: 50}, Latency: 3 * time.Microsecond, Decisive: true}
	m.Observe(e)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m.Observe(e)
	}
}
