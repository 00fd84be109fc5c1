package adapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// The tests drive the kit through a port of their own over httptest,
// which records what the kit asks of it.

// An exchange is one request through the test port: the request type C.
// It is passed by value; what the kit does with it goes to its record.
type exchange struct {
	w    *httptest.ResponseRecorder
	r    *http.Request
	next http.Handler
	rec  *record
}

// A record is what the kit asked of the test port for one request.
type record struct {
	nextErr  error // what Next returns
	writeErr error // what Write returns

	passed int             // calls of Next
	stops  []error         // the arguments of Stop
	kept   []core.Decision // the arguments of Keep
	writes int
}

// errStopped is what the test port's Stop returns for a request that the
// kit answers: the flows must return it.
var errStopped = errors.New("test port: stopped")

type testPort struct{}

func (testPort) Context(x exchange) context.Context { return x.r.Context() }
func (testPort) Request(x exchange) rules.Request   { return rules.HTTPRequest(x.r) }

func (testPort) Header(x exchange, name string, v []string) {
	if v == nil {
		delete(x.w.Header(), name)
		return
	}
	x.w.Header()[name] = v
}

func (testPort) Next(x exchange) error {
	x.rec.passed++
	x.next.ServeHTTP(x.w, x.r)
	return x.rec.nextErr
}

func (testPort) Keep(x exchange, d core.Decision) exchange {
	x.rec.kept = append(x.rec.kept, d)
	x.r = x.r.WithContext(context.WithValue(x.r.Context(), keptKey{}, d))
	return x
}

type keptKey struct{}

func (testPort) Stop(x exchange, err error) error {
	x.rec.stops = append(x.rec.stops, err)
	if err != nil {
		return err
	}
	return errStopped
}

func (testPort) Write(x exchange, status int, body []byte) error {
	x.rec.writes++
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body)
	return x.rec.writeErr
}

func (testPort) Offer(x exchange, o *queue.Offer, d core.Decision) queue.Reply {
	return o.ReplyTo(x.r, d)
}

// ok is the handler after the middleware: 200 "ok", and the decision kept
// for it, if any, in X-Kept.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if d, kept := r.Context().Value(keptKey{}).(core.Decision); kept {
		w.Header().Set("X-Kept", d.Name+"/"+strconv.Itoa(d.Remaining))
	}
	_, _ = w.Write([]byte("ok"))
})

// newExchange returns an exchange of a GET of target from client, through
// a middleware in front of ok.
func newExchange(client, target string) exchange {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set("X-Client", client)
	return exchange{w: httptest.NewRecorder(), r: r, next: ok, rec: &record{}}
}

// do runs flow on a GET of "/" from client and returns the exchange and
// what the flow returned.
func do(flow func(exchange) error, client string) (exchange, error) {
	x := newExchange(client, "/")
	return x, flow(x)
}

// clientKey keys a request by its X-Client field: an empty key when it has
// none, the error of a failing key function when it is "failing".
func clientKey(x exchange) (string, error) {
	c := x.r.Header.Get("X-Client")
	if c == "failing" {
		return "", errSecret
	}
	return c, nil
}

var errSecret = errors.New("dial postgres://app:s3cret@db:5432: refused")

func newLimiter(t *testing.T, clock *storetest.Clock, lim core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(lim, append([]core.Option{core.WithStore(&core.MemoryStore{Clock: clock.Now})}, opts...)...)
	require.NoError(t, err)
	return l
}

// with returns an option that sets the configuration with set.
func with(set func(*adapter.Config[exchange])) adapter.Option[exchange] { return set }

// logTo returns an option that logs to b.
func logTo(b io.Writer) adapter.Option[exchange] {
	return with(func(c *adapter.Config[exchange]) { c.Logger = slog.New(slog.NewTextHandler(b, nil)) })
}

// quiet logs nowhere: the failures of tests about other things.
var quiet = logTo(io.Discard)

