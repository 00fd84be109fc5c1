package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rulesredis"
)

// TestRulesRedis runs the demo with -config redis://.../KEY: the rules of
// the document under KEY decide GET /; a version published applies while
// it runs, keeping the counts; an invalid version, set and announced by
// hand (bypassing Publish's checks), is logged and changes nothing.
func TestRulesRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const key = "demo-test:rules"
	require.NoError(t, rulesredis.Publish(ctx, rdb, key, []byte(demotest.RulesV1), nil))
	d := start(t, "-config", "redis://"+srv.Addr()+"/0/"+key, "-trusted-proxies", "127.0.0.1/32")
	client := func(ip string) []string { return []string{"X-Forwarded-For", ip} }

	for i := 1; i <= 3; i++ {
		r := d.Get("/", client("192.0.2.1")...)
		require.Equal(t, 200, r.Status, "request %d", i)
		assert.Equal(t, "3", r.Header.Get("X-RateLimit-Limit"))
	}
	p := demotest.RequireProblem(t, d.Get("/", client("192.0.2.1")...), 429)
	assert.Equal(t, "demo-test/remote_address", p.Limit)

	// Raise the limit to 5: the 3 requests counted stay counted.
	require.NoError(t, rulesredis.Publish(ctx, rdb, key, []byte(strings.Replace(demotest.RulesV1, "requests_per_unit: 3", "requests_per_unit: 5", 1)), nil))
	demotest.WaitFor(t, func(n int) bool { // each probe is another client
		return d.Get("/", client("198.51.100."+strconv.Itoa(n))...).Header.Get("X-RateLimit-Limit") == "5"
	})
	// The new rules answer as soon as they are swapped in; the log line
	// follows.
	demotest.WaitFor(t, func(int) bool {
		return strings.Contains(d.Stderr(), `msg="ratekit: rules reloaded" key=`+key+" domain=demo-test")
	})
	r := d.Get("/", client("192.0.2.1")...)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "1", r.Header.Get("X-RateLimit-Remaining"), "3 of 5 used before the reload; this is the 4th")

	// An invalid version, set and announced by hand: logged with its line,
	// and the rules stay.
	require.NoError(t, rdb.Set(ctx, key, strings.Replace(demotest.RulesV1, "unit: minute", "unit: fortnight", 1), 0).Err())
	require.NoError(t, rdb.Publish(ctx, rulesredis.Channel(key), "by hand").Err())
	demotest.WaitFor(t, func(int) bool {
		return strings.Contains(d.Stderr(), "rules reload rejected; previous rules kept")
	})
	assert.Contains(t, d.Stderr(), `key=`+key+` error="redis:`+key+`:4: descriptors[0].rate_limit: unit \"fortnight\"`)
	r = d.Get("/", client("192.0.2.1")...)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "5", r.Header.Get("X-RateLimit-Limit"))
	demotest.RequireProblem(t, d.Get("/", client("192.0.2.1")...), 429)
}

// TestRulesRedisErrors: a key that is missing, or holds an invalid
// document, stops the demo. (The flag's own errors are tested in package
// demo.)
func TestRulesRedisErrors(t *testing.T) {
	srv := redistest.Start(t)
	var stderr strings.Builder
	err := run(t.Context(), []string{"-addr", "127.0.0.1:0", "-config", "redis://" + srv.Addr() + "/0/demo-test:none"}, &strings.Builder{}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `rulesredis: key not found: "demo-test:none" (publish the rules first`)
	assert.Equal(t, 1, cli.ExitCode("demo", err, &stderr))

	require.NoError(t, srv.Client(t).Set(context.Background(), "demo-test:bad", "domain: d\ndescriptors:\n  - key: remote_address\n    rate_limt: {}\n", 0).Err())
	err = run(t.Context(), []string{"-addr", "127.0.0.1:0", "-config", "redis://" + srv.Addr() + "/0/demo-test:bad"}, &strings.Builder{}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `redis:demo-test:bad:4: descriptors[0]: unknown key "rate_limt"`)
}
