// Package echotest holds the tests that the Echo v4 and Echo v5 adapters
// share, generic over the request context C of either major (echo.Context
// in v4, *echo.Context in v5) so that it imports neither, as package
// echoport does for their code: the key and options of a scenario
// ([API.Build]), the error-handler path ([CheckErrors]), rules' routes
// ([RulesRoute]), client addresses under e.IPExtractor ([RunForged]), key
// functions ([RunKeys]) and the benchmark loop ([Bench]).
//
// Each adapter's tests give it what is Echo's: the router, the
// extractors, the contexts and the error handler. Only those tests import
// it.
package echotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/echoport"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Context is what the tests use of an Echo request context.
type Context interface {
	echoport.Context
	String(code int, s string) error
	SetRequest(r *http.Request)
}

// An API is the adapter under test, of context C, key type K and option
// type O: its key functions, options and DecisionFrom. Package names the
// adapter's package, the prefix of its errors.
type API[C Context, K ~func(C) (string, error), O any] struct {
	Package string

	PeerIP       K
	ClientIP     K
	IP           func(opts ...keyfuncs.IPOption) (K, error)
	Header, User func(name string) K
	ContextValue func(key string) K
	Adapt        func(f keyfuncs.Func) K

	WithSkipper           func(skip func(C) bool) O
	WithCost              func(cost func(C) int) O
	WithDeniedHandler     func(denied func(C, core.Decision) error) O
	WithErrorHandler      func(onError func(C, error) error) O
	WithQueue             func(offer *queue.Offer) O
	WithHeaders           func(s answer.Style) O
	WithLogger            func(log *slog.Logger) O
	WithDecisionInContext func() O

	DecisionFrom func(c C) (core.Decision, bool)
}

// Build returns the key function and the options of the adapter that s
// describes (see adaptertest.Scenario); the key is nil where s.Key is nil
// under adaptertest.ByKey.
func (a API[C, K, O]) Build(t *testing.T, s adaptertest.Scenario) (K, []O) {
	header := func(c C, name string) string { return c.Request().Header.Get(name) }
	var key K
	switch s.By {
	case adaptertest.ByKey:
		if s.Key != nil {
			key = func(c C) (string, error) { return s.Key(header(c, adaptertest.KeyHeader)) }
		}
	case adaptertest.ByPeerIP:
		key = a.PeerIP
	case adaptertest.ByIP:
		var err error
		key, err = a.IP(s.IPOptions...)
		require.NoError(t, err)
	case adaptertest.ByHeader:
		key = a.Header(adaptertest.KeyHeader)
	case adaptertest.ByUser:
		key = a.User(adaptertest.UserKey)
	}
	opts := []O{a.WithHeaders(s.Headers), a.WithLogger(s.Logger)}
	if s.Skip != nil {
		opts = append(opts, a.WithSkipper(func(c C) bool { return s.Skip(header(c, adaptertest.SkipHeader)) }))
	}
	if s.Cost != nil {
		opts = append(opts, a.WithCost(func(c C) int { return s.Cost(header(c, adaptertest.CostHeader)) }))
	}
	if s.Denied != nil {
		opts = append(opts, a.WithDeniedHandler(func(c C, d core.Decision) error { return c.String(s.Denied(d)) }))
	}
	if s.OnError != nil {
		opts = append(opts, a.WithErrorHandler(func(c C, err error) error { return c.String(s.OnError(err)) }))
	}
	if s.Queue != nil {
		opts = append(opts, a.WithQueue(s.Queue))
	}
	if s.NilOptions {
		opts = append(opts, a.WithSkipper(nil), a.WithCost(nil), a.WithDeniedHandler(nil), a.WithErrorHandler(nil))
	}
	if s.DecisionInContext {
		opts = append(opts, a.WithDecisionInContext())
	}
	return key, opts
}

// App does the work of a scenario's app middleware for c, before it calls
// the next handler with the c it returns: it stores the value of the
// header adaptertest.UserHeader, if any, with c.Set under
// adaptertest.UserKey, and applies s.Context to the request's context.
func App[C Context](s adaptertest.Scenario, c C) C {
	if u := c.Request().Header.Get(adaptertest.UserHeader); u != "" {
		c.Set(adaptertest.UserKey, u)
	}
	if s.Context != nil {
		c.SetRequest(c.Request().WithContext(s.Context(c.Request().Context())))
	}
	return c
}