// requireAnswered checks that the kit answered x itself: stopped, not
// passed on, with the problem body of status (content type, no-store),
// which it returns decoded.
func requireAnswered(t *testing.T, x exchange, err error, status int) map[string]any {
	t.Helper()
	require.Equal(t, status, x.w.Code, "body: %s", x.w.Body)
	assert.ErrorIs(t, err, errStopped, "the flow returns what Stop returned")
	assert.Equal(t, []error{nil}, x.rec.stops, "stopped once, before the answer")
	assert.Zero(t, x.rec.passed, "not passed on")
	assert.Equal(t, 1, x.rec.writes)
	assert.Equal(t, answer.ProblemContentType, x.w.Header().Get("Content-Type"))
	assert.Equal(t, answer.ProblemCacheControl, x.w.Header().Get("Cache-Control"))
	var p map[string]any
	require.NoError(t, json.Unmarshal(x.w.Body.Bytes(), &p), "body: %s", x.w.Body)
	assert.EqualValues(t, status, p["status"])
	return p
}

// requirePassed checks that x was passed on, and nothing else.
func requirePassed(t *testing.T, x exchange, err error) {
	t.Helper()
	require.Equal(t, 1, x.rec.passed, "passed on; body: %s", x.w.Body)
	assert.Equal(t, "ok", x.w.Body.String())
	assert.NoError(t, err)
	assert.Empty(t, x.rec.stops)
	assert.Zero(t, x.rec.writes)
}

// rateFields returns the rate-limit fields of x's response.
func rateFields(x exchange) http.Header {
	h := http.Header{}
	for name, v := range x.w.Header() {
		if strings.HasPrefix(name, "X-Ratelimit") || strings.HasPrefix(name, "Ratelimit") || name == "Retry-After" {
			h[name] = v
		}
	}
	return h
}

func TestLimit(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch.Add(15 * time.Second))
	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	flow := adapter.New[exchange](testPort{}).Limit(lim, clientKey)

	x, err := do(flow, "alice")
	requirePassed(t, x, err)
	assert.Equal(t, http.Header{"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"45"}}, rateFields(x))
	assert.Empty(t, x.rec.kept, "no decision kept without DecisionInContext")

	errNext := errors.New("the handler's error")
	x = newExchange("alice", "/")
	x.rec.nextErr = errNext
	assert.ErrorIs(t, flow(x), errNext, "the flow returns what Next returned")

	x, err = do(flow, "alice")
	p := requireAnswered(t, x, err, http.StatusTooManyRequests)
	assert.Equal(t, http.Header{"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"45"},
		"Retry-After": {"45"}, "X-Ratelimit-Retry-After": {"45"}}, rateFields(x))
	assert.Equal(t, map[string]any{"type": "https://iana.org/assignments/http-problem-types#quota-exceeded", "title": "Too Many Requests",
		"status": 429.0, "detail": "rate limit exceeded; retry in 45 s", "limit": "api", "retry_after": 45.0}, p)
	assert.Equal(t, string(answer.Problem(http.StatusTooManyRequests, &core.Decision{Name: "api", RetryAfter: 45 * time.Second}, nil)), x.w.Body.String())

	errWrite := errors.New("connection reset")
	x = newExchange("alice", "/")
	x.rec.writeErr = errWrite
	assert.ErrorIs(t, flow(x), errWrite, "the flow returns Write's error")

	x, err = do(flow, "bob")
	requirePassed(t, x, err)
}

// Every style of header fields, on an admission and on a rejection.
func TestLimitHeaderStyles(t *testing.T) {
	for _, style := range []answer.Style{answer.XRateLimit, answer.IETF, answer.Both, answer.NoHeaders} {
		clock := storetest.NewClock(storetest.Epoch)
		lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
		flow := adapter.New(testPort{}, with(func(c *adapter.Config[exchange]) { c.Headers = style })).Limit(lim, clientKey)
		for _, d := range []core.Decision{
			{Allowed: true, Name: "api", Quota: 1, Window: time.Minute, ResetAfter: time.Minute},
			{Name: "api", Quota: 1, Window: time.Minute, ResetAfter: time.Minute, RetryAfter: time.Minute},
		} {
			x, _ := do(flow, "alice")
			want := http.Header{}
			for _, f := range style.Fields(nil, &d) {
				want[f.Name] = f.Value
			}
			assert.Equal(t, want, rateFields(x), "style %d, allowed %v", style, d.Allowed)
		}
	}
}

// A key function's failure, a missing key and a cost out of range are
// answered in fixed words, without rate-limit fields; the error, which may
// hold anything, goes to the logger, once per episode of each kind.
func TestLimitFailures(t *testing.T) {
	var logs bytes.Buffer
	costs := 0
	lim := newLimiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Rate: core.PerMinute(5)})
	flow := adapter.New(testPort{}, logTo(&logs), with(func(c *adapter.Config[exchange]) {
		c.Cost = func(x exchange) int {
			costs++
			n, err := strconv.Atoi(x.r.URL.Query().Get("cost"))
			if err != nil {
				return 1
			}
			return n
		}
	})).Limit(lim, clientKey)

	for range 100 {
		x, err := do(flow, "failing")
		p := requireAnswered(t, x, err, http.StatusInternalServerError)
		assert.Empty(t, rateFields(x), "no rate-limit fields on an error")
		assert.Equal(t, "rate limit unavailable for this request", p["detail"])
		require.NotContains(t, x.w.Body.String(), "s3cret")
		require.NotContains(t, x.w.Body.String(), "postgres")
	}
	assert.Zero(t, costs, "no cost without a key")
	assert.Equal(t, 1, strings.Count(logs.String(), "key function failing"), logs.String())
	assert.Contains(t, logs.String(), "s3cret", "the error is logged")
	x, err := do(flow, "alice")
	requirePassed(t, x, err)
	assert.Contains(t, logs.String(), "failed_requests=100")

	for range 3 {
		x, err = do(flow, "") // an empty key
		p := requireAnswered(t, x, err, http.StatusBadRequest)
		assert.Equal(t, map[string]any{"title": "Bad Request", "status": 400.0, "detail": "the request has no value to be rate limited by"}, p)
		assert.Empty(t, rateFields(x))
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "without a rate-limit key"), logs.String())

	for _, cost := range []string{"6", "-1"} {
		x = newExchange("alice", "/?cost="+cost)
		p := requireAnswered(t, x, flow(x), http.StatusInternalServerError)
		assert.Equal(t, "rate limit misconfigured", p["detail"], "cost %s", cost)
		assert.Empty(t, rateFields(x))
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "request cost out of range"), logs.String())
	x = newExchange("alice", "/?cost=0")
	requirePassed(t, x, flow(x))
	assert.Equal(t, "4", x.w.Header().Get(answer.HeaderRemaining), "a cost of 0 reports without counting")
}

