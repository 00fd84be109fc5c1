package rlscases_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/benchmarks/rlscases"
)

// The cases are data: each step is a request sent once per expected
// answer.
func ExampleCases() {
	for _, c := range rlscases.Cases()[:4] {
		s := c.Steps[0]
		fmt.Printf("%s: domain %q, %d descriptor(s), %d call(s), listed %v\n",
			c.Name, s.Request.Domain, len(s.Request.Descriptors), len(s.Want), c.Listed())
	}
	// Output:
	// unknown-domain-foo: domain "foo", 1 descriptor(s), 1 call(s), listed false
	// basic-key1-per-second: domain "basic", 1 descriptor(s), 1 call(s), listed false
	// another-key2-25-of-20: domain "another", 1 descriptor(s), 25 call(s), listed false
	// another-key2-key3-15: domain "another", 2 descriptor(s), 15 call(s), listed true
}

// Run plays the cases on any server of the rate limit service that reads
// the configuration WriteConfig writes; here one listening on
// 127.0.0.1:8081 with its configuration in /srv/ratelimit/config.
func ExampleRun() {
	if err := rlscases.WriteConfig("/srv/ratelimit/config"); err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:8081", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	diffs := rlscases.Run(ctx, conn, rlscases.Cases())
	diffs = append(diffs, rlscases.RunReload(ctx, conn, "/srv/ratelimit/config", 15*time.Second)...)
	for _, d := range diffs {
		fmt.Println(d)
	}
}
