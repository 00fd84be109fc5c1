// Package echotest holds the tests that the Echo v4 and Echo v5 adapters
// share, generic over the request context C of either major (echo.Context
// in v4, *echo.Context in v5) so that it imports neither, as package
// echoport does for their code: the key and options of a scenario
// ([API.Build]), the error-handler path ([CheckErrors]), rules' routes
// ([RulesRoute]), client addresses under e.IPExtractor ([RunForged],
// and after it changes, [RunLate]), key functions ([RunKeys]) and the
// benchmark loop ([Bench]).
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
	"sync"
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

// A KeyOf builds a key function on an Echo instance of type E, as
// ClientIP does; Fixed gives the KeyOf of a key that needs none.
type KeyOf[C Context, E any] func(e E) (func(C) (string, error), error)

// Fixed returns the KeyOf that gives key on every instance.
func Fixed[C Context, E any](key func(C) (string, error)) KeyOf[C, E] {
	return func(E) (func(C) (string, error), error) { return key, nil }
}

// A Forged is a setting of RunForged: an Echo instance whose e.IPExtractor
// is Extract, of Echo's type X, limited by the key that Key builds on it
// (the Config's default, PeerIP, when nil), served from Peer. Refused
// lists what ClientIP's error says where it refuses the setting when the
// key is built; it is nil where the setting is safe.
type Forged[C Context, E, X any] struct {
	Name    string
	Extract X
	Key     KeyOf[C, E]
	Peer    string
	Refused []string
}

// NewForged returns the Forged of its arguments, in the order of its
// fields, with refused its Refused.
func NewForged[C Context, E, X any](name string, x X, key KeyOf[C, E], peer string, refused ...string) Forged[C, E, X] {
	return Forged[C, E, X]{name, x, key, peer, refused}
}

// RunForged checks that, at a limit of 3, six requests of one client that
// rotates X-Forwarded-For and X-Real-IP get 3 through under every safe
// setting, and that where clientIP (the adapter's ClientIP) refuses
// e.IPExtractor it returns, when the key is built, an error wrapping
// keyfuncs.ErrMisconfigured that says what to change, and no key. Besides
// the cases, it runs PeerIP, the Config's default key and IP behind a
// proxy, all without an extractor; IP under believer, which it ignores;
// and ClientIP under believer, under an extractor of X-Real-IP from any
// peer and under one that invents an address, all refused.
//
// believer is an extractor of X-Forwarded-For that trusts every IPv4 peer,
// and serving returns an Echo instance with the extractor x and one route,
// GET /, limited by NewWithConfig(Config{Limiter: lim, Key: key(e), Logger:
// log}), or key's error.
func RunForged[C Context, K ~func(C) (string, error), O, E any, X ~func(*http.Request) string](t *testing.T, a API[C, K, O],
	clientIP func(e E) (K, error), believer X,
	serving func(x X, key KeyOf[C, E], lim *core.Limiter, log *slog.Logger) (http.Handler, error), cases ...Forged[C, E, X]) {
	ip, err := a.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	_, err = a.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
	realIP := X(func(r *http.Request) string { return r.Header.Get("X-Real-IP") })
	inventing := X(func(*http.Request) string { return "unknown" })
	ci := KeyOf[C, E](func(e E) (func(C) (string, error), error) {
		k, err := clientIP(e)
		if err != nil {
			return nil, err
		}
		return k, nil
	})
	cases = append([]Forged[C, E, X]{
		{"PeerIP, no extractor", nil, Fixed[C, E](a.PeerIP), "203.0.113.7:4711", nil},
		{"Config without Key (PeerIP)", nil, nil, "203.0.113.7:4711", nil},
		{"IP via proxy", nil, Fixed[C, E](ip), "10.0.0.2:4711", nil},
		{"IP ignores e.IPExtractor", believer, Fixed[C, E](ip), "203.0.113.7:4711", nil},
		{"ClientIP, XFF trusting every IPv4 peer", believer, ci, "203.0.113.7:4711", []string{"e.IPExtractor", "X-Forwarded-For", "192.0.2.1"}},
		{"ClientIP, X-Real-IP from anyone", realIP, ci, "203.0.113.7:4711", []string{"e.IPExtractor", "X-Real-Ip", "192.0.2.1"}},
		{"ClientIP, an extractor that invents", inventing, ci, "203.0.113.7:4711", []string{"e.IPExtractor", "unknown"}},
	}, cases...)
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			var log bytes.Buffer
			lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
			e, err := serving(tt.Extract, tt.Key, lim, adaptertest.NewLogger(&log))
			if tt.Refused != nil {
				require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
				for _, w := range tt.Refused {
					assert.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			got := map[int]int{}
			for i := range 6 {
				got[forged(e, tt.Peer, i)]++
			}
			assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}, got)
			assert.Empty(t, log.String())
		})
	}
}

// A Late is a case of RunLate: an extractor, of Echo's type X, set after
// ClientIP checked the instance, that ClientIP must not honour.
type Late[X any] struct {
	Name    string
	Extract X
}

// RunLate checks, on a real server at a limit of 3 a minute, that ClientIP
// keeps checking e.IPExtractor after it was built. serve returns an
// instance whose extractor is echo.ExtractIPDirect(), limited by
// New(lim, ClientIP(e)), with one route, GET /, and set, which replaces
// its extractor. For each case, its extractor is set: 20 requests, each
// forging another address in X-Forwarded-For and X-Real-IP, get 3 through
// (keyed by the TCP peer), and slog.Default() has one error line that
// says so. Then loopback, an extractor that trusts only the test's own
// address as a proxy, is set and followed: each forwarded address is a
// client of its own, and one line says the episode ended, with its 20
// requests.
func RunLate[X any](t *testing.T, serve func(t *testing.T, lim *core.Limiter) (h http.Handler, set func(x X)), loopback X,
	cases ...Late[X]) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			var log lockedBuffer
			prev := slog.Default()
			slog.SetDefault(adaptertest.NewLogger(&log))
			t.Cleanup(func() { slog.SetDefault(prev) })

			lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
			h, set := serve(t, lim)
			srv := httptest.NewServer(h)
			defer srv.Close()

			set(tt.Extract)
			assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 17}, statuses(t, srv.URL, 0, 20))
			assert.Equal(t, 1, strings.Count(log.String(), "keying by the TCP peer"), log.String())
			assert.Contains(t, log.String(), "level=ERROR")

			set(loopback)
			assert.Equal(t, map[int]int{http.StatusOK: 5}, statuses(t, srv.URL, 20, 5), "followed: each forwarded address a client")
			assert.Equal(t, 1, strings.Count(log.String(), "is safe again"), log.String())
			assert.Contains(t, log.String(), "peer_keyed_requests=20")
		})
	}
}

// statuses sends n requests to url, the i-th forging the address
// 198.51.100.(from+i+1) in X-Forwarded-For and X-Real-IP, and counts
// their statuses.
func statuses(t *testing.T, url string, from, n int) map[int]int {
	got := map[int]int{}
	for i := range n {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		ip := "198.51.100." + strconv.Itoa(from+i+1)
		req.Header.Set("X-Forwarded-For", ip)
		req.Header.Set("X-Real-IP", ip)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		got[res.StatusCode]++
	}
	return got
}

// lockedBuffer is a bytes.Buffer safe for a server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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