// downStore is a store whose counters fail, as a store across a network
// that is down.
type downStore struct{}

func (downStore) Bind([]core.Limit) (core.Counter, error) { return downCounter{}, nil }

// downCounter fails every Take, the only method a limiter's Take calls.
type downCounter struct{ core.Counter }

var errDown = errors.New("store down")

func (downCounter) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errDown
}

// A rejection goes to the denied handler, with the rate-limit fields set
// and the request stopped; an error to the error handler, without them.
// A store failing closed is a rejection (503) of Quota 0; failing open, the
// request passes without counts.
func TestDeniedAndErrorHandlers(t *testing.T) {
	quietCore := core.WithLogger(slog.New(slog.DiscardHandler))
	clock := storetest.NewClock(storetest.Epoch)
	var denied []core.Decision
	var errs []error
	handlers := with(func(c *adapter.Config[exchange]) {
		c.Denied = func(x exchange, d core.Decision) error {
			denied = append(denied, d)
			assert.Equal(t, []error{nil}, x.rec.stops, "stopped before the denied handler runs")
			assert.NotEmpty(t, x.w.Header().Get(answer.HeaderRetryAfter), "Retry-After is set when it runs")
			x.w.WriteHeader(http.StatusTeapot)
			return errors.New("denied")
		}
		c.OnError = func(x exchange, err error) error {
			errs = append(errs, err)
			x.w.WriteHeader(http.StatusTeapot)
			return errors.New("error handled")
		}
	})

	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	flow := adapter.New(testPort{}, quiet, handlers).Limit(lim, clientKey)
	x, err := do(flow, "alice")
	requirePassed(t, x, err)
	x, err = do(flow, "alice")
	assert.EqualError(t, err, "denied", "the flow returns what the denied handler returned")
	assert.Equal(t, http.StatusTeapot, x.w.Code)
	assert.Zero(t, x.rec.writes)
	assert.Equal(t, "0", x.w.Header().Get(answer.HeaderRemaining))
	require.Len(t, denied, 1)
	assert.Equal(t, core.Decision{Name: "api", Quota: 1, Window: time.Minute, ResetAfter: time.Minute, RetryAfter: time.Minute,
		Policies: `"api";q=1;w=60`}, denied[0])

	x, err = do(flow, "failing")
	assert.EqualError(t, err, "error handled")
	assert.Equal(t, http.StatusTeapot, x.w.Code)
	assert.Empty(t, rateFields(x), "no rate-limit fields on an error")
	assert.Equal(t, []error{errSecret}, errs, "the error handler gets the key function's error")
	_, _ = do(flow, "")
	require.Len(t, errs, 2)
	assert.ErrorIs(t, errs[1], core.ErrMissingKey)
	assert.Len(t, denied, 1, "errors are not the denied handler's")

	closed, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)}, core.WithStore(downStore{}), core.WithFailClosed(), quietCore)
	require.NoError(t, err)
	x, err = do(adapter.New(testPort{}, handlers).Limit(closed, clientKey), "alice")
	assert.EqualError(t, err, "denied", "a store failing closed is a rejection")
	require.Len(t, denied, 2)
	assert.Zero(t, denied[1].Quota, "no quota to tell")
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, rateFields(x))
	assert.Len(t, errs, 2)

	x, err = do(adapter.New[exchange](testPort{}).Limit(closed, clientKey), "alice")
	p := requireAnswered(t, x, err, http.StatusServiceUnavailable)
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", p["type"])
	assert.Equal(t, "rate limiter unavailable", p["detail"])
	assert.NotContains(t, x.w.Body.String(), errDown.Error())
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, rateFields(x))

	open, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)}, core.WithStore(downStore{}), quietCore)
	require.NoError(t, err)
	x, err = do(adapter.New[exchange](testPort{}).Limit(open, clientKey), "alice")
	requirePassed(t, x, err)
	assert.Empty(t, rateFields(x), "no counts without the store")
}

