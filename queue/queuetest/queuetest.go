// Package queuetest holds the tests that package queue's promises are
// checked by: Backend, for a Queue (queue.NewMemory, redisstore.NewQueue),
// so that every backend is held to the same bounds and order; and Run,
// for a ratekit middleware's WithQueue option.
package queuetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 2, PerKey: 2})
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

// A New returns an empty queue of the backend under test that holds at
// most capacity items, at most perKey of one key, and leases an item for
// visibility.
type New func(t *testing.T, capacity, perKey int, visibility time.Duration) queue.Queue

// Backend checks a Queue against package queue's promises:
//
//   - bounds: a key past its share is refused with ErrKeyFull while other
//     keys are taken; a full queue refuses with ErrFull; an acknowledged
//     item frees its place, in its key's share and in the queue;
//   - order: the keys are served in turn, each key's items in the order
//     pushed, so that a key's backlog delays another key's item by at
//     most one item of each key waiting (a hand-computed trace);
//   - redelivery: an item not acknowledged is delivered again after the
//     visibility timeout, with its Attempt counted, and meanwhile the
//     other items are served.
//
// The redelivery check waits for a lease of visibility 50 ms to end, on
// the backend's own clock.
func Backend(t *testing.T, newQueue New) {
	t.Run("shares", func(t *testing.T) { backendShares(t, newQueue(t, 5, 2, time.Minute)) })
	t.Run("turns", func(t *testing.T) { backendTurns(t, newQueue(t, 20, 10, time.Minute)) })
	t.Run("redelivery", func(t *testing.T) { backendRedelivery(t, newQueue(t, 20, 10, 50*time.Millisecond)) })
}

// pushed is an item of key, numbered n in its key.
func pushed(key string, n int) *queue.Item {
	return &queue.Item{ID: fmt.Sprintf("%s-%d-%d", key, n, time.Now().UnixNano()), Key: key, Method: http.MethodPost,
		Target: fmt.Sprintf("/orders?n=%d", n), Body: []byte(key), Enqueued: time.Now()}
}

// name is the name of it in a trace: its key, its number and its attempt.
func name(it *queue.Item) string {
	_, n, _ := strings.Cut(it.Target, "=")
	return fmt.Sprintf("%s%s#%d", it.Key, n, it.Attempt)
}

// receive receives one item within 5 s.
func receive(t *testing.T, q queue.Queue) *queue.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	it, err := q.Receive(ctx)
	require.NoError(t, err)
	return it
}

func backendShares(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	var flood []*queue.Item
	for n := range 2 {
		it := pushed("flood", n)
		require.NoError(t, q.Push(ctx, it), "flood's item %d, within its share", n)
		flood = append(flood, it)
	}
	for n := range 3 {
		err := q.Push(ctx, pushed("flood", 2+n))
		require.True(t, errors.Is(err, queue.ErrKeyFull), "flood past its share of 2: %v", err)
	}
	require.NoError(t, q.Push(ctx, pushed("calm", 0)), "another key keeps its room")
	require.NoError(t, q.Push(ctx, pushed("", 0)), "the empty key is a key")
	require.NoError(t, q.Push(ctx, pushed("late", 0)))
	err := q.Push(ctx, pushed("newcomer", 0))
	require.True(t, errors.Is(err, queue.ErrFull), "5 items fill a queue of capacity 5: %v", err)

	first := receive(t, q)
	assert.Equal(t, flood[0].ID, first.ID)
	assert.Equal(t, "flood", first.Key, "the key comes back")
	assert.Equal(t, []byte("flood"), first.Body)
	err = q.Push(ctx, pushed("flood", 9))
	require.True(t, errors.Is(err, queue.ErrFull), "a leased item keeps its place: %v", err)
	require.NoError(t, q.Ack(ctx, first))
	require.NoError(t, q.Ack(ctx, first), "a second ack is not an error")
	require.NoError(t, q.Push(ctx, pushed("flood", 9)), "an acknowledged item frees its place in its key's share")
	err = q.Push(ctx, pushed("flood", 10))
	require.True(t, errors.Is(err, queue.ErrFull), "and in the queue: %v", err)
}

func backendTurns(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	// a floods with 5 items, then b and c push 2 each, then a 1 more.
	for n := range 5 {
		require.NoError(t, q.Push(ctx, pushed("a", n)))
	}
	for n := range 2 {
		require.NoError(t, q.Push(ctx, pushed("b", n)))
		require.NoError(t, q.Push(ctx, pushed("c", n)))
	}
	var trace []string
	for range 4 {
		it := receive(t, q)
		trace = append(trace, name(it))
		require.NoError(t, q.Ack(ctx, it))
	}
	// The turn is a, b, c: b and c joined it behind a, in that order.
	assert.Equal(t, []string{"a0#1", "b0#1", "c0#1", "a1#1"}, trace, "served in turn, not in the order pushed")
	require.NoError(t, q.Push(ctx, pushed("d", 0))) // joins the turn at its back: b, c, a, d
	for range 6 {
		it := receive(t, q)
		trace = append(trace, name(it))
		require.NoError(t, q.Ack(ctx, it))
	}
	assert.Equal(t, []string{"a0#1", "b0#1", "c0#1", "a1#1", "b1#1", "c1#1", "a2#1", "d0#1", "a3#1", "a4#1"}, trace)
}

func backendRedelivery(t *testing.T, q queue.Queue) {
	ctx := context.Background()
	require.NoError(t, q.Push(ctx, pushed("a", 0)))
	require.NoError(t, q.Push(ctx, pushed("a", 1)))
	require.NoError(t, q.Push(ctx, pushed("b", 0)))
	leased := time.Now()
	lost := receive(t, q) // a0, never acknowledged: its worker died
	assert.Equal(t, "a0#1", name(lost))
	var trace []string
	for range 2 {
		it := receive(t, q)
		trace = append(trace, name(it))
		require.NoError(t, q.Ack(ctx, it))
	}
	assert.Equal(t, []string{"b0#1", "a1#1"}, trace)
	require.NoError(t, q.Push(ctx, pushed("b", 1)))
	// b1 is served at once, a0's lease running; then a0 once its lease
	// ends (Receive waits for it, at most 5 s), with its second attempt.
	for range 2 {
		it := receive(t, q)
		trace = append(trace, name(it))
		require.NoError(t, q.Ack(ctx, it))
	}
	assert.Equal(t, []string{"b0#1", "a1#1", "b1#1", "a0#2"}, trace)
	assert.GreaterOrEqual(t, time.Since(leased), 50*time.Millisecond, "not before the visibility timeout")
}
