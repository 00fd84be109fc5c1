package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// order posts an order to the demo.
func (d *demo) order(body string) response {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.base+"/orders", strings.NewReader(body))
	require.NoError(d.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// checkOrders: two orders a second are placed at once, the next one is
// queued with an ID and placed by the worker, which logs it; a body over
// the bound is refused with 413.
func checkOrders(t *testing.T, d *demo) {
	t.Helper()
	for i := range 2 {
		r := d.order(`{"item":"tea"}`)
		require.Equal(t, http.StatusCreated, r.status, "order %d: %s", i, r.body)
		assert.Equal(t, placed, r.body)
	}
	r := d.order(`{"item":"cake"}`)
	require.Equal(t, http.StatusAccepted, r.status, r.body)
	var reply struct{ ID, Status string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &reply), r.body)
	assert.Equal(t, "queued", reply.Status)
	assert.Equal(t, reply.ID, r.header.Get(queue.HeaderID))
	assert.Empty(t, r.header.Get("Retry-After"), "a queued order is not to be retried")
	assert.Equal(t, "0", r.header.Get("X-Ratelimit-Remaining"))

	// Waiting for the worker's log line, not timing it.
	line := `msg="demo: queued order placed" id=` + reply.ID + " attempt=1"
	require.Eventually(t, func() bool { return strings.Contains(d.stderr.String(), line) }, 5*time.Second, 5*time.Millisecond,
		"the worker places the queued order:\n%s", d.stderr.String())
	assert.Contains(t, d.stderr.String(), "bytes=15")

	big := d.order(strings.Repeat("x", ordersMaxBody+1))
	assert.Equal(t, http.StatusRequestEntityTooLarge, big.status, big.body)
	assert.Empty(t, big.header.Get(queue.HeaderID))
}

func TestOrdersQueued(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			checkOrders(t, start(t, "-framework", fw))
		})
	}
}

// TestOrdersQueuedInRedis: with -store redis the queue is a Redis stream,
// which another demo server's worker may drain as well.
func TestOrdersQueuedInRedis(t *testing.T) {
	srv := redistest.Start(t)
	d := start(t, "-store", "redis", "-redis", "redis://"+srv.Addr()+"/0", "-redis-prefix", "demo-orders")
	checkOrders(t, d)
	n, err := srv.Client(t).Exists(t.Context(), "demo-orders:q:{orders}").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the stream of the queue")
	d.client.CloseIdleConnections()
}
