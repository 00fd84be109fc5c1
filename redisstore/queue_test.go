package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/internal/testenv"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/stdhttp"
)

// fastClient returns a client of srv that fails at once while srv is
// down (no retries) and applies context deadlines.
func fastClient(t *testing.T, srv *redistest.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newQueue(t *testing.T, rdb redis.UniversalClient, o redisstore.QueueOptions) *redisstore.Queue {
	t.Helper()
	q, err := redisstore.NewQueue(rdb, "orders", o)
	require.NoError(t, err)
	return q
}

// front returns a handler that admits one request a minute and queues the
// others through offer.
func front(t *testing.T, offer *queue.Offer) http.Handler {
	// A stopped clock: on the system clock, a test that crossed a minute
	// boundary found the window new and its requests admitted.
	clock := storetest.NewClock(storetest.Epoch)
	lim, err := core.NewLimiter(core.Limit{Name: "orders", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}))
	require.NoError(t, err)
	return stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithQueue(offer))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
}

func postOrder(h http.Handler, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders?from={evil}:*", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Cookie", "session=secret")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestQueueRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	q := newQueue(t, rdb, redisstore.QueueOptions{MaxLen: 10})
	at := time.Unix(1700000000, 123456789)
	in := &queue.Item{ID: "0123456789abcdef0123456789abcdef", Key: "{evil}:*\x00 key", Method: http.MethodPut, Target: "/orders/7?x=1",
		Header: http.Header{"Content-Type": {"application/json"}, "X-Two": {"a", "b"}}, Body: []byte("{\"n\":7}\x00\xff"), Enqueued: at}
	require.NoError(t, q.Push(ctx, in))
	n, err := q.Len(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	out, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, in.ID, out.ID)
	assert.Equal(t, in.Method, out.Method)
	assert.Equal(t, in.Target, out.Target)
	assert.Equal(t, in.Header, out.Header)
	assert.Equal(t, in.Body, out.Body, "binary bodies survive")
	assert.Equal(t, in.Key, out.Key)
	assert.True(t, at.Equal(out.Enqueued))
	assert.Equal(t, 1, out.Attempt)
	assert.NotEmpty(t, out.Receipt)

	require.NoError(t, q.Ack(ctx, out))
	require.NoError(t, q.Ack(ctx, out), "a second ack is not an error")
	n, err = q.Len(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, n, "acknowledged items are deleted: the queue stays bounded")
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"rk:q:{orders}:s"}, keys, "only the token of a push: an empty queue takes no memory")
}

// TestQueueBackend: the Redis queue bounds each key's share and serves
// the keys in turn, as the memory queue does (queuetest.Backend).
func TestQueueBackend(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	queuetest.Backend(t, func(t *testing.T, capacity, perKey int, visibility time.Duration) queue.Queue {
		n++
		q, err := redisstore.NewQueue(srv.Client(t), fmt.Sprint("backend-", n), redisstore.QueueOptions{MaxLen: capacity, PerKey: perKey, Visibility: visibility})
		require.NoError(t, err)
		return q
	})
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		assert.NotContains(t, k, "flood", "client keys are hashed in key names")
	}
}

// TestQueueFullAnswers429: a full queue refuses the item (the request is
// answered 429 as before) and trims none of those waiting.
func TestQueueFullAnswers429(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	q := newQueue(t, rdb, redisstore.QueueOptions{MaxLen: 2, PerKey: 2})
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type"}, MaxBody: 1024, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	h := front(t, offer)

	assert.Equal(t, http.StatusCreated, postOrder(h, "first").Code)
	var ids []string
	for _, body := range []string{"a", "b"} {
		w := postOrder(h, body)
		require.Equal(t, http.StatusAccepted, w.Code)
		ids = append(ids, w.Header().Get(queue.HeaderID))
	}
	w := postOrder(h, "c")
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "full: 429 as before")
	assert.NotEmpty(t, w.Header().Get("Retry-After"))

	w = postOrder(h, strings.Repeat("x", 1025))
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code, "a body over the bound is not queued")

	for _, id := range ids {
		it, err := q.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, id, it.ID, "no waiting item was trimmed")
		assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, it.Header, "only the allowlist is kept")
		assert.Equal(t, "/orders?from={evil}:*", it.Target)
		require.NoError(t, q.Ack(ctx, it))
	}
	assert.Equal(t, http.StatusAccepted, postOrder(h, "d").Code, "room again")
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, "rk:q:{orders}:"), k)
		assert.NotContains(t, k, "192.0.2", "no client text in key names")
	}
}

