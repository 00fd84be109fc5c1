package rlsproc_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ratekit/ratekit/benchmarks/rlscases/rlsproc"
)

// Start a private Redis and the reference service on it, with the
// configuration in ReferenceConfigDir of a runtime root.
func ExampleStartReference() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rls")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	redis, err := rlsproc.StartRedis(ctx, dir+"/redis")
	if err != nil {
		log.Fatal(err)
	}
	defer redis.Stop()
	config := `domain: basic
descriptors:
  - key: key1
    rate_limit: {requests_per_unit: 50, unit: second}
`
	if err := os.MkdirAll(rlsproc.ReferenceConfigDir(dir), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(rlsproc.ReferenceConfigDir(dir)+"/basic.yaml", []byte(config), 0o644); err != nil {
		log.Fatal(err)
	}
	s, err := rlsproc.StartReference(ctx, rlsproc.ReferenceOptions{
		Bin:       "/usr/local/bin/service_cmd",
		Root:      dir,
		RedisAddr: redis.Addr,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Stop()
	fmt.Println("ShouldRateLimit on", s.GRPCAddr)
}
