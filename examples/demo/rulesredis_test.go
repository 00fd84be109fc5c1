package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, rulesredis.Publish(ctx, rdb, key, []byte(rulesV1), nil))
	d := start(t, "-config", "redis://"+srv.Addr()+"/0/"+key, "-trusted-proxies", "127.0.0.1/32")
	client := func(ip string) []string { return []string{"X-Forwarded-For", ip} }

	for i := 1; i <= 3; i++ {
		r := d.get("/", client("192.0.2.1")...)
		require.Equal(t, 200, r.status, "request %d", i)
		assert.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
	}
	p := requireProblem(t, d.get("/", client("192.0.2.1")...), 429)
	assert.Equal(t, "demo-test/remote_address", p.Limit)

	// Raise the limit to 5: the 3 requests counted stay counted.
	require.NoError(t, rulesredis.Publish(ctx, rdb, key, []byte(strings.Replace(rulesV1, "requests_per_unit: 3", "requests_per_unit: 5", 1)), nil))
	waitFor(t, func(n int) bool { // each probe is another client
		return d.get("/", client("198.51.100."+strconv.Itoa(n))...).header.Get("X-RateLimit-Limit") == "5"
	})
	assert.Contains(t, d.stderr.String(), `msg="ratekit: rules reloaded" key=`+key+" domain=demo-test")
	r := d.get("/", client("192.0.2.1")...)
	require.Equal(t, 200, r.status)
	assert.Equal(t, "1", r.header.Get("X-RateLimit-Remaining"), "3 of 5 used before the reload; this is the 4th")

	// An invalid version, set and announced by hand: logged with its line,
	// and the rules stay.
	require.NoError(t, rdb.Set(ctx, key, strings.Replace(rulesV1, "unit: minute", "unit: fortnight", 1), 0).Err())
	require.NoError(t, rdb.Publish(ctx, rulesredis.Channel(key), "by hand").Err())
	waitFor(t, func(int) bool {
		return strings.Contains(d.stderr.String(), "rules reload rejected; previous rules kept")
	})
	assert.Contains(t, d.stderr.String(), `key=`+key+` error="redis:`+key+`:4: descriptors[0].rate_limit: unit \"fortnight\"`)
	r = d.get("/", client("192.0.2.1")...)
	require.Equal(t, 200, r.status)
	assert.Equal(t, "5", r.header.Get("X-RateLimit-Limit"))
	requireProblem(t, d.get("/", client("192.0.2.1")...), 429)
}

func TestRulesRedisErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", "redis://127.0.0.1:1/0"}, `-config "redis://127.0.0.1:1/0": no Redis key after the database number`},
		{[]string{"-config", "redis://127.0.0.1:1/ratekit:rules"}, "no Redis key after the database number"},
		{[]string{"-config", "redis://127.0.0.1:1/zero/k"}, `-config "redis://127.0.0.1:1/zero/k": redis: invalid database number`},
		{[]string{"-config", "redis://127.0.0.1:1/0/k", "-algorithm", "token-bucket"}, "-algorithm applies only without -config"},
	} {
		_, err := parseFlags(tc.args, &strings.Builder{})
		assert.ErrorContains(t, err, tc.want)
		assert.Equal(t, 2, cli.ExitCode("demo", err, &strings.Builder{}), "%q", tc.args)
	}
	cfg, err := parseFlags([]string{"-config", "redis://u:p@127.0.0.1:1/2/a%2Fb:c"}, &strings.Builder{})
	require.NoError(t, err)
	assert.Equal(t, "a/b:c", cfg.rulesRedis.key)
	assert.Equal(t, 2, cfg.rulesRedis.options.DB)
	assert.Equal(t, "p", cfg.rulesRedis.options.Password)
	assert.Empty(t, cfg.rulesFile)

	// A key that is missing, or holds an invalid document: the demo
	// does not start, and says why.
	srv := redistest.Start(t)
	var stderr strings.Builder
	err = run(t.Context(), []string{"-addr", "127.0.0.1:0", "-config", "redis://" + srv.Addr() + "/0/demo-test:none"}, &strings.Builder{}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `rulesredis: key not found: "demo-test:none" (publish the rules first`)
	assert.Equal(t, 1, cli.ExitCode("demo", err, &stderr))

	require.NoError(t, srv.Client(t).Set(context.Background(), "demo-test:bad", "domain: d\ndescriptors:\n  - key: remote_address\n    rate_limt: {}\n", 0).Err())
	err = run(t.Context(), []string{"-addr", "127.0.0.1:0", "-config", "redis://" + srv.Addr() + "/0/demo-test:bad"}, &strings.Builder{}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `redis:demo-test:bad:4: descriptors[0]: unknown key "rate_limt"`)
}
