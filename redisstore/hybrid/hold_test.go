package hybrid_test

import (
	"context"
	_ "embed"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore/hybrid"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
	"github.com/ratekit/ratekit/redisstore/internal/testenv"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// The tests of this file hold a hybrid limit against the faults that used
// to multiply it: servers whose clocks disagree, a region that sends a
// count no region could have, and a link to a region that is slow but
// answers.

//go:embed hybrid.lua
var scriptSource string

// windowKeys returns the window hashes in rdb, by window index.
func windowKeys(t testing.TB, rdb *redis.Client) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	all, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, k := range all {
		i := strings.LastIndexByte(k, 'w')
		if i < 0 || rdb.HExists(ctx, k, "g").Val() {
			continue
		}
		if win, err := strconv.ParseInt(k[i+1:], 10, 64); err == nil {
			out[k] = win
		}
	}
	return out
}

// TestSkewedServersShareRedisWindows runs two servers whose clocks
// disagree on one Redis: their windows are Redis's, so together they admit
// the limit once, not once per window their clocks are in. Before, a
// server's window came from its own clock: two servers 2 s apart across a
// window's boundary, or an hour apart under an hourly limit, each counted
// in a window of its own, and together admitted twice the limit.
func TestSkewedServersShareRedisWindows(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const period = time.Hour
	cases := []struct {
		name string
		skew func(now time.Time) (a, b time.Duration) // of each server's clock from Redis's
	}{
		{"2s across a boundary", func(now time.Time) (a, b time.Duration) {
			// Five windows ahead of Redis, the clocks read 1 s before and
			// 1 s after a boundary.
			boundary := now.Truncate(period).Add(5 * period)
			return boundary.Add(-time.Second).Sub(now), boundary.Add(time.Second).Sub(now)
		}},
		{"1h", func(time.Time) (a, b time.Duration) { return 0, time.Hour }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				start := time.Now() // Redis's clock: the same machine's
				a, b := c.skew(start)
				name := "skew-" + strconv.Itoa(attempt) + "-" + strings.ReplaceAll(c.name, " ", "-")
				limit := core.Limit{Name: name, Algorithm: core.FixedWindow, Rate: core.Rate{Count: 20, Period: period}}
				var lims [2]*core.Limiter
				var stores [2]*hybrid.Store
				for i, skew := range [2]time.Duration{a, b} {
					h, err := hybrid.New(rdb, time.Hour, withSkew(skew), hybrid.WithTimeout(2*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					stores[i] = h
					lims[i] = core.Must(core.NewLimiter(limit, core.WithStore(h)))
				}
				admitted := 0
				for range 30 { // the two servers' requests interleave
					admitted += takeN(t, lims[0], "k", 1) + takeN(t, lims[1], "k", 1)
				}
				for _, h := range stores {
					_ = h.Close() // its last sync, before the keys are read
				}
				win := start.UnixNano() / period.Nanoseconds()
				if time.Now().UnixNano()/period.Nanoseconds() != win && attempt == 0 {
					continue // Redis's window turned during the test: once more
				}
				if admitted != 20 {
					t.Errorf("servers %s and %s off Redis's clock admitted %d of 60 under a limit of 20 per hour", a, b, admitted)
				}
				n := 0
				for k, got := range windowKeys(t, rdb) {
					n++
					if got != win {
						t.Errorf("window hash %s: window %d; Redis's clock is in window %d", k, got, win)
					}
				}
				if n == 0 {
					t.Error("no window hash in Redis")
				}
				if err := rdb.FlushDB(context.Background()).Err(); err != nil { // this test's own redis-server
					t.Fatal(err)
				}
				return
			}
		})
	}
}

// mergeKey returns the window hash of client in rdb: the key of client
// "k", the only window hash there, with the client's tag swapped.
func mergeKey(t testing.TB, rdb *redis.Client, client string) string {
	t.Helper()
	ws := windowKeys(t, rdb)
	if len(ws) != 1 {
		t.Fatalf("want one window hash in Redis, got %v", ws)
	}
	for k := range ws {
		from := keys.ClientTag("k")
		to := keys.ClientTag(client)
		return strings.Replace(k, string(from[:]), string(to[:]), 1)
	}
	return ""
}

