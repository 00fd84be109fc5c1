// Package adaptertest is the conformance suite of ratekit's framework
// adapters (Gin, Echo, Fiber, Chi, and any written later): one table of
// requests that every adapter serves through its framework and that must
// get, field for field, the answers of the net/http middleware (package
// stdhttp) — status, rate-limit headers, Retry-After, content type,
// caching and problem-details body.
//
// An adapter's tests call Run with a Mount function:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(t *testing.T, lim *core.Limiter, header string) adaptertest.Serve {
//			r := gin.New()
//			r.Use(ratekitgin.New(lim, func(c *gin.Context) (string, error) { ... the header's value ... }))
//			r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
//			return adaptertest.Handler(r)
//		})
//	}
//
// Adapters of a rules engine (package rules) call RunRules likewise, with
// a RulesMount that puts their Rules middleware in front of the routes
// the scenarios request.
package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// Serve serves one request through a framework and returns the response.
type Serve func(*http.Request) *http.Response

// Mount builds the adapter under test: a router of the framework with the
// adapter's middleware for lim on every route and one route, GET /, whose
// handler answers 200 with the body "ok". The middleware keys requests by
// the value of the request header named header; a request without it must
// get the key error keyfuncs.ErrMissing (as keyfuncs.Header returns), so
// that the adapter's default error handling answers it.
type Mount func(t *testing.T, lim *core.Limiter, header string) Serve

// Handler returns the Serve of an http.Handler, such as a Gin engine, an
// Echo instance or a Chi router.
func Handler(h http.Handler) Serve {
	return func(r *http.Request) *http.Response {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}
}

// KeyHeader is the header the suite keys requests by.
const KeyHeader = "X-Client"

// Fields are the response header fields compared with stdhttp's.
var Fields = []string{
	core.HeaderLimit, core.HeaderRemaining, core.HeaderReset,
	core.HeaderRetryAfter, core.HeaderXRetryAfter,
	core.HeaderRateLimit, core.HeaderRateLimitPolicy,
	"Cache-Control",
}

// A request of a case: the key header's value ("" sends none).
type request struct{ client string }

type testCase struct {
	name     string
	limit    core.Limit
	opts     []core.Option
	store    func() core.Store // nil: a memory store on the suite's clock
	requests []request
}

// failing is a store whose counters always fail.
type failing struct{}

func (failing) Bind(core.Limit) (core.Counter, error) { return failing{}, nil }

var errDown = errors.New("adaptertest: store down")

func (failing) Take(context.Context, string, int) (core.Decision, error) {
	return core.Decision{}, errDown
}

func (failing) Peek(context.Context, string, int) (core.Decision, error) {
	return core.Decision{}, errDown
}

func repeat(client string, n int) []request {
	rs := make([]request, n)
	for i := range rs {
		rs[i].client = client
	}
	return rs
}

func cases() []testCase {
	quiet := core.WithLogger(slog.New(slog.DiscardHandler))
	return []testCase{
		{name: "fixed-window/x-ratelimit", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
			requests: repeat("alice", 5)},
		{name: "token-bucket/ietf", limit: core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2},
			opts: []core.Option{core.WithHeaders(core.IETFHeaders)}, requests: repeat("alice", 4)},
		{name: "sliding-window-counter/both", limit: core.Limit{Name: "api", Rate: core.PerHour(2)},
			opts: []core.Option{core.WithHeaders(core.BothHeaders)}, requests: repeat("alice", 3)},
		{name: "keys-are-separate", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)},
			requests: []request{{"alice"}, {"bob"}, {"alice"}, {"bob"}, {"carol"}}},
		{name: "missing-key", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)},
			requests: []request{{""}, {""}, {"alice"}}},
		{name: "fail-open", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)},
			opts: []core.Option{quiet}, store: func() core.Store { return failing{} }, requests: repeat("alice", 3)},
		{name: "fail-closed", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)},
			opts: []core.Option{quiet, core.WithFailMode(core.FailClosed)}, store: func() core.Store { return failing{} },
			requests: repeat("alice", 2)},
		{name: "two-limits", limit: core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(2)},
			opts:     []core.Option{core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(3)})},
			requests: repeat("alice", 5)},
	}
}

// Run runs every case through the adapter that mount builds and through
// stdhttp, and fails the test where any response differs in status,
// body, or the header fields of Fields (and Content-Type on responses
// that do not pass).
func Run(t *testing.T, mount Mount) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			adapter := mount(t, newLimiter(t, tc), KeyHeader)
			reference := Handler(stdhttp.New(newLimiter(t, tc), keyfuncs.Header(KeyHeader))(ok))
			for i, rq := range tc.requests {
				want := read(t, reference(newRequest(rq)))
				got := read(t, adapter(newRequest(rq)))
				same(t, fmt.Sprintf("request %d (client %q)", i, rq.client), want, got, Fields)
			}
		})
	}
}

// ok is the handler behind the reference middleware: 200, "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
})

// same fails the test unless got, the adapter's response, has the status,
// body and header fields (and Content-Type, unless both pass) of want,
// stdhttp's.
func same(t *testing.T, what string, want, got response, fields []string) {
	t.Helper()
	if want.status != got.status || want.body != got.body {
		t.Fatalf("%s: got %d %q, want (as stdhttp) %d %q", what, got.status, got.body, want.status, want.body)
	}
	if want.status != http.StatusOK {
		fields = append(fields[:len(fields):len(fields)], "Content-Type")
	}
	for _, f := range fields {
		if w, g := want.header.Values(f), got.header.Values(f); !equal(w, g) {
			t.Fatalf("%s, status %d: header %s = %q, want (as stdhttp) %q", what, got.status, f, g, w)
		}
	}
}

// epoch is a whole hour: windows of a second, a minute and an hour start
// there.
var epoch = time.Unix(1_699_999_200, 0)

func newLimiter(t *testing.T, tc testCase) *core.Limiter {
	t.Helper()
	var store core.Store
	if tc.store != nil {
		store = tc.store()
	} else {
		s, err := core.NewMemoryStore(core.WithClock(storetest.NewClock(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		store = s
	}
	lim, err := core.NewLimiter(tc.limit, append([]core.Option{core.WithStore(store)}, tc.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func newRequest(rq request) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.10:4711"
	if rq.client != "" {
		r.Header.Set(KeyHeader, rq.client)
	}
	return r
}

type response struct {
	status int
	header http.Header
	body   string
}

func read(t *testing.T, r *http.Response) response {
	t.Helper()
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{r.StatusCode, r.Header, string(body)}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Limiter returns a limiter of l, with opts, on a memory store whose time
// is clock: the limiter of an adapter's own tests, which replay exact
// traces without sleeping.
func Limiter(t testing.TB, clock core.Clock, l core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	store, err := core.NewMemoryStore(core.WithClock(clock))
	if err != nil {
		t.Fatalf("adaptertest: memory store: %v", err)
	}
	lim, err := core.NewLimiter(l, append([]core.Option{core.WithStore(store)}, opts...)...)
	if err != nil {
		t.Fatalf("adaptertest: limiter: %v", err)
	}
	return lim
}
