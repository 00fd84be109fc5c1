package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestOrdersQueued: authentication first, then two orders a second are
// placed at once, the next is queued and placed by the worker
// (demotest.CheckOrders).
func TestOrdersQueued(t *testing.T) {
	demotest.CheckOrders(t, start(t))
}

// TestOrdersQueuedInRedis: with -store redis the queue is in Redis,
// which another demo server's worker may drain as well.
func TestOrdersQueuedInRedis(t *testing.T) {
	srv := redistest.Start(t)
	d := start(t, "-store", "redis", "-redis", demotest.RedisURL(srv), "-redis-prefix", "demo-orders")
	demotest.CheckOrders(t, d)
	keys, err := srv.Client(t).Keys(t.Context(), "demo-orders:q:*").Result()
	require.NoError(t, err)
	assert.Subset(t, []string{"demo-orders:q:{orders}:s"}, keys, "the order placed, the queue holds no key but a push's token")
	d.Client.CloseIdleConnections()
}

// TestOrdersFloodFair is the audit's flood: a client over its limit
// posts 1,300 orders as fast as it can, then another client, from
// another IP, posts 3. The flooding client's share of the queue is 20
// orders (ordersPerClient), plus the orders the worker placed meanwhile
// (at most 2: the demo's clock is frozen, so its pace of 2 a second
// admits 2), the rest answered 429 as without a queue; the other
// client's order past its limit is queued, not refused as "queue full".
// Before, the flooding client got about 1,000 orders queued (the whole
// queue) and the other was refused. Run with -v for the figures.
func TestOrdersFloodFair(t *testing.T) {
	d := start(t, "-trusted-proxies", "127.0.0.1")
	count := map[int]int{}
	for range 1300 {
		r := d.OrderAs(demotest.Alice, `{"item":"tea"}`, "X-Forwarded-For", "192.0.2.1")
		count[r.Status]++
	}
	t.Logf("flooding client, 1,300 POSTs: %d placed at once (201), %d queued (202), %d refused (429)",
		count[http.StatusCreated], count[http.StatusAccepted], count[http.StatusTooManyRequests])
	assert.Equal(t, 2, count[http.StatusCreated])
	assert.GreaterOrEqual(t, count[http.StatusAccepted], 20)
	assert.LessOrEqual(t, count[http.StatusAccepted], 22, "the flooding client holds at most its share")
	assert.Equal(t, 1300, count[http.StatusCreated]+count[http.StatusAccepted]+count[http.StatusTooManyRequests])

	var other []int
	for range 3 {
		r := d.OrderAs(demotest.Bob, `{"item":"cake"}`, "X-Forwarded-For", "198.51.100.7")
		other = append(other, r.Status)
		if r.Status == http.StatusAccepted {
			assert.Len(t, r.Header.Get(queue.HeaderID), 32)
		}
	}
	t.Logf("other client, then: %v", other)
	assert.Equal(t, []int{http.StatusCreated, http.StatusCreated, http.StatusAccepted}, other, "the other client is queued")
	assert.NotContains(t, d.Stderr(), "queue full")
}

// TestTimeouts: the server closes silent, stalled and idle connections
// (demotest.CheckTimeouts, with short timeouts); by default each is at
// most 15 s.
func TestTimeouts(t *testing.T) {
	demotest.CheckTimeouts(t, demotest.StartWith(t, demo.StdHTTP, demo.Fakes{Timeouts: demotest.ShortTimeouts}))
	assert.Equal(t, demo.Timeouts{ReadHeader: 5e9, Read: 10e9, Write: 15e9, Idle: 15e9}, demo.DefaultTimeouts)
}