// A request admitted by a shaping leaky bucket is held for its slot, and
// stopped with its context's error, not passed on, when the context ends
// first.
func TestShapingHoldEndsWithContext(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := newLimiter(t, clock, core.Limit{Name: "paced", Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 3, Shaping: true})
	flow := adapter.New(testPort{}, with(func(c *adapter.Config[exchange]) { c.DecisionInContext = true })).Limit(lim, clientKey)
	x, err := do(flow, "alice")
	requirePassed(t, x, err) // slot 0: no hold

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone before its slot, a minute away
	x = newExchange("alice", "/")
	x.r = x.r.WithContext(ctx)
	err = flow(x)
	assert.ErrorIs(t, err, context.Canceled, "the flow returns what Stop returned")
	assert.Equal(t, []error{context.Canceled}, x.rec.stops, "stopped with the context's error")
	assert.Zero(t, x.rec.passed, "not passed on")
	assert.Zero(t, x.rec.writes, "nobody to answer")
	assert.Empty(t, x.rec.kept, "nothing kept for a handler that does not run")
}

// DecisionInContext keeps the decision of a request passed on, with Keep,
// and passes on the request Keep returned.
func TestDecisionInContext(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	flow := adapter.New(testPort{}, with(func(c *adapter.Config[exchange]) { c.DecisionInContext = true })).Limit(lim, clientKey)
	x, err := do(flow, "alice")
	requirePassed(t, x, err)
	require.Len(t, x.rec.kept, 1)
	assert.Equal(t, "api", x.rec.kept[0].Name)
	assert.True(t, x.rec.kept[0].Allowed)
	assert.Equal(t, "api/1", x.w.Header().Get("X-Kept"), "the handler got the request that Keep returned")

	_, _ = do(flow, "alice")
	x, _ = do(flow, "alice")
	assert.Equal(t, http.StatusTooManyRequests, x.w.Code)
	assert.Empty(t, x.rec.kept, "a rejection is not kept")
}

// A skipped request is passed on without being counted, and gets no
// fields; neither key nor cost is computed.
func TestSkip(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	keys, costs := 0, 0
	key := func(x exchange) (string, error) { keys++; return clientKey(x) }
	flow := adapter.New(testPort{}, with(func(c *adapter.Config[exchange]) {
		c.Skip = func(x exchange) bool { return x.r.URL.Path == "/health" }
		c.Cost = func(exchange) int { costs++; return 1 }
		c.DecisionInContext = true
	})).Limit(lim, key)
	for range 5 {
		x := newExchange("alice", "/health")
		requirePassed(t, x, flow(x))
		assert.Empty(t, rateFields(x), "no fields")
		assert.Empty(t, x.rec.kept)
	}
	assert.Zero(t, keys)
	assert.Zero(t, costs)
	x, err := do(flow, "alice")
	requirePassed(t, x, err)
	assert.Equal(t, "1", x.w.Header().Get(answer.HeaderRemaining), "the skipped requests were not counted")
	assert.Equal(t, 1, costs)
}

