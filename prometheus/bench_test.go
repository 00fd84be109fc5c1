package ratekitprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
)

// BenchmarkDecision measures a memory-store token-bucket decision that is
// always admitted: without an observer, with one that does nothing, and
// with the Prometheus metrics attached. The no-op case shows core's own
// cost of observing (building and passing the events); the rest is
// Observe's.
func BenchmarkDecision(b *testing.B) {
	// A billion per second, in bursts of as many: a token per nanosecond
	// refills faster than any decision spends it, so it is never exhausted.
	limit := core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1_000_000_000, Period: time.Second}}
	run := func(b *testing.B, opts ...core.Option) {
		lim, err := core.NewLimiter(limit, opts...)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			d, err := lim.Take(ctx, "client-42", 1)
			if err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	}
	b.Run("no-observer", func(b *testing.B) { run(b) })
	// A do-nothing observer isolates what core spends on observing.
	b.Run("noop-observer", func(b *testing.B) { run(b, core.WithObserver(func(core.Event) {})) })
	b.Run("prometheus", func(b *testing.B) {
		m, err := ratekitprom.New()
		if err != nil {
			b.Fatal(err)
		}
		run(b, core.WithObserver(m.Observe))
	})
}

// BenchmarkObserve measures Observe alone, for an admitted decision of a
// limit already seen.
func BenchmarkObserve(b *testing.B) {
	m, err := ratekitprom.New()
	if err != nil {
		b.Fatal(err)
	}
	e := core.Event{
		Limit:    "api",
		Outcome:  core.Allowed,
		Decision: core.Decision{Allowed: true, Quota: 100, Remaining: 50},
		Latency:  100 * time.Nanosecond,
	}
	m.Observe(e)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m.Observe(e)
	}
}
