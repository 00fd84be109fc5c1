package rules_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
)

// TestTwoKeysAllOrNothing: a request that matches a per-IP rule and a
// per-API-key rule must pass both. 64 of them at once, from one IP with
// one key: exactly as many pass as the smaller limit admits, and the
// rejected ones leave no count in the other rule, whichever rule rejects
// them (the per-IP rule is asked first: when it rejects, the key's rule
// has counted nothing; when the key's rule rejects, the IP's count is
// refunded). Follow-up requests that only the other rule sees, each from
// a fresh IP or with a fresh key, show what it counted. On the memory
// store, and on a memory store behind latency.
func TestTwoKeysAllOrNothing(t *testing.T) {
	const goroutines, small, large = 64, 3, 20
	algorithms := []string{"fixed-window", "sliding-window-log", "sliding-window-counter", "token-bucket", "leaky-bucket"}
	for _, store := range []string{"memory", "slow"} {
		for _, alg := range algorithms {
			for _, rejecter := range []string{"ip", "key"} {
				t.Run(store+"/"+alg+"/"+rejecter+"-rejects", func(t *testing.T) {
					t.Parallel()
					clock := storetest.NewClock(storetest.Epoch)
					var s core.Store = &core.MemoryStore{Clock: clock.Now}
					if store == "slow" {
						s = storetest.Slow(&core.MemoryStore{Clock: clock.Now}, 100*time.Microsecond)
					}
					e, err := rules.NewEngine(rules.WithStore(s))
					if err != nil {
						t.Fatal(err)
					}
					ipLimit, keyLimit := small, large
					if rejecter == "key" {
						ipLimit, keyLimit = large, small
					}
					err = e.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
						{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: ipLimit, Algorithm: alg}},
						{Key: "header:X-API-Key", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: keyLimit, Algorithm: alg}},
					}})
					if err != nil {
						t.Fatal(err)
					}

					// decide decides one request as middleware does.
					decide := func(ip, key string) (core.Decision, error) {
						var buf [8]core.Check
						checks, err := e.Checks(rules.HTTPRequest(req("GET /", ip, "X-API-Key: "+key)), buf[:0])
						if err != nil {
							return core.Decision{}, err
						}
						if len(checks) != 2 {
							t.Errorf("%d checks, want 2", len(checks))
						}
						return core.TakeAll(context.Background(), checks, 1)
					}

					start := make(chan struct{})
					var wg sync.WaitGroup
					var mu sync.Mutex
					admitted := 0
					for range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							d, err := decide("192.0.2.1", "k1")
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								mu.Lock()
								admitted++
								mu.Unlock()
							} else if d.RetryAfter <= 0 {
								t.Errorf("a rejection without RetryAfter: %+v", d)
							}
						}()
					}
					close(start)
					wg.Wait()
					if admitted != small {
						t.Fatalf("%d of %d requests at once admitted, want %d", admitted, goroutines, small)
					}

					// The other rule counted the admitted requests only:
					// large - small more pass it, from requests that the
					// rejecting rule sees each under a fresh key.
					passed := 0
					for i := range 2 * large {
						ip, key := "192.0.2.1", "fresh-"+strconv.Itoa(i) // the IP's rule is the other one
						if rejecter == "ip" {
							ip, key = "198.51.100."+strconv.Itoa(i+1), "k1" // the key's rule is
						}
						d, err := decide(ip, key)
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							passed++
						}
					}
					if passed != large-small {
						t.Fatalf("the other rule admitted %d more, want %d: it kept a count of rejected requests", passed, large-small)
					}
					// And the rejecting rule still rejects its key.
					if d, err := decide("192.0.2.1", "k1"); err != nil || d.Allowed {
						t.Fatalf("after the follow-up: %+v, %v; want a rejection", d, err)
					}
				})
			}
		}
	}
}
