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
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// This file tests -store hybrid, -region with -peer, and -overlimit-cache.

// redisURL is the -redis (or -peer) URL of a private Redis.
func redisURL(srv *redistest.Server) string { return "redis://" + srv.Addr() + "/0" }

// hybridLimit is the limit of the hybrid tests: 10 a minute in a fixed
// window, which starts at t0 and does not end, as the demos' clocks stand
// still there.
var hybridLimit = []string{"-algorithm", "fixed-window", "-limit", "10", "-period", "1m"}

// eventually polls cond until it holds, failing the test after a few
// seconds: the hybrid store's syncs run on the real clock.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling for a sync, not timing a limit
	}
}

// TestHybridSharedByTwoServers runs two demo servers with -store hybrid
// on one private Redis: each decides in its memory, on leases, and
// together they admit exactly the limit.
func TestHybridSharedByTwoServers(t *testing.T) {
	srv := redistest.Start(t)
	args := append([]string{"-store", "hybrid", "-redis", redisURL(srv), "-redis-prefix", "demo-hybrid",
		"-sync-interval", "100ms"}, hybridLimit...)
	a, b := start(t, args...), start(t, args...)
	demos := []*demo{a, b}

	// A server rejects what it cannot lease, while the other holds the
	// rest of the limit in a lease it has not used yet; unused leases go
	// back to Redis within an interval. So requests go on, to both in
	// turn, until the limit is used up, and no further.
	admitted, sent := 0, 0
	send := func() {
		r := demos[sent%2].get("/")
		sent++
		switch r.status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			requireProblem(t, r, http.StatusTooManyRequests)
			assert.NotEmpty(t, r.header.Get("Retry-After"))
		default:
			t.Fatalf("request %d: status %d: %s", sent, r.status, r.body)
		}
	}
	for range 200 {
		send()
	}
	eventually(t, "the two servers admit the limit", func() bool {
		send()
		return admitted >= 10
	})
	t.Logf("%d requests sent until the limit was used up", sent)
	for range 20 {
		send()
	}
	assert.Equal(t, 10, admitted, "admitted across both servers, of %d requests", sent)
	for _, d := range demos {
		r := d.get("/")
		requireProblem(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "60", r.header.Get("Retry-After"), "the window ends in a minute")
		assert.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
	}

	// The login limit, a fixed window, is on the hybrid store too.
	logins := 0
	for i := range 40 {
		if demos[i%2].do("POST", "/login").status == http.StatusOK {
			logins++
		}
	}
	eventually(t, "the two servers admit the login limit", func() bool {
		if a.do("POST", "/login").status == http.StatusOK {
			logins++
		}
		return logins >= 5
	})
	for i := range 10 {
		if demos[i%2].do("POST", "/login").status == http.StatusOK {
			logins++
		}
	}
	assert.Equal(t, 5, logins, "logins admitted across both servers")
	requireProblem(t, a.do("POST", "/login"), http.StatusTooManyRequests)
	requireProblem(t, b.do("POST", "/login"), http.StatusTooManyRequests)

	// Each demo's cleanup counts goroutines against its start; the other
	// demo's keep-alive connections must not count as its leak.
	a.client.CloseIdleConnections()
	b.client.CloseIdleConnections()
}

// state returns the decision of the admin listener's state for client ip
// under the limiter "demo": whether a request would be allowed, and what
// would remain.
func (d *demo) state(ip string) (allowed bool, remaining int) {
	d.t.Helper()
	status, got := d.admin("GET", "state?limiter=demo&key="+ip, "t0ken", nil)
	require.Equal(d.t, http.StatusOK, status, "%v", got)
	dec := got["decision"].(map[string]any)
	return dec["allowed"].(bool), int(dec["remaining"].(float64))
}

