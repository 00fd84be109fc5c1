package readme

import (
	"context"
	"errors"
	"testing"

	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesredis"
)

// TestRulesRedisSnippet runs the README's Redis rules snippet on a private
// Redis: it refuses to start while the key is missing, and serves with the
// published rules once they are there.
func TestRulesRedisSnippet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	engine, err := rules.NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	served := false
	serve := func() error {
		served = true
		if d := engine.Config().Domain; d != "api" {
			t.Errorf("serving with the rules of domain %q, want api", d)
		}
		return nil
	}
	if err := rulesRedisServer(engine, rdb, serve); !errors.Is(err, rulesredis.ErrNotFound) || served {
		t.Errorf("without the key: error %v (served: %t), want ErrNotFound", err, served)
	}
	doc := "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	if err := rulesredis.Publish(context.Background(), rdb, "ratekit:rules:api", []byte(doc), engine.Load); err != nil {
		t.Fatal(err)
	}
	if err := rulesRedisServer(engine, rdb, serve); err != nil || !served {
		t.Errorf("with the key: error %v (served: %t)", err, served)
	}
}
