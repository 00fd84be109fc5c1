package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/overlimit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestOverLimitCache counts the Redis commands that one client costs
// while it hammers at 100 times its limit, through four instances of an
// API (four stores on one Redis server, a client each), with an
// overlimit.Cache in front of each store and without. The limit is 10 per
// second; the client sends 1000 requests per second, round-robin over the
// instances, for 10 seconds of a test clock. Requests are sent one at a
// time: the store shares one FCALL between concurrent decisions, which
// would make the counts depend on timing.
//
// Without the cache every request is one FCALL. With it, the admitted
// requests still are, but a rejection costs one FCALL per retry interval
// per instance: per window for the fixed window, per emission interval
// (100 ms) for the token bucket. The test prints the figures; from
// /work/main:
//
//	RATEKIT_MEASURE=1 go test ./redisstore -run TestOverLimitCache -v -count=1
//
// Without RATEKIT_MEASURE it runs for 2 seconds of the clock, with the
// same assertions.
func TestOverLimitCache(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const (
		instances = 4
		perSecond = 1000 // requests
		limit     = 10   // per second
	)
	seconds := 2
	if measuring() {
		seconds = 10
	}
	requests := seconds * perSecond
	for i, tc := range []struct {
		algorithm core.Algorithm
		intervals int // retry intervals in the run: windows, or emission intervals
	}{
		{core.FixedWindow, seconds},
		{core.TokenBucket, seconds * limit},
	} {
		t.Run(tc.algorithm.String(), func(t *testing.T) {
			run := func(cached bool) (admitted, fcalls int) {
				clock := storetest.NewClock(storetest.Epoch)
				prefix := fmt.Sprintf("ol%dp", i)
				if cached {
					prefix = fmt.Sprintf("ol%dc", i)
				}
				lims := make([]*core.Limiter, instances)
				for n := range lims {
					store, err := redisstore.New(srv.Client(t), redisstore.WithPrefix(prefix),
						redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
					require.NoError(t, err)
					var s core.Store = store
					if cached {
						s, err = overlimit.New(store, overlimit.WithClock(clock.Now))
						require.NoError(t, err)
					}
					lims[n], err = core.NewLimiter(core.Limit{Name: "api", Algorithm: tc.algorithm, Rate: core.PerSecond(limit)},
						core.WithStore(s))
					require.NoError(t, err)
				}
				before := fcallCount(t, admin)
				ctx := context.Background()
				for r := range requests {
					clock.Set(storetest.Epoch.Add(time.Duration(r) * time.Second / perSecond))
					d, err := lims[r%instances].Take(ctx, "client-1", 1)
					require.NoError(t, err)
					if d.Allowed {
						admitted++
					}
				}
				return admitted, fcallCount(t, admin) - before
			}
			admitted, cachedCalls := run(true)
			plainAdmitted, plainCalls := run(false)
			t.Logf("%s %d/s, %d instances: %d requests in %d s, %d admitted; FCALLs: %d with the over-limit cache, %d without",
				tc.algorithm, limit, instances, requests, seconds, admitted, cachedCalls, plainCalls)

			assert.Equal(t, plainAdmitted, admitted, "the cache changes no decision")
			assert.Equal(t, requests, plainCalls, "without the cache, one FCALL per request")
			// With it: one per admission, and one rejection per instance
			// per retry interval, after which the cache sends the next
			// request to Redis again.
			assert.Equal(t, admitted+instances*tc.intervals, cachedCalls)
		})
	}
}

// fcallCount returns the FCALLs the server has run, from INFO
// commandstats (cmdstat_fcall:calls=N,...).
func fcallCount(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest+",", ',')])
		require.NoError(t, err, line)
		return n
	}
	return 0
}
