// Package queuetest checks that a ratekit middleware queues rejected
// requests through its WithQueue option as package queue says, so that
// every adapter is held to the same test.
package queuetest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
)

// Serve serves one request through the app under test.
type Serve func(r *http.Request) *http.Response

// Run checks an adapter's WithQueue. app returns an app whose middleware
// decides every request by lim, under one key for all, answers the
// rejected ones with WithQueue(offer), and passes the others to a
// handler that answers 200 to POST /orders.
//
// The offer keeps the field Content-Type and bodies of up to 16 bytes,
// in a memory queue of two items. The limit admits one request a minute.
func Run(t *testing.T, app func(t *testing.T, lim *core.Limiter, offer *queue.Offer) Serve) {
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 2})
	require.NoError(t, err)
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type"}, MaxBody: 16})
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: "orders", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	require.NoError(t, err)
	serve := app(t, lim, offer)
	post := func(body string) (*http.Response, string) {
		r := httptest.NewRequest(http.MethodPost, "/orders?item=7", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer secret")
		res := serve(r)
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res, string(b)
	}

	res, _ := post(`{"n":1}`)
	require.Equal(t, http.StatusOK, res.StatusCode, "the first request passes")

	res, body := post(`{"n":2}`)
	require.Equal(t, http.StatusAccepted, res.StatusCode, "a rejected request is queued: %s", body)
	id := res.Header.Get(queue.HeaderID)
	assert.Regexp(t, "^[0-9a-f]{32}$", id)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	assert.Empty(t, res.Header.Get(answer.HeaderRetryAfter), "not to be retried")
	var reply struct{ ID, Status string }
	require.NoError(t, json.Unmarshal([]byte(body), &reply))
	assert.Equal(t, id, reply.ID)
	assert.Equal(t, "queued", reply.Status)

	res, body = post(strings.Repeat("x", 17))
	assert.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, "a body over the bound is not queued: %s", body)

	res, _ = post(`{"n":3}`)
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	res, body = post(`{"n":4}`)
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a full queue answers as before")
	assert.NotEmpty(t, res.Header.Get(answer.HeaderRetryAfter))
	assert.Contains(t, body, "quota-exceeded")

	it, err := q.Receive(context.Background())
	require.NoError(t, err)
	assert.Equal(t, id, it.ID)
	assert.Equal(t, http.MethodPost, it.Method)
	assert.Equal(t, "/orders?item=7", it.Target)
	assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, it.Header, "only the allowlist")
	assert.Equal(t, `{"n":2}`, string(it.Body))
}