// Handle is a scenario's route handler: 200 with the body
// adaptertest.Body of the decision that DecisionFrom finds.
func (a API[C, K, O]) Handle(c C) error {
	return c.String(http.StatusOK, adaptertest.Body(a.DecisionFrom(c)))
}

// ErrKey is the error of ErrorKey on the route /error.
var ErrKey = errors.New("echotest: key store down")

// ErrorKey is the key of CheckErrors' routes: the route, c.Path(), and on
// /error, the error ErrKey.
func ErrorKey[C Context](c C) (string, error) {
	if c.Path() == "/error" {
		return "", ErrKey
	}
	return c.Path(), nil
}

// ErrorLimiters returns the limiters of CheckErrors' routes, on a stopped
// clock: once lets one request a minute through; slow, a shaping leaky
// bucket, passes a key's first request at once and holds the next.
func ErrorLimiters(t *testing.T) (once, slow *core.Limiter) {
	clock := storetest.NewClock(storetest.Epoch)
	return adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}),
		adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
}

// Gone returns c with its request's context canceled, as a client's that
// has gone: the middleware that CheckErrors' route /gone has in front of
// ratekit's.
func Gone[C Context](c C) C {
	ctx, cancel := context.WithCancel(c.Request().Context())
	cancel()
	c.SetRequest(c.Request().WithContext(ctx))
	return c
}

// CheckErrors checks that what the denied and error handlers return, and
// the error of a context that ends while its request is held (the client
// gone, or Echo's ContextTimeout), reach e.HTTPErrorHandler, here Echo's
// default (an *echo.HTTPError's status and message, else 500), with the
// rate-limit fields set and the route's handler not run.
//
// serve is an Echo instance whose e.HTTPErrorHandler stores each error in
// *handled, then runs Echo's default, with the routes, each keyed by
// ErrorKey on ErrorLimiters' limiters and ending in a handler that answers
// 200 "ok": GET /denied, New(once) with a denied handler that returns
// slowDown, echo.NewHTTPError(429, "slow down"); GET /error, New(once)
// with an error handler that returns its error; GET /gone, Gone's
// middleware and New(slow); GET /timeout,
// middleware.ContextTimeout(time.Nanosecond) and New(slow).
func CheckErrors(t *testing.T, serve adaptertest.Serve, handled *error, slowDown error) {
	for _, c := range []struct {
		path, body, retry string
		status            int
		err               error
	}{
		{"/denied", "ok", "", 200, nil},
		{"/denied", `{"message":"slow down"}`, "60", 429, slowDown},
		{"/error", `{"message":"Internal Server Error"}`, "", 500, ErrKey},
		{"/gone", "ok", "", 200, nil}, // the first request has no delay
		{"/gone", `{"message":"Internal Server Error"}`, "", 500, context.Canceled},
		{"/timeout", "ok", "", 200, nil},
		{"/timeout", `{"message":"Service Unavailable"}`, "", 503, context.DeadlineExceeded},
	} {
		*handled = nil
		res := serve(httptest.NewRequest(http.MethodGet, c.path, nil))
		body, _ := io.ReadAll(res.Body)
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.body, strings.TrimSpace(string(body)), c.path)
		assert.Equal(t, c.retry, res.Header.Get(answer.HeaderRetryAfter), c.path)
		assert.ErrorIs(t, *handled, c.err, c.path) // nil: none
	}
}

// RulesRoute checks that a rule's descriptor key route is the Echo route
// pattern, c.Path(), known to middleware on e.Use: /items/1 and /items/2
// share its counter, and a rule on "GET /items/:id" applies to both. A
// request that matches no route has its path for a route, with a counter
// of its own. mount returns an Echo instance with e.Use(Rules(eng)) and
// the route GET /items/:id.
func RulesRoute(t *testing.T, mount func(eng *rules.Engine) adaptertest.Serve) {
	eng, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "route", Value: "GET /items/:id", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}})
	serve := mount(eng)
	for _, c := range []struct {
		path, limit, remaining string
		status                 int
	}{{"/items/1", "2", "1", 200}, {"/items/2", "2", "0", 200}, {"/nowhere/3", "3", "2", 404}} {
		res := serve(httptest.NewRequest(http.MethodGet, c.path, nil))
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.limit, res.Header.Get(answer.HeaderLimit), c.path)
		assert.Equal(t, c.remaining, res.Header.Get(answer.HeaderRemaining), c.path)
	}
}

