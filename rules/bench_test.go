package rules_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
)

// BenchmarkVerdict measures one decision by the engine for an admitted
// request, as middleware takes it (package adapter's Rules flow): matching
// the rules (Engine.Checks), deciding them together in the memory store
// (core.TakeAll), and the header fields (answer.Style.Fields). The limits
// are 4000 per minute, and the store's clock moves 15 ms per request, so
// that every request is admitted with header numbers below 4096, as with
// ordinary limits (larger numbers cost an allocation each).
func BenchmarkVerdict(b *testing.B) {
	big := rate("minute", 4000)
	for _, bc := range []struct {
		name string
		cfg  rules.Config
	}{
		{"no-match", rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: big},
		}}},
		{"one-rule-ip", rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "remote_address", RateLimit: big},
		}}},
		{"three-rules", rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Value: "all", RateLimit: big},
			{Key: "remote_address", Match: &rules.Match{Path: "/api/*"}, RateLimit: big},
			{Key: "header:X-API-Key", RateLimit: big},
			{Key: "header:X-API-Key", Value: "premium", RateLimit: big},
		}}},
		{"nested", rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "header:X-API-Key", Descriptors: []rules.Descriptor{
				{Key: "remote_address", RateLimit: big},
			}},
		}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clock := storetest.NewClock(storetest.Epoch)
			e, err := rules.NewEngine(rules.WithStore(&core.MemoryStore{Clock: clock.Now}))
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Load(bc.cfg); err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/api/items", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			r.Header.Set("X-API-Key", "k-123")
			req := rules.HTTPRequest(r)
			ctx := r.Context()
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(15 * time.Millisecond)
				var checks [8]core.Check
				var fields [8]answer.Field
				cs, err := e.Checks(req, checks[:0])
				if err != nil {
					b.Fatal(err)
				}
				if len(cs) == 0 {
					continue // no rule applies: passed on without fields
				}
				d, err := core.TakeAll(ctx, cs, 1)
				if err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				answer.XRateLimit.Fields(fields[:0], &d)
			}
		})
	}
}
