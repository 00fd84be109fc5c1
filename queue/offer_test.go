package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/stdhttp"
)

// limited returns a handler that admits one request a minute of the
// clock and queues the others through offer; served counts the requests
// passed on.
func limited(t *testing.T, clock *storetest.Clock, offer *queue.Offer, served *int) http.Handler {
	t.Helper()
	lim, err := core.NewLimiter(core.Limit{Name: "orders", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}))
	require.NoError(t, err)
	mw := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithQueue(offer))
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*served++
		w.WriteHeader(http.StatusCreated)
	}))
}

// requireRejection checks that w is the answer the middleware gives
// without a queue: status, with the problem body and Retry-After, and no
// trace of the queue.
func requireRejection(t *testing.T, w *httptest.ResponseRecorder, status int, problemType string) {
	t.Helper()
	require.Equal(t, status, w.Code, "body: %s", w.Body)
	assert.Equal(t, answer.ProblemContentType, w.Header().Get("Content-Type"))
	assert.Equal(t, answer.ProblemCacheControl, w.Header().Get("Cache-Control"))
	assert.NotEmpty(t, w.Header().Get(answer.HeaderRetryAfter))
	assert.Contains(t, w.Body.String(), problemType)
	assert.Empty(t, w.Header().Get(queue.HeaderID))
	assert.Empty(t, w.Header().Get("Location"))
}

func post(h http.Handler, target, body string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestOfferQueuesRejected(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"content-type", "Idempotency-Key"}, Location: "/orders/queued/"})
	require.NoError(t, err)
	served := 0
	h := limited(t, clock, offer, &served)
	hdr := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}, "Authorization": {"Bearer secret"}, "Queue-Id": {"forged"}}

	assert.Equal(t, http.StatusCreated, post(h, "/orders", `{"n":1}`, hdr).Code, "the first request is admitted")
	w := post(h, "/orders?priority=low", `{"n":2}`, hdr)
	require.Equal(t, http.StatusAccepted, w.Code, "the second is queued")
	assert.Equal(t, 1, served)

	var body struct{ ID, Status string }
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Regexp(t, "^[0-9a-f]{32}$", body.ID)
	assert.Equal(t, "queued", body.Status)
	assert.Equal(t, body.ID, w.Header().Get(queue.HeaderID))
	assert.Equal(t, "/orders/queued/"+body.ID, w.Header().Get("Location"))
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Empty(t, w.Header().Get(answer.HeaderRetryAfter), "a queued request is not to be retried")
	assert.Equal(t, "0", w.Header().Get(answer.HeaderRemaining), "the rate-limit fields stay")

	it, err := q.Receive(context.Background())
	require.NoError(t, err)
	assert.Equal(t, body.ID, it.ID)
	assert.Equal(t, http.MethodPost, it.Method)
	assert.Equal(t, "/orders?priority=low", it.Target)
	assert.Equal(t, `{"n":2}`, string(it.Body))
	assert.Equal(t, http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}}, it.Header,
		"only the allowlist is kept")

	w2 := post(h, "/orders", `{"n":3}`, nil)
	require.Equal(t, http.StatusAccepted, w2.Code)
	assert.NotEqual(t, body.ID, w2.Header().Get(queue.HeaderID), "every item has its own ID")
}

func TestOfferFullAnswersAsBefore(t *testing.T) {
	var logs bytes.Buffer
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 1, clock)
	offer, err := queue.NewOffer(q, queue.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	served := 0
	h := limited(t, clock, offer, &served)
	post(h, "/orders", "", nil)
	require.Equal(t, http.StatusAccepted, post(h, "/orders", "a", nil).Code)
	for range 5 {
		w := post(h, "/orders", "b", nil)
		requireRejection(t, w, http.StatusTooManyRequests, "quota-exceeded") // a full queue answers 429 as before
		assert.Equal(t, "0", w.Header().Get(answer.HeaderRemaining), "with the rate-limit fields")
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "queue full"), "logged once per episode:\n%s", logs.String())

	it, err := q.Receive(context.Background())
	require.NoError(t, err)
	require.NoError(t, q.Ack(context.Background(), it))
	require.Equal(t, http.StatusAccepted, post(h, "/orders", "c", nil).Code, "room again")
	assert.Contains(t, logs.String(), "rejected=5")
}

// endless is a body that never ends, counting the bytes read from it.
type endless struct{ read int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.read += len(p)
	return len(p), nil
}

