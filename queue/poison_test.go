package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/queue"
)

// dead is a dead-letter handler that keeps what it is given.
type dead struct {
	items []string
	why   []queue.Reason
}

func (d *dead) letter(_ context.Context, it *queue.Item, why queue.Reason) {
	d.items = append(d.items, it.ID)
	d.why = append(d.why, why)
}

// TestWorkerPoisonGivenUpFairly: the audit's case. 19 items that the
// handler answers 500 and, pushed after them, one item of another client.
// By default each poison item is given up after 5 deliveries, logged
// with its ID and the status, and handed to the dead-letter handler; the
// other client's item is served on the second turn, not behind the
// retries. Before, the first poison item was delivered again and again
// ahead of everything (WithMaxAttempts defaulted to never), with no log
// line.
func TestWorkerPoisonGivenUpFairly(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	// Leases shorter than the pace: an item not acknowledged is back by
	// the worker's next turn.
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 20, PerKey: 20, Visibility: 400 * time.Millisecond, Now: clock.Now})
	require.NoError(t, err)
	lim, sleep := paced(t, clock)
	for n := range 19 {
		it := item(fmt.Sprintf("p%d", n), clock)
		it.Key = "poison"
		require.NoError(t, q.Push(context.Background(), it))
		clock.Advance(time.Millisecond)
	}
	good := item("g0", clock)
	good.Key = "good"
	require.NoError(t, q.Push(context.Background(), good))

	var logs bytes.Buffer
	var dl dead
	ctx, cancel := context.WithCancel(context.Background())
	var trace []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		trace = append(trace, it.ID+"#"+r.Header.Get(queue.HeaderAttempt))
		if len(trace) >= 200 { // never on this code: 96 deliveries
			cancel()
		}
		if it.Key == "poison" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	w, err := queue.NewWorker(q, lim, "orders", h, sleep, queue.WithDeadLetter(dl.letter),
		queue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	go stopWhenEmpty(ctx, cancel, q)
	require.NoError(t, w.Run(ctx))

	require.GreaterOrEqual(t, len(trace), 7, trace)
	assert.Equal(t, []string{"p0#1", "g0#1", "p0#2", "p0#3", "p0#4", "p0#5", "p1#1"}, trace[:7],
		"the other client's item on the second turn; a poison item given up after 5 deliveries")
	assert.Len(t, trace, 19*5+1)
	assert.Equal(t, 0, q.Len(), "nothing left in the queue")
	require.Len(t, dl.items, 19)
	for n, id := range dl.items {
		assert.Equal(t, fmt.Sprintf("p%d", n), id)
		assert.Equal(t, queue.Reason{Status: http.StatusInternalServerError, Attempts: 5}, dl.why[n])
		assert.Contains(t, logs.String(), `level=ERROR msg="ratekit: queued request given up" id=`+id+` status=500 attempts=5`)
	}
	assert.Equal(t, 19, strings.Count(logs.String(), "given up"), logs.String())
	assert.Equal(t, queue.Stats{Served: 1, GivenUp: 19, Retried: 19 * 4}, w.Stats())
}

// TestWorkerRefusedReplayNotSilent: a replay the handler refuses with a
// 4xx other than 408 and 429 (here 401: the replay carries no
// credentials) is given up at once, never acknowledged silently: logged
// with its ID and status, counted, handed to the dead-letter handler.
func TestWorkerRefusedReplayNotSilent(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	lim, sleep := paced(t, clock)
	for _, id := range []string{"anonymous", "forbidden", "fine"} {
		it := item(id, clock)
		it.Key = id
		require.NoError(t, q.Push(context.Background(), it))
	}
	var logs bytes.Buffer
	var dl dead
	ctx, cancel := context.WithCancel(context.Background())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		switch it.ID {
		case "anonymous":
			w.WriteHeader(http.StatusUnauthorized)
		case "forbidden":
			w.WriteHeader(http.StatusForbidden)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	})
	w, err := queue.NewWorker(q, lim, "orders", h, sleep, queue.WithDeadLetter(dl.letter),
		queue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	go stopWhenEmpty(ctx, cancel, q)
	require.NoError(t, w.Run(ctx))
	assert.Equal(t, []string{"anonymous", "forbidden"}, dl.items)
	assert.Equal(t, []queue.Reason{{Status: 401, Attempts: 1, Refused: true}, {Status: 403, Attempts: 1, Refused: true}}, dl.why)
	assert.Contains(t, logs.String(), `level=WARN msg="ratekit: queued request refused by the handler; given up" id=anonymous status=401 attempts=1`)
	assert.Contains(t, logs.String(), `id=forbidden status=403`)
	assert.Equal(t, queue.Stats{Served: 1, Refused: 2}, w.Stats())
	assert.Equal(t, 0, q.Len())
}

// TestWorkerGivesUpAfterDeath: an item whose workers died on every
// delivery (no answer) is given up on the delivery after the last, with
// status 0, without reaching the handler again.
func TestWorkerGivesUpAfterDeath(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	ctx := context.Background()
	require.NoError(t, q.Push(ctx, item("stuck", clock)))
	for range 2 { // two deliveries whose workers died
		_, err := q.Receive(ctx)
		require.NoError(t, err)
		clock.Advance(11 * time.Second)
	}
	lim, sleep := paced(t, clock)
	var dl dead
	var logs bytes.Buffer
	wctx, cancel := context.WithCancel(ctx)
	served := 0
	w, err := queue.NewWorker(q, lim, "orders", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }), sleep,
		queue.WithMaxAttempts(2), queue.WithDeadLetter(func(ctx context.Context, it *queue.Item, why queue.Reason) {
			dl.letter(ctx, it, why)
			cancel()
			panic("the dead-letter handler's own bug")
		}), queue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	require.NoError(t, w.Run(wctx))
	assert.Equal(t, 0, served)
	assert.Equal(t, []queue.Reason{{Attempts: 2}}, dl.why)
	assert.Equal(t, "attempts exhausted (2), the last without an answer", dl.why[0].String())
	assert.Contains(t, logs.String(), "dead-letter handler panicked")
	assert.Equal(t, 0, q.Len(), "acknowledged after the dead-letter handler")
}

// stopWhenEmpty calls cancel once q is empty: the test's goroutine polls
// it, while the worker runs on the test clock.
func stopWhenEmpty(ctx context.Context, cancel func(), q *queue.Memory) {
	for q.Len() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	cancel()
}
