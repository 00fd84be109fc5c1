package rls_test

import (
	"context"
	"strconv"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// BenchmarkShouldRateLimit is one decision of one descriptor in memory,
// without the network: the service's own cost, over 10,000 keys.
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := rulesfile.Parse("bench.yaml", []byte(`
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := rules.NewEngine(rules.WithAnyKey(), rules.WithStore(&core.MemoryStore{}))
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Load(cfg); err != nil {
		b.Fatal(err)
	}
	svc, err := rls.New([]*rules.Engine{e})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlspb.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = req("bench", 1, []string{"client", strconv.Itoa(i)})
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
