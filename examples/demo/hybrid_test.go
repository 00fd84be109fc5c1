package main

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// This file tests -store hybrid, -region with -peer, and -overlimit-cache.

// hybridLimit is the limit of the hybrid tests: 10 a minute in a fixed
// window, which starts at demotest.T0 and does not end, as the demos'
// clocks stand still there.
var hybridLimit = []string{"-algorithm", "fixed-window", "-limit", "10", "-period", "1m"}

// TestHybridSharedByTwoServers runs two demo servers with -store hybrid
// on one private Redis: each decides in its memory, on leases, and
// together they admit exactly the limit.
func TestHybridSharedByTwoServers(t *testing.T) {
	srv := redistest.Start(t)
	args := append([]string{"-store", "hybrid", "-redis", demotest.RedisURL(srv), "-redis-prefix", "demo-hybrid",
		"-sync-interval", "100ms"}, hybridLimit...)
	a, b := start(t, args...), start(t, args...)
	demos := []*demotest.Demo{a, b}

	// A server rejects what it cannot lease, while the other holds the
	// rest of the limit in a lease it has not used yet; unused leases go
	// back to Redis within an interval. So requests go on, to both in
	// turn, until the limit is used up, and no further.
	admitted, sent := 0, 0
	send := func() {
		r := demos[sent%2].Get("/")
		sent++
		switch r.Status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			demotest.RequireProblem(t, r, http.StatusTooManyRequests)
			assert.NotEmpty(t, r.Header.Get("Retry-After"))
		default:
			t.Fatalf("request %d: status %d: %s", sent, r.Status, r.Body)
		}
	}
	for range 200 {
		send()
	}
	demotest.Eventually(t, "the two servers admit the limit", func() bool {
		send()
		return admitted >= 10
	})
	t.Logf("%d requests sent until the limit was used up", sent)
	for range 20 {
		send()
	}
	assert.Equal(t, 10, admitted, "admitted across both servers, of %d requests", sent)
	for _, d := range demos {
		r := d.Get("/")
		demotest.RequireProblem(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "60", r.Header.Get("Retry-After"), "the window ends in a minute")
		assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
	}

	// The login limit, a fixed window, is on the hybrid store too.
	logins := 0
	for i := range 40 {
		if demos[i%2].Do("POST", "/login").Status == http.StatusOK {
			logins++
		}
	}
	demotest.Eventually(t, "the two servers admit the login limit", func() bool {
		if a.Do("POST", "/login").Status == http.StatusOK {
			logins++
		}
		return logins >= 5
	})
	for i := range 10 {
		if demos[i%2].Do("POST", "/login").Status == http.StatusOK {
			logins++
		}
	}
	assert.Equal(t, 5, logins, "logins admitted across both servers")
	demotest.RequireProblem(t, a.Do("POST", "/login"), http.StatusTooManyRequests)
	demotest.RequireProblem(t, b.Do("POST", "/login"), http.StatusTooManyRequests)

	// Each demo's cleanup counts goroutines against its start; the other
	// demo's keep-alive connections must not count as its leak.
	a.Client.CloseIdleConnections()
	b.Client.CloseIdleConnections()
}