// badMerge sends, as region "us" would, a count of a window to rdb.
func badMerge(t testing.TB, rdb *redis.Client, key string, version, count int64) {
	t.Helper()
	err := rdb.Eval(context.Background(), scriptSource, []string{key}, "m", "us",
		strconv.FormatInt(version, 10), strconv.FormatInt(count, 10), "1", "600000").Err()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPeerCountsClamped: a count from another region is taken as no less
// than 0 and no more than the limit, whatever it says. Before, a region
// that sent -1,000,000 freed that much of the limit: 1,000 of 1,000
// admitted at a limit of 200.
func TestPeerCountsClamped(t *testing.T) {
	eu, us := redistest.Start(t), redistest.Start(t)
	rdb := eu.Client(t)
	clock := storetest.NewClock(storetest.Epoch)
	h := newHybrid(t, rdb, clock, time.Hour, hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": us.Client(t)}))
	lim := core.Must(core.NewLimiter(core.Limit{Name: "clamp", Algorithm: core.FixedWindow, Rate: core.PerMinute(200)}, core.WithStore(h)))
	takeN(t, lim, "k", 1) // the window hash exists, its limit known
	key := mergeKey(t, rdb, "k")
	fresh := mergeKey(t, rdb, "fresh") // no hash yet: a merge comes first
	other := mergeKey(t, rdb, "other")

	badMerge(t, rdb, key, 1, -1_000_000)
	badMerge(t, rdb, fresh, 1, -1_000_000)
	if n := takeN(t, lim, "k", 1000); n != 199 {
		t.Errorf("after a region sent -1,000,000, admitted %d of 1000 more at a limit of 200 (1 taken before); want 199", n)
	}
	if n := takeN(t, lim, "fresh", 1000); n != 200 {
		t.Errorf("a client whose first count was -1,000,000 from a region: admitted %d of 1000 at a limit of 200", n)
	}

	// A count past the limit is taken as the limit: it rejects, but it
	// does not stay beyond what the region could have admitted.
	takeN(t, lim, "other", 10)
	badMerge(t, rdb, other, 1, 1<<60)
	if r, err := rdb.HGet(context.Background(), other, "R").Float64(); err != nil || r < 0 || r > 200 {
		t.Errorf("a region's count of 2^60 is held as %v (%v); want it within [0, 200]", r, err)
	}
	badMerge(t, rdb, other, 2, 50) // the region's honest count, newer
	if n := takeN(t, lim, "other", 300); n != 140 {
		t.Errorf("after the region's count came down to 50, admitted %d more (10 before, limit 200); want 140", n)
	}
}

// keyspace waits for cond, checked at start and after every change to a
// hash in rdb (keyspace notifications, not a clock), for at most within.
func keyspace(t testing.TB, rdb *redis.Client, within time.Duration, cond func() bool) bool {
	t.Helper()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "Kh").Err(); err != nil { // this test's own redis-server
		t.Fatal(err)
	}
	sub := rdb.PSubscribe(ctx, "__keyspace@*__:*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	events := sub.Channel()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-events:
		case <-deadline.C:
			return cond()
		}
	}
}

// TestSlowLinkIsNotAPartition links region eu to region us's Redis through
// a proxy that delays each way by 1.5 s (a round trip of 3 s, connecting
// included): us still learns of eu's count and rejects what eu used. Before,
// every send to us gave up after 2 s, before the connection was even set
// up, so the link acted as a permanent partition: us admitted its whole
// limit again (+100 %).
func TestSlowLinkIsNotAPartition(t *testing.T) {
	eu, us := redistest.Start(t), redistest.Start(t)
	slow := redistest.StartProxy(t, us.Addr())
	slow.SetDelay(1500 * time.Millisecond)
	// A new connection costs one round trip (HELLO) rather than go-redis's
	// default three (CLIENT MAINT_NOTIFICATIONS and SETINFO), to keep the
	// test short; ReadTimeout -1: the store's deadline bounds each send.
	toUS := redis.NewClient(&redis.Options{Addr: slow.Addr(), ReadTimeout: -1, WriteTimeout: -1, ContextTimeoutEnabled: true,
		DisableIdentity: true, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = toUS.Close() })
	clock := storetest.NewClock(storetest.Epoch)
	var logs testenv.SyncBuffer
	logger := hybrid.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	euH := newHybrid(t, eu.Client(t), clock, 50*time.Millisecond, logger, hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": toUS}))
	usH := newHybrid(t, us.Client(t), clock, 50*time.Millisecond, logger, hybrid.WithRegion("us", map[string]redis.UniversalClient{"eu": eu.Client(t)}))
	limit := core.Limit{Name: "slow", Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}
	euL := core.Must(core.NewLimiter(limit, core.WithStore(euH)))
	usL := core.Must(core.NewLimiter(limit, core.WithStore(usH)))

	if n := takeN(t, euL, "k", 100); n != 100 {
		t.Fatalf("eu admitted %d of its limit of 100", n)
	}
	usRedis := us.Client(t)
	sent := time.Now()
	heard := keyspace(t, usRedis, 20*time.Second, func() bool {
		_, others := hashTotals(t, usRedis)
		return others == 100
	})
	t.Logf("heard after %s", time.Since(sent))
	if !heard {
		_, others := hashTotals(t, usRedis)
		t.Errorf("us's Redis holds %d of eu's count of 100 after 20 s over a link with a 3 s round trip", others)
	}
	if n := takeN(t, usL, "k", 100); n != 0 {
		t.Errorf("us admitted %d more after eu used the whole limit of 100 (+%d %%)", n, n)
	}
	if strings.Contains(logs.String(), "unreachable") {
		t.Errorf("a slow link was logged as a partition:\n%s", logs.String())
	}
}
