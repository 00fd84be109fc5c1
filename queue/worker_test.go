package queue_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/queue"
)

// paced returns a limiter of 2 requests a second (token bucket, burst 1)
// on clock, and a sleep that moves the clock instead of waiting.
func paced(t *testing.T, clock *storetest.Clock) (*core.Limiter, queue.WorkerOption) {
	t.Helper()
	lim, err := core.NewLimiter(core.Limit{Name: "drain", Algorithm: core.TokenBucket, Rate: core.PerSecond(2), Burst: 1},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}))
	require.NoError(t, err)
	return lim, queue.WithSleep(func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		clock.Advance(d)
		return nil
	})
}

// served is a replayed request as the handler saw it.
type served struct {
	at      time.Duration // since the epoch, on the test clock
	id      string
	attempt int
	method  string
	target  string
	header  http.Header
	body    string
}

// TestWorkerPacesAndReplays: the worker serves the items in order, one
// per half second (the limiter's pace), as requests carrying the item,
// acknowledges them, and stops on ctx's end, leaving the item it was
// serving for another delivery.
func TestWorkerPacesAndReplays(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	lim, sleep := paced(t, clock)
	ctx, cancel := context.WithCancel(context.Background())
	var got []served
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, ok := queue.ItemFrom(r.Context())
		require.True(t, ok)
		body, _ := io.ReadAll(r.Body)
		got = append(got, served{clock.Now().Sub(storetest.Epoch), it.ID, it.Attempt, r.Method, r.URL.RequestURI(), r.Header, string(body)})
		if it.ID == "stop" {
			cancel() // the worker stops while serving this one
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	for _, id := range []string{"a", "b", "c", "stop"} {
		require.NoError(t, q.Push(ctx, item(id, clock)))
	}
	w, err := queue.NewWorker(q, lim, "orders", h, sleep)
	require.NoError(t, err)
	require.NoError(t, w.Run(ctx))

	require.Len(t, got, 4)
	for i, id := range []string{"a", "b", "c", "stop"} {
		assert.Equal(t, id, got[i].id)
		assert.Equal(t, time.Duration(i)*500*time.Millisecond, got[i].at, "item %s at the limiter's pace", id)
		assert.Equal(t, 1, got[i].attempt)
	}
	a := got[0]
	assert.Equal(t, http.MethodPost, a.method)
	assert.Equal(t, "/orders?n=a", a.target)
	assert.Equal(t, `{"n":"a"}`, a.body)
	assert.Equal(t, "application/json", a.header.Get("Content-Type"))
	assert.Equal(t, "a", a.header.Get(queue.HeaderID))
	assert.Equal(t, "1", a.header.Get(queue.HeaderAttempt))

	assert.Equal(t, 1, q.Len(), "a, b, c acknowledged; stop not, its worker stopped")
	clock.Advance(10 * time.Second)
	again, err := q.Receive(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "stop", again.ID)
	assert.Equal(t, 2, again.Attempt)
}

// TestWorkerKilledMidItem: a worker that dies while serving an item
// (its context ends, the handler never finishes) leaves it to another
// worker, which serves it after the visibility timeout.
func TestWorkerKilledMidItem(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	lim, sleep := paced(t, clock)
	require.NoError(t, q.Push(context.Background(), item("order-1", clock)))

	ctxA, killA := context.WithCancel(context.Background())
	started := make(chan struct{})
	a, err := queue.NewWorker(q, lim, "orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // stuck until its worker dies
	}), sleep)
	require.NoError(t, err)
	doneA := make(chan error)
	go func() { doneA <- a.Run(ctxA) }()
	<-started
	killA()
	require.NoError(t, <-doneA)
	require.Equal(t, 1, q.Len(), "the item outlives its worker")

	clock.Advance(10 * time.Second) // the visibility timeout
	ctxB, stopB := context.WithCancel(context.Background())
	var seen []int
	b, err := queue.NewWorker(q, lim, "orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		seen = append(seen, it.Attempt)
		stopB() // after this item; the handler itself succeeded
	}), sleep)
	require.NoError(t, err)
	require.NoError(t, b.Run(ctxB))
	assert.Equal(t, []int{2}, seen, "served by the other worker, second delivery")
}