// TestHybridTwoRegions runs one demo per region, eu and us, each on its own
// private Redis and naming the other's with -peer: a limit holds across
// both once each has heard the other's counts, a sync interval or two
// after the requests.
func TestHybridTwoRegions(t *testing.T) {
	euRedis, usRedis := redistest.Start(t), redistest.Start(t)
	common := append([]string{"-store", "hybrid", "-sync-interval", "100ms", "-trusted-proxies", "127.0.0.1",
		"-admin", "127.0.0.1:0", "-admin-token", "t0ken"}, hybridLimit...)
	eu := start(t, append([]string{"-redis", demotest.RedisURL(euRedis), "-region", "eu", "-peer", "us=" + demotest.RedisURL(usRedis)}, common...)...)
	us := start(t, append([]string{"-redis", demotest.RedisURL(usRedis), "-region", "us", "-peer", "eu=" + demotest.RedisURL(euRedis)}, common...)...)
	// get sends GET / from client ip to region d.
	get := func(d *demotest.Demo, ip string) demotest.Response { return d.Get("/", "X-Forwarded-For", ip) }
	// drain sends requests from ip to d until one is rejected, and says
	// how many were admitted.
	drain := func(d *demotest.Demo, ip string) int {
		for n := 0; ; n++ {
			r := get(d, ip)
			if r.Status != http.StatusOK {
				demotest.RequireProblem(t, r, http.StatusTooManyRequests)
				assert.Equal(t, "60", r.Header.Get("Retry-After"))
				return n
			}
			require.Less(t, n, 100, "never rejected")
		}
	}

	t.Run("one region uses up the limit", func(t *testing.T) {
		const ip = "192.0.2.1"
		require.Equal(t, 10, drain(eu, ip), "eu alone admits the limit, exactly")
		begin := time.Now()
		demotest.Eventually(t, "us hears of eu's requests", func() bool {
			allowed, _ := us.State(ip)
			return !allowed
		})
		t.Logf("us rejects %s after eu used up the limit", time.Since(begin).Round(time.Millisecond))
		assert.Equal(t, 0, drain(us, ip), "us admits nothing more")
	})

	t.Run("each region sees the other's count", func(t *testing.T) {
		const ip = "192.0.2.2"
		for i := range 6 {
			require.Equal(t, http.StatusOK, get(eu, ip).Status, "eu request %d", i)
		}
		// eu's count in its Redis includes what its server leased (us
		// then rejects too early, never too late); once the lease goes
		// back unused, us sees the 6 admitted. The state is what a
		// request would get: it would leave 10 - 6 - 1.
		demotest.Eventually(t, "us hears of eu's 6", func() bool {
			_, remaining := us.State(ip)
			return remaining == 3
		})
		n := drain(us, ip)
		assert.Equal(t, 4, n, "us admits what is left of the limit")
		demotest.Eventually(t, "eu hears of us's requests", func() bool {
			allowed, _ := eu.State(ip)
			return !allowed
		})
		assert.Equal(t, 0, drain(eu, ip), "eu admits nothing more")
		assert.Equal(t, 0, drain(us, ip))
	})

	t.Run("concurrent requests converge", func(t *testing.T) {
		// Both regions take requests at once, faster than they sync: each
		// decides on what it has heard, so together they may admit up to
		// what arrives in each before the other's counts do, here up to
		// the limit in each. A region alone never admits more than the
		// limit, and a rejection means the limit is used up.
		const ip = "192.0.2.3"
		var wg sync.WaitGroup
		counts := make([]int, 2)
		for i, d := range []*demotest.Demo{eu, us} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 30 {
					req, err := http.NewRequest("GET", d.Base+"/", nil)
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("X-Forwarded-For", ip)
					resp, err := d.Client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						counts[i]++
					}
				}
			}()
		}
		wg.Wait()
		total := counts[0] + counts[1]
		t.Logf("admitted by eu %d, by us %d: %d under a limit of 10", counts[0], counts[1], total)
		assert.LessOrEqual(t, counts[0], 10)
		assert.LessOrEqual(t, counts[1], 10)
		assert.GreaterOrEqual(t, total, 10)
		for _, d := range []*demotest.Demo{eu, us} {
			demotest.Eventually(t, "both regions reject", func() bool {
				allowed, _ := d.State(ip)
				return !allowed
			})
			assert.Equal(t, 0, drain(d, ip), "after the sync, no region admits more")
		}
	})

	t.Run("paced requests", func(t *testing.T) {
		// Requests arrive at both regions in turn, one per region per
		// sync interval. A region hears of the other's requests a sync
		// interval or two after them, so together they admit the limit
		// and at most what a region takes in that time more: a request
		// or two per region.
		const ip = "192.0.2.4"
		counts := make([]int, 2)
		rejected := make([]bool, 2)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; !rejected[0] || !rejected[1]; i++ {
			require.Less(t, i, 200, "never rejected in both regions")
			<-tick.C
			d := []*demotest.Demo{eu, us}[i%2]
			if get(d, ip).Status == http.StatusOK {
				counts[i%2]++
			} else {
				rejected[i%2] = true
			}
		}
		total := counts[0] + counts[1]
		t.Logf("admitted by eu %d, by us %d: %d under a limit of 10", counts[0], counts[1], total)
		assert.GreaterOrEqual(t, total, 10)
		assert.LessOrEqual(t, total, 10+2*2, "over the limit by more than two sync intervals' requests per region")
		for _, d := range []*demotest.Demo{eu, us} {
			demotest.Eventually(t, "both regions reject", func() bool {
				allowed, _ := d.State(ip)
				return !allowed
			})
			assert.Equal(t, 0, drain(d, ip))
		}
	})

	eu.Client.CloseIdleConnections()
	us.Client.CloseIdleConnections()
}

// TestOverlimitCache: with -overlimit-cache, a client over its limit is
// rejected from the server's memory, with the store's numbers, without
// a call to Redis.
func TestOverlimitCache(t *testing.T) {
	for _, store := range []string{"redis", "hybrid"} {
		t.Run(store, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			d := start(t, "-store", store, "-redis", demotest.RedisURL(srv), "-overlimit-cache",
				"-algorithm", "fixed-window", "-limit", "3", "-period", "1m")
			for i := 1; i <= 3; i++ {
				require.Equal(t, http.StatusOK, d.Get("/").Status, "request %d", i)
			}
			first := d.Get("/")
			demotest.RequireProblem(t, first, http.StatusTooManyRequests)
			before := commandsProcessed(t, rdb)
			for range 20 {
				r := d.Get("/")
				demotest.RequireProblem(t, r, http.StatusTooManyRequests)
				for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					assert.Equal(t, first.Header.Get(h), r.Header.Get(h), h)
				}
			}
			// The INFO calls themselves count; 20 rejections decided in
			// Redis would be 20 more.
			assert.LessOrEqual(t, commandsProcessed(t, rdb)-before, int64(2), "rejections answered without Redis")
			d.Client.CloseIdleConnections()
		})
	}
}