// The Rules flow decides by every rule that matches, together: the fields
// describe the most restrictive; a request that none matches passes
// without fields; a failing descriptor key is an error.
func TestRules(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	e, err := rules.NewEngine(rules.WithStore(&core.MemoryStore{Clock: clock.Now}),
		rules.WithKey("client", func(r rules.Request) (string, error) {
			if c := r.Values("X-Client"); len(c) > 0 && c[0] == "failing" {
				return "", errSecret
			}
			return "", keyfuncs.ErrMissing // no match
		}))
	require.NoError(t, err)
	require.NoError(t, e.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", Match: &rules.Match{Path: "/api/*"}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 10}},
		{Key: "header:X-Client", Match: &rules.Match{Path: "/api/*"}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
		{Key: "client", Match: &rules.Match{Path: "/plans"}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}}))
	names, _, err := e.Matches(rules.HTTPRequest(newExchange("alice", "/api/items").r))
	require.NoError(t, err)
	require.Len(t, names, 2)
	perClient := names[1]
	require.Contains(t, perClient, "X-Client")
	var logs bytes.Buffer
	flow := adapter.New(testPort{}, logTo(&logs), with(func(c *adapter.Config[exchange]) { c.DecisionInContext = true })).Rules(e)

	for i := range 2 {
		x := newExchange("alice", "/api/items")
		requirePassed(t, x, flow(x))
		assert.Equal(t, "2", x.w.Header().Get(answer.HeaderLimit), "the most restrictive")
		assert.Equal(t, strconv.Itoa(1-i), x.w.Header().Get(answer.HeaderRemaining))
		require.Len(t, x.rec.kept, 1)
		assert.Equal(t, perClient, x.rec.kept[0].Name)
	}
	x := newExchange("alice", "/api/items")
	p := requireAnswered(t, x, flow(x), http.StatusTooManyRequests)
	assert.Equal(t, perClient, p["limit"])
	assert.Equal(t, "0", x.w.Header().Get(answer.HeaderRemaining))

	x = newExchange("bob", "/api/items")
	requirePassed(t, x, flow(x))
	assert.Equal(t, "1", x.w.Header().Get(answer.HeaderRemaining), "bob's own count")

	x = newExchange("alice", "/other")
	requirePassed(t, x, flow(x))
	assert.Empty(t, rateFields(x), "no rule matches: no fields")
	assert.Empty(t, x.rec.kept, "and no decision to keep")

	x = newExchange("failing", "/plans")
	p = requireAnswered(t, x, flow(x), http.StatusInternalServerError)
	assert.Equal(t, "rate limit unavailable for this request", p["detail"])
	assert.NotContains(t, x.w.Body.String(), "s3cret")
	assert.Empty(t, rateFields(x))
	assert.Equal(t, 1, strings.Count(logs.String(), "key function failing"), logs.String())
	assert.Contains(t, logs.String(), "s3cret")
}

// The Concurrency flow: an admitted request holds its slot until the next
// handler returns or panics; a refusal is 429 with Retry-After only; a
// store failing closed 503; key errors 400 and 500.
func TestConcurrency(t *testing.T) {
	var logs bytes.Buffer
	lim, err := concurrency.NewLimiter(1, concurrency.WithName("reports"), concurrency.WithRetryAfter(1500*time.Millisecond))
	require.NoError(t, err)
	costs := 0
	flow := adapter.New(testPort{}, logTo(&logs), with(func(c *adapter.Config[exchange]) {
		c.Headers = answer.Both // plays no part
		c.Cost = func(exchange) int { costs++; return 1 }
		c.DecisionInContext = true
	})).Concurrency(lim, clientKey)

	var inFlight int
	var refused exchange
	var refusedErr error
	x := newExchange("alice", "/")
	x.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight = lim.InFlight()
		refused, refusedErr = do(flow, "alice") // the same key, while this request runs
		ok(w, r)
	})
	requirePassed(t, x, flow(x))
	assert.Equal(t, 1, inFlight, "the slot is held while the handler runs")
	assert.Zero(t, lim.InFlight(), "and released when it returns")
	assert.Empty(t, rateFields(x), "no fields on an admission")
	assert.Empty(t, x.rec.kept, "no decision to keep")

	p := requireAnswered(t, refused, refusedErr, http.StatusTooManyRequests)
	assert.Equal(t, http.Header{"Retry-After": {"2"}}, rateFields(refused), "Retry-After only, 1.5 s rounded up")
	assert.Equal(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,`+
		`"detail":"rate limit exceeded; retry in 2 s","limit":"reports","retry_after":2}`+"\n", refused.w.Body.String())
	assert.Equal(t, "reports", p["limit"])
	assert.Zero(t, costs, "no cost is computed")

	errNext := errors.New("the handler's error")
	x = newExchange("alice", "/")
	x.rec.nextErr = errNext
	assert.ErrorIs(t, flow(x), errNext)
	assert.Zero(t, lim.InFlight())

	x = newExchange("alice", "/")
	x.next = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") })
	assert.PanicsWithValue(t, "handler bug", func() { _ = flow(x) })
	assert.Zero(t, lim.InFlight(), "the panic released the slot")
	x, err = do(flow, "alice")
	requirePassed(t, x, err)

	for range 3 {
		x, err = do(flow, "")
		p = requireAnswered(t, x, err, http.StatusBadRequest)
		assert.Equal(t, "the request has no value to be rate limited by", p["detail"])
		assert.Empty(t, rateFields(x))
	}
	x, err = do(flow, "failing")
	requireAnswered(t, x, err, http.StatusInternalServerError)
	assert.NotContains(t, x.w.Body.String(), "s3cret", "errors stay out of bodies")
	assert.Empty(t, rateFields(x))
	assert.Zero(t, lim.InFlight(), "key errors take no slot")
	assert.Equal(t, 1, strings.Count(logs.String(), "without a rate-limit key"), logs.String())
	assert.Equal(t, 1, strings.Count(logs.String(), "key function failing"), logs.String())
	assert.Contains(t, logs.String(), "s3cret")
	x, err = do(flow, "alice")
	requirePassed(t, x, err)
	assert.Contains(t, logs.String(), "decided again", "a request decided ends the episodes")
}

// The denied handler of a concurrency refusal gets the limiter's name and
// max as the decision; a skipped request takes no slot.
func TestConcurrencyDeniedAndSkip(t *testing.T) {
	lim, err := concurrency.NewLimiter(1, concurrency.WithName("uploads"))
	require.NoError(t, err)
	var denied []core.Decision
	flow := adapter.New(testPort{}, with(func(c *adapter.Config[exchange]) {
		c.Skip = func(x exchange) bool { return x.r.URL.Path == "/health" }
		c.Denied = func(x exchange, d core.Decision) error {
			denied = append(denied, d)
			assert.Equal(t, "1", x.w.Header().Get(answer.HeaderRetryAfter), "set when it runs")
			x.w.WriteHeader(http.StatusTeapot)
			return nil
		}
	})).Concurrency(lim, clientKey)

	var inner, skipped exchange
	x := newExchange("alice", "/")
	x.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner, _ = do(flow, "alice")
		skipped = newExchange("alice", "/health")
		skipped.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			assert.Equal(t, 1, lim.InFlight(), "the skipped request took no slot")
			ok(w, r)
		})
		requirePassed(t, skipped, flow(skipped))
		ok(w, r)
	})
	requirePassed(t, x, flow(x))
	assert.Equal(t, http.StatusTeapot, inner.w.Code)
	assert.Equal(t, []core.Decision{{Name: "uploads", Quota: 1, RetryAfter: time.Second}}, denied)
	assert.Equal(t, 1, skipped.rec.passed)
	assert.Zero(t, lim.InFlight())
}

// A concurrency limiter whose store fails under WithFailClosed refuses
// with 503, a decision of Quota 0, and takes no slot.
func TestConcurrencyFailClosed(t *testing.T) {
	lim, err := concurrency.NewLimiter(1, concurrency.WithName("jobs"), concurrency.WithStore(&concurrency.MemoryStore{MaxKeys: 1}),
		concurrency.WithFailClosed(), concurrency.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	// Fill the store until a key finds no room: MaxKeys 1 holds one key
	// per shard.
	full := ""
	for i := 0; full == "" && i < 1000; i++ {
		k := "key-" + strconv.Itoa(i)
		_, lease, err := lim.Acquire(context.Background(), k)
		if err != nil {
			require.ErrorIs(t, err, concurrency.ErrFull)
			full = k
		}
		defer lease.Release()
	}
	require.NotEmpty(t, full, "no key found the store full")
	held := lim.InFlight()

	x, err := do(adapter.New[exchange](testPort{}).Concurrency(lim, clientKey), full)
	p := requireAnswered(t, x, err, http.StatusServiceUnavailable)
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", p["type"])
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, rateFields(x))
	assert.NotContains(t, x.w.Body.String(), concurrency.ErrFull.Error())
	assert.Equal(t, held, lim.InFlight(), "no slot taken")

	var denied []core.Decision
	x, _ = do(adapter.New(testPort{}, with(func(c *adapter.Config[exchange]) {
		c.Denied = func(_ exchange, d core.Decision) error { denied = append(denied, d); return nil }
	})).Concurrency(lim, clientKey), full)
	assert.Equal(t, []core.Decision{{Name: "jobs", RetryAfter: time.Second}}, denied, "Quota 0: the store failed")
	assert.Equal(t, http.Header{"Retry-After": {"1"}}, rateFields(x))
}

// A rejected request is offered to the queue: queued, it is answered with
// the offer's reply, which keeps the rate-limit fields but not
// Retry-After; not queued (the queue is full), it gets the rejection as
// without a queue. Errors are never queued.
func TestQueue(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 1, Now: clock.Now})
	require.NoError(t, err)
	offer, err := queue.NewOffer(q, queue.Options{Location: "/queued/", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	lim := newLimiter(t, clock, core.Limit{Name: "orders", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	flow := adapter.New(testPort{}, quiet, with(func(c *adapter.Config[exchange]) { c.Queue = offer })).Limit(lim, clientKey)

	x, err := do(flow, "alice")
	requirePassed(t, x, err)

	x, err = do(flow, "alice")
	require.Equal(t, http.StatusAccepted, x.w.Code, "queued; body: %s", x.w.Body)
	assert.ErrorIs(t, err, errStopped, "the flow returns what Stop returned")
	assert.Equal(t, []error{nil}, x.rec.stops)
	assert.Zero(t, x.rec.passed)
	id := x.w.Header().Get(queue.HeaderID)
	assert.Regexp(t, "^[0-9a-f]{32}$", id)
	assert.Equal(t, "/queued/"+id, x.w.Header().Get("Location"))
	assert.Equal(t, "application/json", x.w.Header().Get("Content-Type"))
	assert.Empty(t, x.w.Header().Values(answer.HeaderRetryAfter), "a queued request is not to be retried")
	assert.Empty(t, x.w.Header().Values(answer.HeaderXRetryAfter))
	assert.Equal(t, "0", x.w.Header().Get(answer.HeaderRemaining), "the rate-limit fields stay")
	assert.JSONEq(t, `{"id":"`+id+`","status":"queued"}`, x.w.Body.String())

	x, err = do(flow, "alice")
	requireAnswered(t, x, err, http.StatusTooManyRequests) // the queue is full
	assert.Equal(t, "60", x.w.Header().Get(answer.HeaderRetryAfter))
	assert.Equal(t, "0", x.w.Header().Get(answer.HeaderRemaining))
	assert.Empty(t, x.w.Header().Get(queue.HeaderID))

	errWrite := errors.New("connection reset")
	it, err := q.Receive(context.Background())
	require.NoError(t, err)
	require.NoError(t, q.Ack(context.Background(), it))
	x = newExchange("alice", "/")
	x.rec.writeErr = errWrite
	assert.ErrorIs(t, flow(x), errWrite, "the flow returns Write's error")

	x, err = do(flow, "failing")
	requireAnswered(t, x, err, http.StatusInternalServerError)
	assert.Equal(t, 1, q.Len(), "an error is not queued")
}

// The Limit and Rules flows allocate nothing for a request they pass on,
// with a port of values (the examples' net/http port) and numbers below
// 4096 in the header fields.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are noise under the race detector")
	}
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)}))
	e, err := rules.NewEngine()
	require.NoError(t, err)
	require.NoError(t, e.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 1000}},
	}}))
	m := adapter.New[call](port{})
	for name, flow := range map[string]func(call) error{
		"limit": m.Limit(lim, func(call) (string, error) { return "client", nil }),
		"rules": m.Rules(e),
	} {
		t.Run(name, func(t *testing.T) {
			w := &discardWriter{h: make(http.Header, 8)}
			passed := 0
			next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed++ })
			c := call{w: w, r: httptest.NewRequest(http.MethodGet, "/", nil), next: next}
			require.NoError(t, flow(c)) // the key is tracked from here on
			allocs := testing.AllocsPerRun(200, func() {
				clear(w.h)
				_ = flow(c)
			})
			assert.Equal(t, 202, passed, "every request passed")
			assert.NotEmpty(t, w.h.Get(answer.HeaderRemaining), "with the rate-limit fields")
			assert.Zero(t, w.status)
			assert.Zero(t, allocs, "allocations per request")
		})
	}
}

// discardWriter is a ResponseWriter that keeps only its header and status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// The Rules flow under the IETF style: RateLimit-Policy lists every rule
// that matched the request, in the order of the rules, on every response,
// admitted or rejected, whichever rule decided; RateLimit names the rule
// that decided. A request of other rules lists those.
func TestRulesPolicies(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	e, err := rules.NewEngine(rules.WithStore(&core.MemoryStore{Clock: clock.Now}))
	require.NoError(t, err)
	require.NoError(t, e.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "header:X-Client", Match: &rules.Match{Path: "/api/*"}, RateLimit: &rules.RateLimit{Unit: "hour", RequestsPerUnit: 2}},
	}}))
	names, _, err := e.Matches(rules.HTTPRequest(newExchange("alice", "/api/items").r))
	require.NoError(t, err)
	require.Len(t, names, 2)
	all, perClient := names[0], names[1]
	both := `"` + all + `";q=3;w=60, "` + perClient + `";q=2;w=3600`
	flow := adapter.New(testPort{}, quiet, with(func(c *adapter.Config[exchange]) { c.Headers = answer.IETF })).Rules(e)

	for i, want := range []struct {
		status  int
		decider string // the name in the RateLimit field
	}{
		{http.StatusOK, perClient},              // 2 of 3 left, 1 of 2
		{http.StatusOK, perClient},              // 1 left, 0 left
		{http.StatusTooManyRequests, perClient}, // the hour's rejection
		{http.StatusTooManyRequests, perClient}, // still
		{http.StatusOK, all},                    // bob: 0 left of the minute (alice's 2), 1 of his hour
		{http.StatusTooManyRequests, all},       // carol: the minute is spent
		{http.StatusTooManyRequests, all},       // GET / : only the minute's rule
	} {
		client, target := "alice", "/api/items"
		switch i {
		case 4:
			client = "bob"
		case 5:
			client = "carol"
		case 6:
			target = "/"
		}
		x := newExchange(client, target)
		_ = flow(x)
		require.Equal(t, want.status, x.w.Code, "request %d", i)
		policy := both
		if target == "/" {
			policy = `"` + all + `";q=3;w=60`
		}
		assert.Equal(t, policy, x.w.Header().Get(answer.HeaderRateLimitPolicy), "request %d: every rule of the request", i)
		assert.True(t, strings.HasPrefix(x.w.Header().Get(answer.HeaderRateLimit), `"`+want.decider+`";`),
			"request %d: RateLimit %q names the rule that decided, %s", i, x.w.Header().Get(answer.HeaderRateLimit), want.decider)
	}
}

// The Rules flow of a request that two rules match allocates nothing with
// the X-Ratelimit fields, and one block of field values with the IETF
// fields, whose RateLimit-Policy, both rules' items, is made once for
// the pair and shared by every response. (Before the policy lists, a
// request of two checks allocated one more: its limits' decisions, which
// the refund of a rejection let escape.)
func TestAllocsTwoRules(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are noise under the race detector")
	}
	e, err := rules.NewEngine()
	require.NoError(t, err)
	require.NoError(t, e.Load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 1000}},
	}}))
	for _, tc := range []struct {
		style  answer.Style
		allocs float64
	}{{answer.XRateLimit, 0}, {answer.IETF, 1}} {
		flow := adapter.New(port{}, adapter.WithHeaders[call](tc.style)).Rules(e)
		w := &discardWriter{h: make(http.Header, 8)}
		c := call{w: w, r: httptest.NewRequest(http.MethodGet, "/", nil), next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
		require.NoError(t, flow(c))
		allocs := testing.AllocsPerRun(200, func() {
			clear(w.h)
			_ = flow(c)
		})
		assert.Zero(t, w.status, "passed")
		if tc.style == answer.IETF {
			assert.Contains(t, w.h.Get(answer.HeaderRateLimitPolicy), `, "`, "both rules listed")
		}
		assert.Equal(t, tc.allocs, allocs, "style %d: allocations per request", tc.style)
	}
}