func TestOfferBodyOverBound(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	for _, tc := range []struct {
		tooLarge, want int
	}{{0, http.StatusRequestEntityTooLarge}, {http.StatusTooManyRequests, http.StatusTooManyRequests}} {
		offer, err := queue.NewOffer(q, queue.Options{MaxBody: 100, TooLarge: tc.tooLarge})
		require.NoError(t, err)
		served := 0
		h := limited(t, clock, offer, &served)
		post(h, "/", "", nil)

		assert.Equal(t, http.StatusAccepted, post(h, "/", strings.Repeat("x", 100), nil).Code, "100 bytes fit")
		assert.Equal(t, tc.want, post(h, "/", strings.Repeat("x", 101), nil).Code)

		body := &endless{}
		r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(body))
		r.ContentLength = -1 // unknown: chunked
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, tc.want, w.Code)
		assert.LessOrEqual(t, body.read, 512+101, "reads at most MaxBody+1 bytes (one buffer's worth)")
		assert.Empty(t, w.Header().Get(queue.HeaderID))
		if tc.want == http.StatusRequestEntityTooLarge {
			assert.Empty(t, w.Header().Get(answer.HeaderRetryAfter), "413: retrying will not help")
			assert.Contains(t, w.Body.String(), "Content Too Large")
		}
	}
	assert.Equal(t, 2, q.Len(), "only the bodies within the bound were queued")
}

// downStore is a store whose counters fail, as a store across a network
// that is down.
type downStore struct{}

func (downStore) Bind([]core.Limit) (core.Counter, error) { return downCounter{}, nil }

// downCounter fails every Take, the only method a limiter's Take calls.
type downCounter struct{ core.Counter }

func (downCounter) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errors.New("store down")
}

// A request rejected because the store failed under WithFailClosed is
// offered to the queue too; when the queue is full, the middleware
// answers it as without a queue: 503.
func TestOfferFailClosedFallback503(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 1, clock)
	require.NoError(t, q.Push(context.Background(), item("full", clock)))
	offer, err := queue.NewOffer(q, queue.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	lim, err := core.NewLimiter(core.Limit{Name: "x", Rate: core.PerMinute(10)}, core.WithStore(downStore{}),
		core.WithFailClosed(), core.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	served := 0
	h := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithQueue(offer))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	w := post(h, "/orders", "a", nil)
	requireRejection(t, w, http.StatusServiceUnavailable, "temporary-reduced-capacity") // the rejection as it would have been
	assert.Equal(t, "1", w.Header().Get(answer.HeaderRetryAfter))
	assert.Empty(t, w.Header().Get(answer.HeaderLimit), "no counts without the store")
	assert.Zero(t, served)
	assert.Equal(t, 1, q.Len(), "nothing more queued")
}

// brokenQueue is a queue whose pushes fail, as a queue whose backend is
// down.
type brokenQueue struct{ queue.Queue }

func (brokenQueue) Push(context.Context, *queue.Item) error { return errors.New("queue backend down") }

// A queue that fails answers the rejection as without a queue, and its
// failure is logged once per episode.
func TestOfferFailingAnswersAsBefore(t *testing.T) {
	var logs bytes.Buffer
	clock := storetest.NewClock(storetest.Epoch)
	offer, err := queue.NewOffer(brokenQueue{}, queue.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	served := 0
	h := limited(t, clock, offer, &served)
	require.Equal(t, http.StatusCreated, post(h, "/orders", "", nil).Code)
	for range 3 {
		w := post(h, "/orders", "b", nil)
		requireRejection(t, w, http.StatusTooManyRequests, "quota-exceeded")
		assert.Equal(t, "60", w.Header().Get(answer.HeaderRetryAfter))
		assert.Equal(t, "1", w.Header().Get(answer.HeaderLimit), "with the rate-limit fields")
	}
	assert.Equal(t, 1, served)
	assert.Equal(t, 1, strings.Count(logs.String(), "queue failing"), logs.String())
	assert.Contains(t, logs.String(), "queue backend down")
}

// ReplyTo's reply to a request it did not queue has Status 0 and nothing
// to write: the middleware answers the rejection itself.
func TestOfferReplyToNotQueued(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 1, clock)
	offer, err := queue.NewOffer(q, queue.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	d := core.Decision{Name: "x", Quota: 1, ResetAfter: time.Second, RetryAfter: time.Second}
	rep := offer.ReplyTo(httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("a")), d)
	require.Equal(t, http.StatusAccepted, rep.Status)
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("b")), // the queue is full
		httptest.NewRequest(http.MethodOptions, "*", nil),                       // not a path
	} {
		rep := offer.ReplyTo(r, d)
		assert.Zero(t, rep.Status, r.RequestURI)
		assert.Empty(t, rep.Body)
		rep.Fields(func(n, _ string) { t.Errorf("set %s", n) }, func(n string) { t.Errorf("removed %s", n) })
	}
	assert.Equal(t, 1, q.Len())
}

func TestOfferOptionsOutOfRange(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 1, clock)
	_, err := queue.NewOffer(nil, queue.Options{})
	assert.Error(t, err)
	for _, o := range []queue.Options{
		{MaxBody: -1},
		{MaxBody: queue.MaxMaxBody + 1},
		{TooLarge: 400},
		{Timeout: -time.Second},
		{Timeout: 2 * time.Minute},
		{Location: "orders/"},
		{Location: "/orders?x="},
		{Headers: []string{"Bad Name"}},
		{Headers: []string{"queue-id"}},
		{Headers: []string{"Content-Length"}},
		{Headers: []string{"host"}},
		{Headers: make([]string, queue.MaxHeaders+1)},
	} {
		_, err := queue.NewOffer(q, o)
		assert.Error(t, err, "%+v", o)
	}
}