// TestQueueWorkerKilledMidItem: a worker dies while serving an item (its
// context ends before the handler returns, so it never acknowledges); a
// worker of another process claims the item once it has been idle for the
// visibility timeout, and serves it.
func TestQueueWorkerKilledMidItem(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const visibility = 300 * time.Millisecond
	qa := newQueue(t, srv.Client(t), redisstore.QueueOptions{MaxLen: 10, Visibility: visibility})
	qb := newQueue(t, srv.Client(t), redisstore.QueueOptions{MaxLen: 10, Visibility: visibility})
	pace := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(100)}))
	require.NoError(t, qa.Push(ctx, &queue.Item{ID: "order-1", Method: http.MethodPost, Target: "/orders", Body: []byte("1"), Enqueued: time.Now()}))

	ctxA, killA := context.WithCancel(ctx)
	started := make(chan struct{})
	a, err := queue.NewWorker(qa, pace, "drain", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // stuck until its worker dies
	}))
	require.NoError(t, err)
	doneA := make(chan error)
	before := time.Now() // before A receives the item: a lower bound of its lease's start
	go func() { doneA <- a.Run(ctxA) }()
	<-started
	killA()
	require.NoError(t, <-doneA)

	ctxB, stopB := context.WithCancel(ctx)
	defer stopB()
	type served struct {
		id      string
		attempt int
		at      time.Time
	}
	got := make(chan served, 1)
	b, err := queue.NewWorker(qb, pace, "drain", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		got <- served{it.ID, it.Attempt, time.Now()}
	}))
	require.NoError(t, err)
	doneB := make(chan error)
	go func() { doneB <- b.Run(ctxB) }()
	s := <-got
	assert.Equal(t, "order-1", s.id)
	assert.Equal(t, 2, s.attempt, "the second delivery")
	assert.GreaterOrEqual(t, s.at.Sub(before), visibility, "not before the visibility timeout")

	// B acknowledges it: the queue empties.
	require.Eventually(t, func() bool { n, err := qb.Len(ctx); return err == nil && n == 0 }, 5*time.Second, 5*time.Millisecond)
	stopB()
	require.NoError(t, <-doneB)
}

// TestQueueRedisDown: while Redis is down, a rejected request is answered
// 429 as without a queue, logged once for the episode; the worker waits,
// and serves again once Redis is back (empty).
func TestQueueRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := fastClient(t, srv)
	ctx := context.Background()
	q := newQueue(t, rdb, redisstore.QueueOptions{MaxLen: 10, Visibility: time.Second})
	var logs testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	offer, err := queue.NewOffer(q, queue.Options{Logger: log, Timeout: time.Second})
	require.NoError(t, err)
	h := front(t, offer)
	require.Equal(t, http.StatusCreated, postOrder(h, "first").Code)

	pace := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(100)}))
	got := make(chan string, 1)
	worker, err := queue.NewWorker(q, pace, "drain", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, _ := queue.ItemFrom(r.Context())
		got <- it.ID
	}), queue.WithLogger(log))
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(wctx) }()

	srv.Stop(t)
	for range 5 {
		w := postOrder(h, "while down")
		assert.Equal(t, http.StatusTooManyRequests, w.Code, "Redis down: the rejection as without a queue")
		assert.Empty(t, w.Header().Get(queue.HeaderID))
		assert.Contains(t, w.Body.String(), "quota-exceeded")
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "queue failing; rejected requests"), logs.String())

	srv.Restart(t)
	var id string
	for id == "" { // the first pushes after a restart may meet broken connections
		w := postOrder(h, "after")
		if w.Code == http.StatusAccepted {
			id = w.Header().Get(queue.HeaderID)
		}
	}
	assert.Equal(t, id, <-got, "the worker serves again")
	assert.Contains(t, logs.String(), "queue takes requests again")
	stop()
	require.NoError(t, <-done)
}

// TestQueueItemBytes: an item is kept byte for byte, in about its own
// size. The fields of a hostile client: a header field of 16,000 bytes of
// '<' and one of 16,000 bytes over 0x7F (obs-text, which HTTP allows),
// a target with such a byte, and a body of 64 KiB. Before, the item was
// JSON: each of those header bytes took 6 bytes in Redis, the body 4 of
// every 3 (183,458 bytes for 97,536 of item), and each byte over 0x7F came
// back as U+FFFD, so the replay's fields were not the client's.
func TestQueueItemBytes(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	q := newQueue(t, rdb, redisstore.QueueOptions{MaxLen: 10})
	in := &queue.Item{ID: "hostile", Key: "k\x80", Method: http.MethodPost, Target: "/orders?n=\xe9",
		Header: http.Header{"X-Html": {strings.Repeat("<", 16000)}, "X-High": {strings.Repeat("\x80", 16000)}, "X-None": {}},
		Body:   []byte(strings.Repeat("b", 64<<10)), Enqueued: time.Unix(1700000000, 1)}
	require.NoError(t, q.Push(ctx, in))
	size, err := rdb.HStrLen(ctx, "rk:q:{orders}:i", in.ID).Result()
	require.NoError(t, err)
	content := len(in.Key) + len(in.Method) + len(in.Target) + 2*16000 + 3*len("X-Html") + len(in.Body)
	assert.LessOrEqual(t, int(size), content+32, "%d bytes kept for %d of item", size, content)

	out, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, in.Key, out.Key)
	assert.Equal(t, in.Target, out.Target)
	assert.Len(t, out.Header, len(in.Header))
	for name, vs := range in.Header {
		assert.True(t, slices.Equal(vs, out.Header[name]), "every byte of %s", name)
	}
	assert.True(t, bytes.Equal(in.Body, out.Body), "every byte of the body")
	assert.True(t, in.Enqueued.Equal(out.Enqueued))

	// An item written by something else (here, cut short) comes out as
	// one the worker cannot read: answered 400 and given up, logged.
	require.NoError(t, q.Push(ctx, &queue.Item{ID: "cut", Key: "k", Method: http.MethodPost, Target: "/orders"}))
	require.NoError(t, rdb.HSet(ctx, "rk:q:{orders}:i", "cut", "\x01\x05ab").Err())
	out, err = q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "cut", out.ID)
	assert.Equal(t, "?unreadable", out.Target)
}

