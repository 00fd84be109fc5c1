package hybrid_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore/hybrid"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestCloseSendsLastCounts: the last count a server's final sync writes
// (its unused leases given back) reaches the other regions at Close.
// Before, the last send to a region could leave before the final sync had
// answered, and the other region kept this server's leases as used: with
// one server in the region, for good.
func TestCloseSendsLastCounts(t *testing.T) {
	eu, us := redistest.Start(t), redistest.Start(t)
	usRedis := us.Client(t)
	clock := storetest.NewClock(storetest.Epoch)
	limit := core.Limit{Name: "close", Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}
	for i := range 5 {
		euH := newHybrid(t, eu.Client(t), clock, time.Hour, hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": usRedis}))
		lim := core.Must(core.NewLimiter(limit, core.WithStore(euH)))
		key := "k" + string(rune('a'+i))
		if n := takeN(t, lim, key, 10); n != 10 {
			t.Fatalf("admitted %d of 10", n)
		}
		if err := euH.Close(); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute) // the next round counts in a window of its own
		_, others := hashTotals(t, usRedis)
		if others != 10 {
			t.Fatalf("round %d: after eu closed, us holds eu's count as %d; eu admitted 10 and holds no lease", i, others)
		}
		if err := usRedis.FlushDB(context.Background()).Err(); err != nil { // this test's own redis-server
			t.Fatal(err)
		}
	}
}

// TestPeerClientWithoutDeadlines: a client of another region that does
// not apply context deadlines cannot be bounded by the peer timeout (with
// ReadTimeout -1, a send on a link that does not answer waits for ever,
// and so does Close): New says so.
func TestPeerClientWithoutDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	peer := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1})
	t.Cleanup(func() { _ = peer.Close() })
	var logs bytes.Buffer
	h, err := hybrid.New(srv.Client(t), time.Second, hybrid.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		hybrid.WithRegion("eu", map[string]redis.UniversalClient{"us": peer}))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Close()
	if !strings.Contains(logs.String(), "ContextTimeoutEnabled") {
		t.Errorf("no warning about a region's client that does not apply deadlines:\n%s", logs.String())
	}
}
