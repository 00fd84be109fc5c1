package rls_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// redisService is a Service whose counts live in a real redis-server,
// reached through a proxy that the test can cut.
func redisService(t *testing.T, failClosed bool) (rlspb.RateLimitServiceClient, *redistest.Proxy, *adaptertest.SyncBuffer) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &adaptertest.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	store, err := redisstore.New(rdb, redisstore.WithLogger(log))
	require.NoError(t, err)
	cfg, err := rulesfile.Parse("test.yaml", []byte(anotherYAML))
	require.NoError(t, err)
	limOpts := []core.Option{core.WithLogger(log)}
	if failClosed {
		limOpts = append(limOpts, core.WithFailClosed())
	}
	e, err := rules.NewEngine(rules.WithStore(store), rules.WithAnyKey(), rules.WithLimiterOptions(limOpts...))
	require.NoError(t, err)
	require.NoError(t, e.Load(cfg))
	svc, err := rls.New([]*rules.Engine{e}, rls.WithLogger(log))
	require.NoError(t, err)
	return serve(t, svc), proxy, logs
}

// TestRedis runs Envoy's two-descriptor case on a real Redis: the
// remaining counts and codes are the memory store's.
func TestRedis(t *testing.T) {
	client, _, _ := redisService(t, false)
	for i := range 12 {
		resp, err := client.ShouldRateLimit(context.Background(), req("another", 1, []string{"key2", "r"}, []string{"key3", "r"}))
		require.NoError(t, err)
		want1, want2, code := uint32(20-(i+1)), uint32(10-(i+1)), ok
		if i >= 10 {
			want1, want2, code = 10, 0, over
		}
		assert.Equal(t, code, resp.OverallCode, "request %d", i)
		assert.Equal(t, want1, resp.Statuses[0].LimitRemaining, "request %d", i)
		assert.Equal(t, want2, resp.Statuses[1].LimitRemaining, "request %d", i)
		reset := resp.Statuses[1].DurationUntilReset.GetSeconds()
		assert.True(t, reset > 0 && reset <= 3600, "an hour window's reset: %d", reset)
	}
}

// TestStoreFailure cuts the link to Redis: failing open, the answer is OK;
// failing closed, the call fails with Unavailable. The failure is logged
// once, not once per request.
func TestStoreFailure(t *testing.T) {
	for _, closed := range []bool{false, true} {
		name := "open"
		if closed {
			name = "closed"
		}
		t.Run(name, func(t *testing.T) {
			client, proxy, logs := redisService(t, closed)
			r := req("another", 1, []string{"key2", "f"})
			_, err := client.ShouldRateLimit(context.Background(), r)
			require.NoError(t, err)
			proxy.Cut()
			for range 5 {
				resp, err := client.ShouldRateLimit(context.Background(), r)
				if closed {
					require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
					assert.Equal(t, "rate limit store unavailable", status.Convert(err).Message())
				} else {
					require.NoError(t, err)
					assert.Equal(t, ok, resp.OverallCode)
				}
			}
			assert.Equal(t, 1, strings.Count(logs.String(), "store failing"), "one line for the episode:\n%s", logs)
		})
	}
}
