package rules_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// An engine with the rules of a config: API keys get 2 requests per
// minute each, and one premium key 100; requests without a key are not
// limited by these rules. (A sliding window log, rather than Envoy's
// default fixed window, keeps the output the same whenever it runs.)
func ExampleEngine() {
	e, err := rules.NewEngine()
	if err != nil {
		log.Fatal(err)
	}
	err = e.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "header:X-API-Key", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2, Algorithm: "sliding-window-log"}},
		{Key: "header:X-API-Key", Value: "premium-1", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 100}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	for _, key := range []string{"free-1", "free-1", "free-1", "premium-1", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		// Every rule that matches the request applies, with its own key:
		// the request is decided by all of them at once (middleware does
		// this for each request).
		var buf [8]core.Check
		checks, err := e.Checks(rules.HTTPRequest(r), buf[:0])
		if err != nil {
			log.Fatal(err)
		}
		d, err := core.TakeAll(context.Background(), checks, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q: allowed %v, quota %d, remaining %d\n", key, d.Allowed, d.Quota, d.Remaining)
	}
	// Output:
	// "free-1": allowed true, quota 2, remaining 1
	// "free-1": allowed true, quota 2, remaining 0
	// "free-1": allowed false, quota 2, remaining 0
	// "premium-1": allowed true, quota 100, remaining 99
	// "": allowed true, quota 0, remaining 0
}

// Reloading keeps the counts of the rules whose identity is unchanged: a
// client that used 3 of 5 has 3 left when the limit becomes 6. An invalid
// config is rejected with every problem, and the rules in force stay.
func ExampleEngine_Load() {
	e, err := rules.NewEngine()
	if err != nil {
		log.Fatal(err)
	}
	perIP := func(unit string, n int) rules.Config {
		return rules.Config{Source: "rules.yaml", Domain: "api", Descriptors: []rules.Descriptor{
			{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: unit, RequestsPerUnit: n, Algorithm: "sliding-window-log", Line: 4}},
		}}
	}
	r := rules.HTTPRequest(httptest.NewRequest("GET", "/", nil))
	decide := func() (core.Decision, error) {
		var buf [8]core.Check
		checks, err := e.Checks(r, buf[:0])
		if err != nil {
			return core.Decision{}, err
		}
		return core.TakeAll(context.Background(), checks, 1)
	}
	if err := e.Load(perIP("minute", 5)); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := decide(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(e.Load(perIP("fortnight", 6)))
	if err := e.Load(perIP("minute", 6)); err != nil {
		log.Fatal(err)
	}
	d, err := decide()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("quota %d, remaining %d\n", d.Quota, d.Remaining)
	// Output:
	// rules.yaml:4: descriptors[0].rate_limit: unit "fortnight" is not one of second, minute, hour, day, week, month or year
	// quota 6, remaining 2
}