// IPNet returns the prefix cidr as Echo's trust options take it, and
// panics if cidr is not one.
func IPNet(cidr string) *net.IPNet {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		panic(err)
	}
	return n
}

// A Forged is a setting of RunForged: an Echo instance whose e.IPExtractor
// is Extract, of Echo's type X, limited by Key (the Config's default,
// PeerIP, when nil), served from Peer. Refused lists what ClientIP's
// logged error says where it refuses the setting; it is nil where the
// setting is safe.
type Forged[C Context, X any] struct {
	Name    string
	Extract X
	Key     func(C) (string, error)
	Peer    string
	Refused []string
}

// NewForged returns the Forged of its arguments, in the order of its
// fields, with refused its Refused.
func NewForged[C Context, X any](name string, x X, key func(C) (string, error), peer string, refused ...string) Forged[C, X] {
	return Forged[C, X]{name, x, key, peer, refused}
}

// RunForged checks that, at a limit of 3, six requests of one client that
// rotates X-Forwarded-For and X-Real-IP get 3 through under every safe
// setting, and none (500) where ClientIP refuses e.IPExtractor, with an
// error, logged, that says what to change. Besides the cases, it runs
// PeerIP, the Config's default key and IP behind a proxy, all without an
// extractor; IP under believer, which it ignores, and ClientIP under
// believer and under an extractor of X-Real-IP from any peer, both
// refused. Each Echo instance keeps its own verdict: each is served in
// turn with one keyed by ClientIP under direct, which keeps its 3.
//
// direct is echo.ExtractIPDirect(), believer an extractor of
// X-Forwarded-For that trusts every IPv4 peer, and serving returns an Echo
// instance with the extractor x and one route, GET /, limited by
// NewWithConfig(Config{Limiter: lim, Key: key, Logger: log}).
func RunForged[C Context, K ~func(C) (string, error), O any, X ~func(*http.Request) string](t *testing.T, a API[C, K, O], direct, believer X,
	serving func(x X, key func(C) (string, error), lim *core.Limiter, log *slog.Logger) http.Handler, cases ...Forged[C, X]) {
	ip, err := a.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	_, err = a.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
	realIP := X(func(r *http.Request) string { return r.Header.Get("X-Real-IP") })
	cases = append([]Forged[C, X]{
		{"PeerIP, no extractor", nil, a.PeerIP, "203.0.113.7:4711", nil},
		{"Config without Key (PeerIP)", nil, nil, "203.0.113.7:4711", nil},
		{"IP via proxy", nil, ip, "10.0.0.2:4711", nil},
		{"IP ignores e.IPExtractor", believer, ip, "203.0.113.7:4711", nil},
		{"ClientIP, XFF trusting every IPv4 peer", believer, a.ClientIP, "203.0.113.7:4711", []string{"e.IPExtractor", "X-Forwarded-For", "192.0.2.1"}},
		{"ClientIP, X-Real-IP from anyone", realIP, a.ClientIP, "203.0.113.7:4711", []string{"e.IPExtractor", "X-Real-Ip", "192.0.2.1"}},
	}, cases...)
	instance := func(x X, key func(C) (string, error), log io.Writer) http.Handler {
		lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
		return serving(x, key, lim, adaptertest.NewLogger(log))
	}
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			var log bytes.Buffer
			e, ref := instance(tt.Extract, tt.Key, &log), instance(direct, a.ClientIP, io.Discard)
			got, gotSafe := map[int]int{}, map[int]int{}
			for i := range 6 {
				got[forged(e, tt.Peer, i)]++
				gotSafe[forged(ref, "203.0.113.7:4711", i)]++
			}
			want := map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}
			assert.Equal(t, want, gotSafe, "a safe instance, served in turn")
			if tt.Refused != nil {
				want = map[int]int{http.StatusInternalServerError: 6}
			}
			assert.Equal(t, want, got)
			for _, w := range tt.Refused {
				assert.Contains(t, log.String(), w)
			}
		})
	}
}