// commandsProcessed is how many commands Redis has served.
func commandsProcessed(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no total_commands_processed in INFO stats:\n%s", info)
	return 0
}

// TestHybridBadFlags: the flags of the hybrid store, its regions and the
// over-limit cache are usage errors where they do not apply, or are
// invalid. None of these needs a Redis.
func TestHybridBadFlags(t *testing.T) {
	const peer = "us=redis://127.0.0.1:1/0"
	tests := []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"-store", "hybrid", "-sync-interval", "0s"}, []string{"-sync-interval 0s", "positive"}},
		{[]string{"-store", "hybrid", "-sync-interval", "-1s"}, []string{"-sync-interval -1s", "positive"}},
		{[]string{"-store", "hybrid", "-sync-interval", "soon"}, []string{"-sync-interval"}},
		{[]string{"-sync-interval", "1s"}, []string{"-sync-interval applies only with -store hybrid"}},
		{[]string{"-store", "redis", "-sync-interval", "1s"}, []string{"-sync-interval applies only with -store hybrid"}},
		{[]string{"-store", "redis", "-region", "eu", "-peer", peer}, []string{"-region applies only with -store hybrid"}},
		{[]string{"-peer", peer}, []string{"-peer applies only with -store hybrid"}},
		{[]string{"-store", "hybrid", "-region", "eu"}, []string{"-region eu", "no other region", "-peer NAME=URL"}},
		{[]string{"-store", "hybrid", "-region", ""}, []string{"-region", "empty"}},
		{[]string{"-store", "hybrid", "-peer", peer}, []string{"-peer applies only with -region"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", "us"}, []string{`-peer "us"`, "NAME=URL"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", "=redis://127.0.0.1:1/0"}, []string{"NAME=URL"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", ","}, []string{"-peer", "NAME=URL"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", "eu=redis://127.0.0.1:1/0"}, []string{"eu is this server's region"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", "us=http://127.0.0.1:1"}, []string{`-peer "us=http://127.0.0.1:1"`, "redis://"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", peer + ",us=redis://127.0.0.1:2/0"}, []string{"region us given twice"}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", peer, "-peer", "us=redis://127.0.0.1:2/0"}, []string{"region us given twice"}},
		{[]string{"-store", "hybrid", "-region", "e u", "-peer", peer}, []string{`region name "e u"`}},
		{[]string{"-store", "hybrid", "-region", "eu", "-peer", "a b=redis://127.0.0.1:1/0"}, []string{`region name "a b"`}},
		{[]string{"-store", "hybrid", "-redis-prefix", "a{b}"}, []string{"prefix", "not allowed"}},
		{[]string{"-overlimit-cache"}, []string{"-overlimit-cache applies only with -store redis or hybrid"}},
		{[]string{"-redis", "redis://127.0.0.1:6379/0"}, []string{"-redis applies only with -store redis or hybrid"}},
		{[]string{"-store", "cloud"}, []string{`"cloud"`, "memory, redis, hybrid"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			require.Error(t, err)
			assert.Empty(t, stdout.String(), "nothing is served")
			var ue *cli.UsageError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, 2, cli.ExitCode("demo", err, &stderr))
			for _, w := range tt.want {
				assert.Contains(t, stderr.String(), w)
			}
		})
	}
}

// TestHybridRefusesBuckets: the hybrid store cannot merge the counts of a
// bucket or a log across servers; the demo refuses to start with one, a
// usage error that gives the store's reason.
func TestHybridRefusesBuckets(t *testing.T) {
	srv := redistest.Start(t)
	goroutines := demotest.CountGoroutines()
	for _, algo := range []string{"token-bucket", "leaky-bucket", "sliding-window-log"} {
		t.Run(algo, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-store", "hybrid", "-redis", demotest.RedisURL(srv),
				"-algorithm", algo}, &stdout, &stderr)
			require.Error(t, err)
			assert.ErrorIs(t, err, core.ErrInvalidLimit)
			assert.Empty(t, stdout.String(), "nothing is served")
			assert.Equal(t, 2, cli.ExitCode("demo", err, &stderr))
			for _, w := range []string{"-algorithm " + algo + " with -store hybrid", "fixed-window or sliding-window-counter"} {
				assert.Contains(t, stderr.String(), w)
			}
		})
	}
	demotest.WaitGoroutines(t, goroutines) // the hybrid store was closed
}

// TestHybridHelp: -h lists the flags of this file.
func TestHybridHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &stdout, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, name := range []string{"-sync-interval", "-region", "-peer", "NAME=URL", "-overlimit-cache", "hybrid"} {
		assert.Contains(t, stderr.String(), name)
	}
}
