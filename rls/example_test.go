package rls_test

import (
	"context"
	"fmt"
	"log"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// A service of one domain, from an Envoy rate-limit config, asked as
// Envoy's filter asks it (here directly, without a network).
func Example() {
	cfg, err := rulesfile.Parse("config.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		log.Fatal(err)
	}
	e, err := rules.NewEngine(rules.WithAnyKey())
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Load(cfg); err != nil {
		log.Fatal(err)
	}
	svc, err := rls.New([]*rules.Engine{e})
	if err != nil {
		log.Fatal(err)
	}
	svc.Register(grpc.NewServer()) // then Serve a listener

	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
}