// forged sends h the client's request i from peer, with forged
// X-Forwarded-For and X-Real-IP, different for each i (or, from the proxy
// at 10.0.0.2, with the client's address appended to X-Forwarded-For and
// written over X-Real-IP, as a proxy does), and returns its status.
func forged(h http.Handler, peer string, i int) int {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	client := "198.51.100." + strconv.Itoa(i+1)
	r.Header.Set("X-Forwarded-For", client)
	r.Header.Set("X-Real-IP", client)
	if strings.HasPrefix(peer, "10.0.0.2:") {
		r.Header.Set("X-Forwarded-For", client+", 203.0.113.50")
		r.Header.Set("X-Real-IP", "203.0.113.50")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// A KeyCase is a request keyed by Key in a context of the Echo instance
// E (see RunKeys), from Peer, with X-Forwarded-For XFF unless it is "".
// Its key must be Want, and its error wrap Err and say Msg; an error that
// says Msg and wraps no Err must be a server error (not
// keyfuncs.ErrMissing).
type KeyCase[C Context, E any] struct {
	Name      string
	E         E
	Key       func(C) (string, error)
	Peer, XFF string
	Want      string
	Err       error
	Msg       string
}

// NewKeyCase returns the KeyCase of its arguments, in the order of its
// fields.
func NewKeyCase[C Context, E any](name string, e E, key func(C) (string, error), peer, xff, want string, err error, msg string) KeyCase[C, E] {
	return KeyCase[C, E]{name, e, key, peer, xff, want, err, msg}
}

// RunKeys checks the key of each case's request to /?api_key=q-1, in
// newContext(e, r), the context of the request r in the Echo instance e,
// with c.Set("n", 42) and c.Set("user", 1.5): besides the cases, the
// RemoteAddr forms of net/http that PeerIP and IP refuse, a Unix socket's
// (400) and one rewritten from a header without a port (500); Adapt,
// ContextValue, and the misuses that fail every request. Those use the
// zero E.
func RunKeys[C Context, K ~func(C) (string, error), O, E any](t *testing.T, a API[C, K, O], newContext func(e E, r *http.Request) C,
	cases ...KeyCase[C, E]) {
	ip, err := a.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	var none E
	cases = append(cases, []KeyCase[C, E]{
		{"PeerIP, a Unix socket", none, a.PeerIP, "@", "", "", keyfuncs.ErrMissing, ""},
		{"PeerIP, RemoteAddr rewritten", none, a.PeerIP, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"},
		{"IP, RemoteAddr rewritten", none, ip, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"},
		{"Adapt", none, a.Adapt(keyfuncs.Query("api_key")), "203.0.113.7:1", "", "q-1", nil, ""},
		{"Adapt(nil)", none, a.Adapt(nil), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
		{`Header("")`, none, a.Header(""), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
		{"ContextValue of an int", none, a.ContextValue("n"), "203.0.113.7:1", "", "42", nil, ""},
		{"User (ContextValue) of a float", none, a.User("user"), "203.0.113.7:1", "", "", nil,
			fmt.Sprintf(`%s: c.Get("user") has unsupported type float64`, a.Package)},
	}...)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/?api_key=q-1", nil)
			r.RemoteAddr = tc.Peer
			if tc.XFF != "" {
				r.Header.Set("X-Forwarded-For", tc.XFF)
			}
			c := newContext(tc.E, r)
			c.Set("n", 42)
			c.Set("user", 1.5)
			k, err := tc.Key(c)
			assert.Equal(t, tc.Want, k)
			switch {
			case tc.Err != nil:
				assert.ErrorIs(t, err, tc.Err)
			case tc.Msg != "":
				assert.NotErrorIs(t, err, keyfuncs.ErrMissing, "a server error")
			default:
				assert.NoError(t, err)
			}
			if tc.Msg != "" {
				assert.ErrorContains(t, err, tc.Msg)
			}
		})
	}
}

// Bench benchmarks serve, which serves one request, and fails unless it
// answers 200 before and after: the benchmark is of the allowed path.
func Bench(b *testing.B, serve func() int) {
	if s := serve(); s != http.StatusOK {
		b.Fatalf("status %d", s)
	}
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
	b.StopTimer()
	if s := serve(); s != http.StatusOK {
		b.Fatalf("status %d: the benchmark must stay on the allowed path", s)
	}
}