// TestQueueShortReadTimeout: Receive waits for a push on a client whose
// ReadTimeout (200 ms) is shorter than the wait's usual second. Before,
// each wait on an empty queue ended in an i/o timeout: Receive failed (the
// worker logged a failing queue whenever it had nothing to do) and go-redis
// closed the connection.
func TestQueueShortReadTimeout(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	q := newQueue(t, rdb, redisstore.QueueOptions{MaxLen: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // go-redis gives up after 4 tries of 200 ms
	defer cancel()
	_, err := q.Receive(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "an empty queue: Receive waits until ctx ends")

	got := make(chan *queue.Item, 1)
	go func() {
		it, err := q.Receive(context.Background())
		assert.NoError(t, err)
		got <- it
	}()
	require.NoError(t, q.Push(context.Background(), &queue.Item{ID: "late", Key: "k", Method: http.MethodPost, Target: "/orders"}))
	assert.Equal(t, "late", (<-got).ID, "and takes the item pushed meanwhile")
}

// TestQueueCluster: the queue on a three-node Redis Cluster. Its scripts
// reach a client's list of items by a name made in the script, not passed
// in KEYS; the name has the queue's hash tag, so it is in the slot of the
// keys passed, which Redis allows for a script without flags.
func TestQueueCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)
	n := 0
	queuetest.Backend(t, func(t *testing.T, capacity, perKey int, visibility time.Duration) queue.Queue {
		n++
		return newQueue(t, rdb, redisstore.QueueOptions{MaxLen: capacity, PerKey: perKey, Visibility: visibility,
			Prefix: fmt.Sprint("c", n)})
	})
}

func TestNewQueueBadInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	_, err := redisstore.NewQueue(nil, "orders", redisstore.QueueOptions{MaxLen: 1})
	assert.Error(t, err)
	for _, name := range []string{"", "a b", "{x}", strings.Repeat("a", 65)} {
		_, err := redisstore.NewQueue(rdb, name, redisstore.QueueOptions{MaxLen: 1})
		assert.Error(t, err, name)
	}
	for _, o := range []redisstore.QueueOptions{
		{},
		{MaxLen: redisstore.MaxQueueLen + 1},
		{MaxLen: 1, Visibility: time.Millisecond},
		{MaxLen: 1, Visibility: 25 * time.Hour},
		{MaxLen: 1, PerKey: 2},
		{MaxLen: 2, PerKey: -1},
		{MaxLen: 1, Prefix: "bad prefix"},
	} {
		_, err := redisstore.NewQueue(rdb, "orders", o)
		assert.Error(t, err, "%+v", o)
	}
}

// A queue of orders in Redis, shared by every server of a fleet: the
// middleware queues the orders over the limit, and each server runs a
// worker that places them at the fleet's pace (its limiter in Redis too).
func ExampleNewQueue() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	q, err := redisstore.NewQueue(rdb, "orders", redisstore.QueueOptions{MaxLen: 100_000, Visibility: time.Minute})
	if err != nil {
		panic(err)
	}
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type"}})
	if err != nil {
		panic(err)
	}
	store, err := redisstore.New(rdb)
	if err != nil {
		panic(err)
	}
	perClient := core.Must(core.NewLimiter(core.Limit{Name: "orders", Rate: core.PerMinute(10)}, core.WithStore(store)))
	pace := core.Must(core.NewLimiter(core.Limit{Name: "orders-worker", Rate: core.PerSecond(100)}, core.WithStore(store)))

	placeOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { /* ... */ })
	http.Handle("POST /orders", stdhttp.New(perClient, keyfuncs.PeerIP, stdhttp.WithQueue(offer))(placeOrder))
	worker, err := queue.NewWorker(q, pace, "fleet", placeOrder)
	if err != nil {
		panic(err)
	}
	go worker.Run(context.Background())
}