// TestWorkerRetriesFailures: a panic and a 5xx answer leave the item for
// another delivery; a 4xx is given up at once, logged; WithMaxAttempts
// gives up the others on their last failure, logged with the status.
func TestWorkerRetriesFailures(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 10, PerKey: 10, Visibility: time.Second, Now: clock.Now})
	require.NoError(t, err)
	lim, sleep := paced(t, clock)
	for _, id := range []string{"panics", "fails", "refused", "end"} {
		require.NoError(t, q.Push(context.Background(), item(id, clock)))
		clock.Advance(time.Millisecond)
	}
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	var trace []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		trace = append(trace, it.ID+"#"+r.Header.Get(queue.HeaderAttempt))
		switch it.ID {
		case "panics":
			panic("boom")
		case "fails":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "refused":
			w.WriteHeader(http.StatusBadRequest)
		case "end":
			cancel()
		}
	})
	w, err := queue.NewWorker(q, lim, "orders", h, sleep, queue.WithMaxAttempts(2),
		queue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	require.NoError(t, w.Run(ctx))
	// Half a second per item: the one-second leases of the failed items
	// end, and they come back before the newer ones.
	assert.Equal(t, []string{"panics#1", "fails#1", "panics#2", "fails#2", "refused#1", "end#1"}, trace)
	assert.Equal(t, 2, strings.Count(logs.String(), "panicked"), logs.String())
	assert.Contains(t, logs.String(), `level=ERROR msg="ratekit: queued request given up" id=panics status=0 attempts=2`)
	assert.Contains(t, logs.String(), `level=ERROR msg="ratekit: queued request given up" id=fails status=503 attempts=2`)
	assert.Contains(t, logs.String(), `level=WARN msg="ratekit: queued request refused by the handler; given up" id=refused status=400 attempts=1`)
	assert.Equal(t, queue.Stats{Refused: 1, GivenUp: 2, Retried: 3}, w.Stats(), "end's delivery is retried: its worker stopped")
	assert.Equal(t, 1, q.Len(), "end stays, its worker stopped; the others are acknowledged")
}

func TestNewWorkerBadInput(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 1, clock)
	lim, _ := paced(t, clock)
	h := http.NotFoundHandler()
	for _, tc := range []struct {
		q   queue.Queue
		lim *core.Limiter
		key string
		h   http.Handler
		o   queue.WorkerOption
	}{
		{nil, lim, "k", h, nil}, {q, nil, "k", h, nil}, {q, lim, "", h, nil}, {q, lim, "k", nil, nil},
		{q, lim, "k", h, queue.WithMaxAttempts(-1)}, {q, lim, "k", h, queue.WithMaxAttempts(0)},
		{q, lim, "k", h, queue.WithMaxAttempts(queue.MaxMaxAttempts + 1)}, {q, lim, "k", h, queue.WithDeadLetter(nil)}, {q, lim, "k", h, queue.WithLogger(nil)}, {q, lim, "k", h, queue.WithSleep(nil)},
	} {
		var opts []queue.WorkerOption
		if tc.o != nil {
			opts = append(opts, tc.o)
		}
		_, err := queue.NewWorker(tc.q, tc.lim, tc.key, tc.h, opts...)
		assert.Error(t, err)
	}
}

// TestWorkerLater: a handler that answers 429 or 408 asks for the item
// later, so it is delivered again, as after a 5xx.
func TestWorkerLater(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	// Leases shorter than the pace: an item not acknowledged is back by
	// the worker's next turn.
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 10, PerKey: 10, Visibility: 400 * time.Millisecond, Now: clock.Now})
	require.NoError(t, err)
	lim, sleep := paced(t, clock)
	for _, id := range []string{"busy", "slow", "end"} {
		require.NoError(t, q.Push(context.Background(), item(id, clock)))
		clock.Advance(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var trace []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		trace = append(trace, it.ID+"#"+r.Header.Get(queue.HeaderAttempt))
		switch {
		case it.ID == "busy" && it.Attempt == 1:
			w.WriteHeader(http.StatusTooManyRequests)
		case it.ID == "slow" && it.Attempt == 1:
			w.WriteHeader(http.StatusRequestTimeout)
		case it.ID == "end" && it.Attempt == 2:
			cancel()
		case it.ID == "end":
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	w, err := queue.NewWorker(q, lim, "orders", h, sleep)
	require.NoError(t, err)
	require.NoError(t, w.Run(ctx))
	slices.Sort(trace)
	assert.Equal(t, []string{"busy#1", "busy#2", "end#1", "end#2", "slow#1", "slow#2"}, trace)
	assert.Equal(t, 1, q.Len(), "busy and slow acknowledged on their second delivery; end's worker stopped")
}

// TestWorkerTargetIsAPath: a target is replayed as the path of a request
// line, so "//host/path" reaches the handler as that path, with no host,
// as the original request did.
func TestWorkerTargetIsAPath(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 10, PerKey: 10, Visibility: time.Second, Now: clock.Now})
	require.NoError(t, err)
	lim, sleep := paced(t, clock)
	it := item("a", clock)
	it.Target = "//evil.example/admin/purge?x=1"
	require.NoError(t, q.Push(context.Background(), it))
	ctx, cancel := context.WithCancel(context.Background())
	var path, host, query, uri string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, host, query, uri = r.URL.Path, r.URL.Host+r.Host, r.URL.RawQuery, r.RequestURI
		cancel()
	})
	w, err := queue.NewWorker(q, lim, "orders", h, sleep)
	require.NoError(t, err)
	require.NoError(t, w.Run(ctx))
	assert.Equal(t, "//evil.example/admin/purge", path)
	assert.Equal(t, "", host)
	assert.Equal(t, "x=1", query)
	assert.Equal(t, "//evil.example/admin/purge?x=1", uri)
}