// TestHybridTwoRegions runs one demo per region, eu and us, each on its own
// private Redis and naming the other's with -peer: a limit holds across
// both once each has heard the other's counts, a sync interval or two
// after the requests.
func TestHybridTwoRegions(t *testing.T) {
	euRedis, usRedis := redistest.Start(t), redistest.Start(t)
	common := append([]string{"-store", "hybrid", "-sync-interval", "100ms", "-trusted-proxies", "127.0.0.1",
		"-admin", "127.0.0.1:0", "-admin-token", "t0ken"}, hybridLimit...)
	eu := start(t, append([]string{"-redis", redisURL(euRedis), "-region", "eu", "-peer", "us=" + redisURL(usRedis)}, common...)...)
	us := start(t, append([]string{"-redis", redisURL(usRedis), "-region", "us", "-peer", "eu=" + redisURL(euRedis)}, common...)...)
	// get sends GET / from client ip to region d.
	get := func(d *demo, ip string) response { return d.get("/", "X-Forwarded-For", ip) }
	// drain sends requests from ip to d until one is rejected, and says
	// how many were admitted.
	drain := func(d *demo, ip string) int {
		for n := 0; ; n++ {
			r := get(d, ip)
			if r.status != http.StatusOK {
				requireProblem(t, r, http.StatusTooManyRequests)
				assert.Equal(t, "60", r.header.Get("Retry-After"))
				return n
			}
			require.Less(t, n, 100, "never rejected")
		}
	}

	t.Run("one region uses up the limit", func(t *testing.T) {
		const ip = "192.0.2.1"
		require.Equal(t, 10, drain(eu, ip), "eu alone admits the limit, exactly")
		begin := time.Now()
		eventually(t, "us hears of eu's requests", func() bool {
			allowed, _ := us.state(ip)
			return !allowed
		})
		t.Logf("us rejects %s after eu used up the limit", time.Since(begin).Round(time.Millisecond))
		assert.Equal(t, 0, drain(us, ip), "us admits nothing more")
	})

	t.Run("each region sees the other's count", func(t *testing.T) {
		const ip = "192.0.2.2"
		for i := range 6 {
			require.Equal(t, http.StatusOK, get(eu, ip).status, "eu request %d", i)
		}
		// eu's count in its Redis includes what its server leased (us
		// then rejects too early, never too late); once the lease goes
		// back unused, us sees the 6 admitted. The state is what a
		// request would get: it would leave 10 - 6 - 1.
		eventually(t, "us hears of eu's 6", func() bool {
			_, remaining := us.state(ip)
			return remaining == 3
		})
		n := drain(us, ip)
		assert.Equal(t, 4, n, "us admits what is left of the limit")
		eventually(t, "eu hears of us's requests", func() bool {
			allowed, _ := eu.state(ip)
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
		for i, d := range []*demo{eu, us} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 30 {
					req, err := http.NewRequest("GET", d.base+"/", nil)
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("X-Forwarded-For", ip)
					resp, err := d.client.Do(req)
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
		for _, d := range []*demo{eu, us} {
			eventually(t, "both regions reject", func() bool {
				allowed, _ := d.state(ip)
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
			d := []*demo{eu, us}[i%2]
			if get(d, ip).status == http.StatusOK {
				counts[i%2]++
			} else {
				rejected[i%2] = true
			}
		}
		total := counts[0] + counts[1]
		t.Logf("admitted by eu %d, by us %d: %d under a limit of 10", counts[0], counts[1], total)
		assert.GreaterOrEqual(t, total, 10)
		assert.LessOrEqual(t, total, 10+2*2, "over the limit by more than two sync intervals' requests per region")
		for _, d := range []*demo{eu, us} {
			eventually(t, "both regions reject", func() bool {
				allowed, _ := d.state(ip)
				return !allowed
			})
			assert.Equal(t, 0, drain(d, ip))
		}
	})

	eu.client.CloseIdleConnections()
	us.client.CloseIdleConnections()
}

// TestOverlimitCache: with -overlimit-cache, a client over its limit is
// rejected from the server's memory, with the store's numbers, without
// a call to Redis.
func TestOverlimitCache(t *testing.T) {
	for _, store := range []string{"redis", "hybrid"} {
		t.Run(store, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			d := start(t, "-store", store, "-redis", redisURL(srv), "-overlimit-cache",
				"-algorithm", "fixed-window", "-limit", "3", "-period", "1m")
			for i := 1; i <= 3; i++ {
				require.Equal(t, http.StatusOK, d.get("/").status, "request %d", i)
			}
			first := d.get("/")
			requireProblem(t, first, http.StatusTooManyRequests)
			before := commandsProcessed(t, rdb)
			for range 20 {
				r := d.get("/")
				requireProblem(t, r, http.StatusTooManyRequests)
				for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					assert.Equal(t, first.header.Get(h), r.header.Get(h), h)
				}
			}
			// The INFO calls themselves count; 20 rejections decided in
			// Redis would be 20 more.
			assert.LessOrEqual(t, commandsProcessed(t, rdb)-before, int64(2), "rejections answered without Redis")
			d.client.CloseIdleConnections()
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
	goroutines := countGoroutines()
	for _, algo := range []string{"token-bucket", "leaky-bucket", "sliding-window-log"} {
		t.Run(algo, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-store", "hybrid", "-redis", redisURL(srv),
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
	waitGoroutines(t, goroutines) // the hybrid store was closed
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
