package rulesredis_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesredis"
	"github.com/redis/go-redis/v9"
)

// Every server loads the rules from Redis and follows their changes.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	engine, err := rules.NewEngine()
	if err != nil {
		log.Fatal(err)
	}
	w, err := rulesredis.Watch(engine, rdb, "ratekit:rules:api")
	if err != nil {
		log.Fatal(err) // the key is missing or invalid, or Redis is down
	}
	defer w.Close()
	// ... serve requests with engine (stdhttp.Rules(engine), ...); each
	// version published applies within milliseconds.
}

// Publish checks a document before any server sees it: here a scratch
// engine, made with the descriptor keys the servers register, refuses a
// key they do not know, and nothing is stored. (It refuses before
// contacting Redis, so this example runs without one.)
func ExamplePublish() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379"})
	defer rdb.Close()
	none := func(rules.Request) (string, error) { return "", nil }
	scratch, err := rules.NewEngine(rules.WithKey("plan", none))
	if err != nil {
		log.Fatal(err)
	}
	err = rulesredis.Publish(context.Background(), rdb, "ratekit:rules:api", []byte(`domain: api
descriptors:
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tier
    rate_limit: {unit: minute, requests_per_unit: 1000}
`), scratch.Load)
	var re *rules.Error
	if errors.As(err, &re) {
		fmt.Printf("refused: %s line %d %s\n", re.Source, re.Line, re.Path)
	}
	// Output:
	// refused: redis:ratekit:rules:api line 6 descriptors[1].key
}