// TestOfferReplyCopies: Reply, for fasthttp-based adapters, keeps copies
// of the request's memory, which the framework reuses after the handler.
func TestOfferReplyCopies(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"X-Order"}, MaxBody: 8})
	require.NoError(t, err)
	method, uri, body, value := []byte("POST"), []byte("/orders?a=1"), []byte("12345678"), []byte("v1")
	req := &queue.Request{Method: method, URI: uri, Body: body, Header: func(name string) [][]byte {
		if name == "X-Order" {
			return [][]byte{value}
		}
		return nil
	}}
	rep := offer.Reply(context.Background(), req, core.Decision{Name: "x", Quota: 1, ResetAfter: time.Second, RetryAfter: time.Second})
	require.Equal(t, http.StatusAccepted, rep.Status)
	set := map[string]string{}
	var del []string
	rep.Fields(func(n, v string) { set[n] = v }, func(n string) { del = append(del, n) })
	assert.Equal(t, "application/json", set["Content-Type"])
	assert.Regexp(t, "^[0-9a-f]{32}$", set[queue.HeaderID])
	assert.Contains(t, del, answer.HeaderRetryAfter)
	assert.JSONEq(t, `{"id":"`+set[queue.HeaderID]+`","status":"queued"}`, string(rep.Body))
	for _, b := range [][]byte{method, uri, body, value} {
		for i := range b {
			b[i] = '#' // the framework reuses its buffers
		}
	}
	it, err := q.Receive(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "POST", it.Method)
	assert.Equal(t, "/orders?a=1", it.Target)
	assert.Equal(t, "12345678", string(it.Body))
	assert.Equal(t, []string{"v1"}, it.Header["X-Order"])

	req.Body = []byte("123456789")
	assert.Equal(t, http.StatusRequestEntityTooLarge, offer.Reply(context.Background(), req, core.Decision{}).Status)
}

// TestOfferQueuesPathsOnly: a target that is not a path (absolute form,
// as a proxy sends, or "*") is not queued, since the worker could not
// replay it as the handler saw it: the client gets the rejection.
func TestOfferQueuesPathsOnly(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q := newMemory(t, 10, clock)
	offer, err := queue.NewOffer(q, queue.Options{})
	require.NoError(t, err)
	d := core.Decision{Name: "x", Quota: 1, ResetAfter: time.Second, RetryAfter: time.Second}
	for _, target := range []string{"http://example.com/orders", "*", "orders"} {
		rep := offer.Reply(context.Background(), &queue.Request{Method: []byte("POST"), URI: []byte(target)}, d)
		assert.Zero(t, rep.Status, "%s: not queued, answered as without a queue", target)
		assert.Empty(t, rep.Body, target)
	}
	assert.Equal(t, 0, q.Len())
	rep := offer.Reply(context.Background(), &queue.Request{Method: []byte("POST"), URI: []byte("//host/orders")}, d)
	assert.Equal(t, http.StatusAccepted, rep.Status, "a path that starts with two slashes is still a path")

	// Through the middleware: the asterisk form of OPTIONS gets the 429.
	served := 0
	h := limited(t, clock, offer, &served)
	r := httptest.NewRequest(http.MethodOptions, "*", nil)
	require.Equal(t, http.StatusCreated, serve(h, r).Code)
	w := serve(h, httptest.NewRequest(http.MethodOptions, "*", nil))
	requireRejection(t, w, http.StatusTooManyRequests, "quota-exceeded")
	assert.Equal(t, 1, served)
	assert.Equal(t, 1, q.Len(), "only the path was queued")
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestOfferKeyShare: the offer queues under the key it was given
// (ForKey, as package adapter calls it); a client past its share is
// answered as without a queue (Status 0), counted, not logged, while
// another client is still queued.
func TestOfferKeyShare(t *testing.T) {
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 10, PerKey: 2})
	require.NoError(t, err)
	var logs bytes.Buffer
	offer, err := queue.NewOffer(q, queue.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	req := func() *http.Request { return httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("x")) }
	var d core.Decision
	for i := range 2 {
		assert.Equal(t, http.StatusAccepted, offer.ForKey("flood").ReplyTo(req(), d).Status, "within the share: %d", i)
	}
	for range 3 {
		assert.Equal(t, 0, offer.ForKey("flood").ReplyTo(req(), d).Status, "past its share: not queued")
	}
	assert.Equal(t, http.StatusAccepted, offer.ForKey("calm").Reply(context.Background(),
		&queue.Request{Method: []byte("POST"), URI: []byte("/orders")}, d).Status, "another client is queued")
	assert.Equal(t, uint64(3), offer.KeyFull())
	assert.Empty(t, logs.String(), "a client past its share is a 429, not a failure")
	it, err := q.Receive(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "flood", it.Key)
}
