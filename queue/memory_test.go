package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/queue"
)

func newMemory(t *testing.T, capacity int, clock *storetest.Clock) *queue.Memory {
	t.Helper()
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: capacity, PerKey: capacity, Visibility: 10 * time.Second, Now: clock.Now})
	require.NoError(t, err)
	return q
}

func item(id string, clock *storetest.Clock) *queue.Item {
	return &queue.Item{ID: id, Method: http.MethodPost, Target: "/orders?n=" + id,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"n":"` + id + `"}`), Enqueued: clock.Now()}
}

func TestMemoryOrderCapacityAck(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 2, clock)
	require.NoError(t, q.Push(ctx, item("a", clock)))
	clock.Advance(time.Millisecond)
	require.NoError(t, q.Push(ctx, item("b", clock)))
	assert.ErrorIs(t, q.Push(ctx, item("c", clock)), queue.ErrFull, "two items fill a queue of capacity 2")
	assert.Error(t, q.Push(ctx, &queue.Item{}), "an item needs an ID")

	a, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", a.ID)
	assert.Equal(t, 1, a.Attempt)
	assert.Equal(t, "/orders?n=a", a.Target)
	assert.Equal(t, `{"n":"a"}`, string(a.Body))
	assert.ErrorIs(t, q.Push(ctx, item("c", clock)), queue.ErrFull, "a leased item still takes its place")
	require.NoError(t, q.Ack(ctx, a))
	require.NoError(t, q.Ack(ctx, a), "a second ack is not an error")
	require.NoError(t, q.Push(ctx, item("c", clock)), "an acknowledged item frees its place")

	b, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", b.ID)
	b.Body[0] = 'X' // the caller's copy
	c, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "c", c.ID)
	assert.Equal(t, 2, q.Len())
}

func TestMemoryRedeliversAfterVisibility(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	require.NoError(t, q.Push(ctx, item("a", clock)))
	clock.Advance(time.Millisecond)
	require.NoError(t, q.Push(ctx, item("b", clock)))
	first, err := q.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", first.ID)
	first.Body[0] = 'X'

	clock.Advance(10*time.Second - time.Nanosecond)
	next, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", next.ID, "a is still leased")

	clock.Advance(time.Nanosecond)
	again, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", again.ID, "a's lease ended: delivered again, before newer items")
	assert.Equal(t, 2, again.Attempt)
	assert.Equal(t, `{"n":"a"}`, string(again.Body), "the first delivery's changes stay its own")

	// A late ack of the first delivery removes the item: at least once.
	require.NoError(t, q.Ack(ctx, first))
	assert.Equal(t, 1, q.Len())
}

func TestMemoryReceiveWaits(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	got := make(chan *queue.Item)
	go func() {
		it, err := q.Receive(context.Background())
		assert.NoError(t, err)
		got <- it
	}()
	require.NoError(t, q.Push(context.Background(), item("a", clock)))
	assert.Equal(t, "a", (<-got).ID, "a waiting receiver gets the pushed item")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := q.Receive(ctx)
		done <- err
	}()
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestMemoryOptionsOutOfRange(t *testing.T) {
	for _, o := range []queue.MemoryOptions{
		{},
		{Capacity: -1},
		{Capacity: queue.MaxMemoryCapacity + 1},
		{Capacity: 1, Visibility: -time.Second},
		{Capacity: 1, Visibility: 25 * time.Hour},
	} {
		_, err := queue.NewMemory(o)
		assert.Error(t, err, fmt.Sprintf("%+v", o))
	}
}

// TestMemoryConcurrent: under -race, many pushers and receivers meet no
// data race, and every item is delivered.
func TestMemoryConcurrent(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 1000, clock)
	ctx := context.Background()
	const n = 200
	for w := range 4 {
		go func() {
			for i := range n / 4 {
				assert.NoError(t, q.Push(ctx, item(fmt.Sprint(w, "-", i), clock)))
			}
		}()
	}
	seen := make(chan string, n)
	for range 4 {
		go func() {
			for range n / 4 {
				it, err := q.Receive(ctx)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, q.Ack(ctx, it))
				seen <- it.ID
			}
		}()
	}
	ids := map[string]bool{}
	for range n {
		ids[<-seen] = true
	}
	assert.Len(t, ids, n)
	assert.Equal(t, 0, q.Len())
}

// TestMemoryWaitingReceiverSeesLeaseEnd: a receiver that waits while an
// item is leased gets it once the lease ends, without a push to wake it.
func TestMemoryWaitingReceiverSeesLeaseEnd(t *testing.T) {
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 1, Visibility: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Push(ctx, &queue.Item{ID: "a", Method: http.MethodPost, Target: "/"}))
	first, err := q.Receive(ctx) // and never acknowledged
	require.NoError(t, err)
	again, err := q.Receive(ctx) // waits for the lease to end
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, 2, again.Attempt)
}
