package adaptertest

import (
	"bufio"
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
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// Serve serves one request through a framework and returns the response.
type Serve func(*http.Request) *http.Response

// Setup is what a Mount builds: the middleware of the adapter under test
// with these settings, in the framework's types.
type Setup struct {
	// Limiter is the limiter the middleware limits requests with.
	Limiter *core.Limiter

	// Key is the key function of the case, on the value of the request
	// header KeyHeader ("" when the request has none): the adapter's key
	// function returns Key(value), error included.
	Key func(value string) (string, error)

	// Headers is the header style of the middleware (its WithHeaders).
	Headers answer.Style

	// Logger is the logger of the middleware (its WithLogger).
	Logger *slog.Logger

	// DecisionInContext says whether the middleware is given its
	// WithDecisionInContext option.
	DecisionInContext bool
}

// Mount builds the adapter under test: a router of the framework with the
// adapter's middleware, configured as s says, on every route, and one
// route, GET /, whose handler answers 200 with the body
// Body(DecisionFrom(...)): the text of the decision that the adapter's
// DecisionFrom reads ("ok" when it finds none).
type Mount func(t *testing.T, s Setup) Serve

// Body is the body of the handler of the routers of Run and
// RunScenarios: "ok" when ok is false (the middleware put no decision
// where DecisionFrom reads), and the decision's numbers otherwise.
func Body(d core.Decision, ok bool) string {
	if !ok {
		return "ok"
	}
	return fmt.Sprintf("allowed=%t name=%s quota=%d remaining=%d window=%s reset=%s retry=%s delay=%s soft=%t shadow=%t granted=%t elastic=%t",
		d.Allowed, d.Name, d.Quota, d.Remaining, d.Window, d.ResetAfter, d.RetryAfter, d.Delay, d.Soft, d.Shadow, d.Granted, d.Elastic)
}

// Handler returns the Serve of an http.Handler, such as a Gin engine, an
// Echo instance or a Chi router.
func Handler(h http.Handler) Serve {
	return func(r *http.Request) *http.Response {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}
}

// Wire returns the Serve of a server that reads requests from a
// net.Conn, such as fasthttp.ServeConn(c, app.Handler()) under Fiber.
// Each request is written in the wire format, every line of its header
// fields and its body, to a connection of its own whose RemoteAddr is the
// request's RemoteAddr (a *net.TCPAddr); serveConn serves the connection
// until it has nothing more to read, and what it wrote is read as the
// response. Where that fails, the Serve reports the error on t and answers
// 502 with the error as the body.
func Wire(t testing.TB, serveConn func(net.Conn) error) Serve {
	return func(r *http.Request) *http.Response {
		peer, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
		c := &wireConn{peer: peer}
		if err == nil {
			err = r.Write(&c.in)
		}
		if err == nil {
			err = serveConn(c)
		}
		var res *http.Response
		if err == nil {
			res, err = http.ReadResponse(bufio.NewReader(&c.out), r)
		}
		if err != nil {
			t.Errorf("adaptertest: serving %s %s from %s over a connection: %v", r.Method, r.URL, r.RemoteAddr, err)
			w := httptest.NewRecorder()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return w.Result()
		}
		return res
	}
}

// wireConn is the connection of a request of Wire: it reads the request
// and keeps what the server writes.
type wireConn struct {
	in, out bytes.Buffer
	peer    *net.TCPAddr
}

func (c *wireConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *wireConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *wireConn) Close() error                     { return nil }
func (c *wireConn) LocalAddr() net.Addr              { return wireLocal }
func (c *wireConn) RemoteAddr() net.Addr             { return c.peer }
func (c *wireConn) SetDeadline(time.Time) error      { return nil }
func (c *wireConn) SetReadDeadline(time.Time) error  { return nil }
func (c *wireConn) SetWriteDeadline(time.Time) error { return nil }

// wireLocal is the server's end of Wire's connections.
var wireLocal = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 80}

// KeyHeader is the header the suite keys requests by.
const KeyHeader = "X-Client"

// Fields are the response header fields compared with stdhttp's.
var Fields = []string{
	answer.HeaderLimit, answer.HeaderRemaining, answer.HeaderReset,
	answer.HeaderRetryAfter, answer.HeaderXRetryAfter,
	answer.HeaderRateLimit, answer.HeaderRateLimitPolicy,
	answer.HeaderSoft, answer.HeaderElastic,
	"Cache-Control",
}

// A request of a case: the key header's value ("" sends none), sent when
// the suite's clock reads epoch + at.
type request struct {
	client string
	at     time.Duration
}

type testCase struct {
	name     string
	limit    core.Limit
	opts     []core.Option
	store    func(clock *storetest.Clock) core.Store // nil: a memory store on the case's clock
	key      func(value string) (string, error)      // nil: defaultKey
	headers  answer.Style
	decision bool // WithDecisionInContext
	requests []request
	// plan, when set, makes the case's limiter a plan limiter
	// (core.NewPlanLimiter) of the book's plans, and limit is unused.
	plan *book
	// before holds what to do before the request of each index it has:
	// change the book, or act on the two limiters, the adapter's and
	// stdhttp's, as an operator would (Grant, Reset).
	before map[int]func(t *testing.T, lims []*core.Limiter)
	// check, when set, checks the adapter's responses beyond their
	// agreeing with stdhttp's; log is the adapter's log so far.
	check func(t *testing.T, i int, r response, log string)
}

// failing is a store whose counters always fail.
// DownStore returns a store whose every call fails, as a store across a
// network that is down: for the store-failure cases of a port's own tests.
func DownStore() core.Store { return failing{} }

type failing struct{}

func (failing) Bind([]core.Limit) (core.Counter, error) { return failing{}, nil }

var errDown = errors.New("adaptertest: store down")

func (failing) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errDown
}

func (failing) Peek(context.Context, string, int, []core.Decision) error { return errDown }

func (failing) Refund(context.Context, string, int, time.Time, []core.Decision) error { return errDown }
func (failing) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, errDown
}
func (failing) Reset(context.Context, string) (bool, error)             { return false, errDown }
func (failing) Grant(context.Context, string, int, time.Duration) error { return errDown }

// defaultKey is the key function of most cases: the header's value, and
// a missing key (400) when there is none.
func defaultKey(value string) (string, error) {
	if value == "" {
		return "", fmt.Errorf("adaptertest: no %s header: %w", KeyHeader, keyfuncs.ErrMissing)
	}
	return value, nil
}

// secret is in the text of the error of secretKey, which must reach the
// log and never a response.
const secret = "postgres://ratekit:hunter2@db.internal:5432/keys"

var errSecret = errors.New("adaptertest: key lookup in " + secret + ": connection refused")

// secretKey fails the requests of client "db-down" with errSecret.
func secretKey(value string) (string, error) {
	if value == "db-down" {
		return "", errSecret
	}
	return defaultKey(value)
}

func repeat(client string, n int) []request {
	rs := make([]request, n)
	for i := range rs {
		rs[i].client = client
	}
	return rs
}

func at(d time.Duration, rs []request) []request {
	for i := range rs {
		rs[i].at = d
	}
	return rs
}

func seqOf(parts ...[]request) []request {
	var all []request
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// param returns the value of parameter name (";name=value") in a
// structured-field item, "" if absent.
func param(item, name string) string {
	for _, p := range strings.Split(item, ";")[1:] {
		if k, v, ok := strings.Cut(p, "="); ok && strings.TrimSpace(k) == name {
			return v
		}
	}
	return ""
}

func cases() []testCase {
	quiet := core.WithLogger(slog.New(slog.DiscardHandler))
	down := func(*storetest.Clock) core.Store { return failing{} }
	return append([]testCase{
		{name: "fixed-window/x-ratelimit", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
			requests: repeat("alice", 5)},
		{name: "token-bucket/ietf", limit: core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2},
			headers: answer.IETF, requests: repeat("alice", 4)},
		{name: "sliding-window-counter/both", limit: core.Limit{Name: "api", Rate: core.PerHour(2)},
			headers: answer.Both, requests: repeat("alice", 3)},
		{name: "no-headers", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)},
			headers: answer.NoHeaders, requests: repeat("alice", 2),
			check: func(t *testing.T, i int, r response, _ string) {
				if r.header.Get(answer.HeaderLimit) != "" || r.header.Get(answer.HeaderRateLimit) != "" {
					t.Errorf("request %d: rate-limit fields under NoHeaders: %v", i, r.header)
				}
				if want := []string{"", "60"}[i]; r.header.Get(answer.HeaderRetryAfter) != want {
					t.Errorf("request %d: Retry-After %q, want %q", i, r.header.Get(answer.HeaderRetryAfter), want)
				}
			}},
		// On a rejection, the IETF RateLimit field's t is the time until a
		// retry is admitted, Retry-After, not the time until the bucket is
		// full again (20 s here, twice the 10 s of a token).
		{name: "ietf/429-t-is-retry-after", limit: core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2},
			headers: answer.IETF, requests: seqOf(repeat("alice", 3), at(4*time.Second, repeat("alice", 1))),
			check: func(t *testing.T, i int, r response, _ string) {
				rl := r.header.Get(answer.HeaderRateLimit)
				if rl == "" {
					t.Fatalf("request %d: no %s field", i, answer.HeaderRateLimit)
				}
				if r.status != http.StatusTooManyRequests {
					return
				}
				want := []string{2: "10", 3: "6"}[i]
				if ra := r.header.Get(answer.HeaderRetryAfter); ra != want || param(rl, "t") != ra {
					t.Errorf("request %d: %s %q, Retry-After %q: want t = Retry-After = %s", i, answer.HeaderRateLimit, rl, ra, want)
				}
				if p := r.header.Get(answer.HeaderRateLimitPolicy); p != `"api";q=2;w=20` {
					t.Errorf("request %d: %s %q, want %q", i, answer.HeaderRateLimitPolicy, p, `"api";q=2;w=20`)
				}
			}},
		{name: "keys-are-separate", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)},
			requests: []request{{client: "alice"}, {client: "bob"}, {client: "alice"}, {client: "bob"}, {client: "carol"}}},
		{name: "missing-key", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)},
			requests: []request{{}, {}, {client: "alice"}}},
		// A key function's error goes to the log, once per episode, and
		// never to the client: the 500 has fixed words.
		{name: "key-error-stays-in-log", limit: core.Limit{Name: "api", Rate: core.PerMinute(10)}, key: secretKey,
			requests: []request{{client: "alice"}, {client: "db-down"}, {client: "db-down"}, {client: "db-down"}, {client: "alice"}},
			check: func(t *testing.T, i int, r response, log string) {
				if want := []int{200, 500, 500, 500, 200}[i]; r.status != want {
					t.Fatalf("request %d: status %d, want %d", i, r.status, want)
				}
				for f, v := range r.header {
					if strings.Contains(strings.Join(v, ","), "hunter2") {
						t.Fatalf("request %d: field %s = %q shows the key error", i, f, v)
					}
				}
				if strings.Contains(r.body, "hunter2") || strings.Contains(r.body, "connection refused") {
					t.Fatalf("request %d: body %q shows the key error", i, r.body)
				}
				lines := strings.Count(log, "\n")
				if want := []int{0, 1, 1, 1, 2}[i]; lines != want {
					t.Fatalf("request %d: %d log lines, want %d:\n%s", i, lines, want, log)
				}
				if i == 1 && !strings.Contains(log, secret) {
					t.Errorf("request %d: the log lacks the key error:\n%s", i, log)
				}
				if i == 4 && !strings.Contains(log, "failed_requests=3") {
					t.Errorf("request %d: the log lacks the recovery with 3 failed requests:\n%s", i, log)
				}
			}},
		{name: "fail-open", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)},
			opts: []core.Option{quiet}, store: down, requests: repeat("alice", 3)},
		{name: "fail-closed", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)},
			opts: []core.Option{quiet, core.WithFailClosed()}, store: down, requests: repeat("alice", 2)},
		{name: "fail-open/decision-in-context", limit: core.Limit{Name: "api", Rate: core.PerMinute(1)}, decision: true,
			opts: []core.Option{quiet}, store: down, headers: answer.Both, requests: repeat("alice", 2)},
		{name: "two-limits", limit: core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(2)},
			opts:     []core.Option{core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(3)})},
			requests: repeat("alice", 5)},
		// RateLimit-Policy lists both limits on every response, whichever
		// decided, so that it stays the same from one response to the
		// next (the IETF draft: it SHOULD be stable); RateLimit names the
		// limit that decided: the burst for the first three requests
		// (fewer remaining, then its rejection), the hourly limit once the
		// burst has refilled (a second later) and the hour has 0 left.
		{name: "two-limits/ietf-policy-stable", limit: core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(2)},
			opts:     []core.Option{core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(3)})},
			headers:  answer.IETF,
			requests: seqOf(repeat("alice", 3), at(time.Second, repeat("alice", 2))),
			check: func(t *testing.T, i int, r response, _ string) {
				const policies = `"burst";q=2;w=1, "hourly";q=3;w=3600`
				if p := r.header.Get(answer.HeaderRateLimitPolicy); p != policies {
					t.Errorf("request %d (status %d): %s %q, want every limit: %q", i, r.status, answer.HeaderRateLimitPolicy, p, policies)
				}
				want := []string{`"burst";r=1;t=1`, `"burst";r=0;t=1`, `"burst";r=0;t=1`, `"hourly";r=0;t=3599`, `"hourly";r=0;t=3599`}[i]
				if rl := r.header.Get(answer.HeaderRateLimit); rl != want {
					t.Errorf("request %d: %s %q, want the deciding limit's %q", i, answer.HeaderRateLimit, rl, want)
				}
				if wantStatus := []int{200, 200, 429, 200, 429}[i]; r.status != wantStatus {
					t.Errorf("request %d: status %d, want %d", i, r.status, wantStatus)
				}
			}},
		// A request that one limit rejects is counted by none: the six
		// requests the minute limit rejects, 0.1 s before the minute ends,
		// leave the second limit's 7 tokens alone, so that in the next
		// minute the minute limit (2 left) still decides, not the second
		// limit (which would have 1 left had it counted them).
		{name: "two-limits/all-or-nothing", limit: core.Limit{Name: "second", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)},
			opts:     []core.Option{core.WithLimit(core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})},
			headers:  answer.Both,
			requests: seqOf(at(59900*time.Millisecond, repeat("alice", 9)), at(time.Minute, repeat("alice", 1))),
			check: func(t *testing.T, i int, r response, _ string) {
				if p, want := r.header.Get(answer.HeaderRateLimitPolicy), `"second";q=10;w=1, "minute";q=3;w=60`; p != want {
					t.Errorf("request %d: %s %q, want every limit: %q", i, answer.HeaderRateLimitPolicy, p, want)
				}
				want := http.StatusOK
				if i >= 3 && i < 9 {
					want = http.StatusTooManyRequests
				}
				if r.status != want {
					t.Fatalf("request %d: status %d, want %d (3 per minute)", i, r.status, want)
				}
				if i == 9 {
					if l, rem := r.header.Get(answer.HeaderLimit), r.header.Get(answer.HeaderRemaining); l != "3" || rem != "2" {
						t.Fatalf("request %d: limit %q, remaining %q; want the minute limit with 2 left, the rejections not counted by the second limit", i, l, rem)
					}
				}
			}},
		{name: "soft-throttling", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
			opts: []core.Option{core.WithSoftPercent(40)}, requests: repeat("alice", 8),
			check: func(t *testing.T, i int, r response, _ string) {
				if want := []string{5: "true", 6: "true", 7: ""}[i]; r.header.Get(answer.HeaderSoft) != want {
					t.Errorf("request %d: %s %q, want %q", i, answer.HeaderSoft, r.header.Get(answer.HeaderSoft), want)
				}
			}},
		// Always room: 5 a minute stretched by 40% to 7, the two beyond the
		// limit marked, with the limit and 0 remaining.
		{name: "elastic-throttling", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
			opts: []core.Option{core.WithElastic(40, func() bool { return true })}, requests: repeat("alice", 8),
			check: func(t *testing.T, i int, r response, _ string) {
				want := []string{5: "true", 6: "true", 7: ""}[i]
				if got := r.header.Get(answer.HeaderElastic); got != want {
					t.Errorf("request %d: %s %q, want %q", i, answer.HeaderElastic, got, want)
				}
				if i >= 4 && i <= 6 && (r.header.Get(answer.HeaderLimit) != "5" || r.header.Get(answer.HeaderRemaining) != "0") {
					t.Errorf("request %d: limit %q remaining %q, want 5 and 0", i, r.header.Get(answer.HeaderLimit), r.header.Get(answer.HeaderRemaining))
				}
				if wantStatus := []int{5: 200, 6: 200, 7: 429}[i]; i >= 5 && r.status != wantStatus {
					t.Errorf("request %d: status %d, want %d", i, r.status, wantStatus)
				}
			}},
		// The decision reaches the handler, which writes it into the body.
		{name: "decision-in-context", limit: core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
			decision: true, requests: seqOf(repeat("alice", 4), []request{{}}),
			check: func(t *testing.T, i int, r response, _ string) {
				if i >= 3 {
					return
				}
				if want := "remaining=" + strconv.Itoa(2-i) + " "; !strings.Contains(r.body, want) || !strings.HasPrefix(r.body, "allowed=true name=api quota=3 ") {
					t.Errorf("request %d: the handler read %q, want the decision with %s", i, r.body, want)
				}
			}},
		{name: "decision-in-context/no-headers", limit: core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2},
			decision: true, headers: answer.NoHeaders, requests: repeat("alice", 3),
			check: func(t *testing.T, i int, r response, _ string) {
				if i < 2 && !strings.Contains(r.body, "remaining="+strconv.Itoa(1-i)+" ") {
					t.Errorf("request %d: the handler read %q, want the decision", i, r.body)
				}
			}},
	}, planCases()...)
}

// Run runs every case through the adapter that mount builds and through
// stdhttp, and fails the test where any response differs in status,
// body, or the header fields of Fields (and Content-Type on responses
// that do not pass), or where the logs of the two middlewares differ.
//
// The cases: the three header styles and none; the IETF RateLimit field
// of a rejection, whose t is Retry-After; separate keys; a missing key
// (400); a key function whose error, which holds a secret, is logged
// once per episode and answered with a fixed 500; a store failing open,
// failing closed, and failing open with the decision in the context; two
// limits on a limiter, all or nothing (a rejection counts in neither),
// whose IETF RateLimit-Policy lists both, whichever decides;
// soft throttling; the decision read by the handler
// (WithDecisionInContext), with and without header fields; and a plan
// limiter (core.NewPlanLimiter) of a free plan of 2 requests per minute
// and a paid plan of 5: header fields and decisions of each client's
// plan, an upgrade that keeps the client's count (fixed window and
// sliding window counter), a failing plan function and an invalid plan
// limit (500, logged once per episode, not counted), and an operator's
// Grant and Reset of a key over its plan's limit.
func Run(t *testing.T, mount Mount) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock(epoch)
			var adapterLog, referenceLog SyncBuffer
			key := tc.key
			if key == nil {
				key = defaultKey
			}
			lims := []*core.Limiter{newLimiter(t, tc, clock), newLimiter(t, tc, clock)}
			setup := func(lim *core.Limiter, log *SyncBuffer) Setup {
				return Setup{Limiter: lim, Key: key, Headers: tc.headers,
					Logger: NewLogger(log), DecisionInContext: tc.decision}
			}
			adapter := mount(t, setup(lims[0], &adapterLog))
			reference := stdhttpServe(setup(lims[1], &referenceLog))
			for i, rq := range tc.requests {
				clock.Set(epoch.Add(rq.at))
				if do := tc.before[i]; do != nil {
					do(t, lims)
				}
				want := read(t, reference(newRequest(rq)))
				got := read(t, adapter(newRequest(rq)))
				what := fmt.Sprintf("request %d (client %q)", i, rq.client)
				same(t, what, want, got, Fields)
				if w, g := referenceLog.String(), adapterLog.String(); w != g {
					t.Fatalf("%s: the adapter logged\n%s\nwant (as stdhttp)\n%s", what, g, w)
				}
				if tc.check != nil {
					tc.check(t, i, got, adapterLog.String())
				}
			}
		})
	}
}

// stdhttpServe is the reference: stdhttp's middleware, as s says, in
// front of the handler of Mount.
func stdhttpServe(s Setup) Serve {
	opts := []stdhttp.Option{stdhttp.WithHeaders(s.Headers), stdhttp.WithLogger(s.Logger)}
	if s.DecisionInContext {
		opts = append(opts, stdhttp.WithDecisionInContext())
	}
	key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(KeyHeader)) }
	return Handler(stdhttp.New(s.Limiter, key, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, Body(stdhttp.DecisionFrom(r.Context())))
	})))
}

// NewLogger returns a logger that writes text lines without times to w,
// so that logs can be compared: the logger of Setup.
func NewLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// A SyncBuffer is a bytes.Buffer safe for concurrent use, for the logs
// of servers that log from goroutines of their own (frameworks, gRPC,
// watchers).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ok is the handler behind the reference middleware of RunRules: 200,
// "ok".
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

func newLimiter(t *testing.T, tc testCase, clock *storetest.Clock) *core.Limiter {
	t.Helper()
	var store core.Store = &core.MemoryStore{Clock: clock.Now}
	if tc.store != nil {
		store = tc.store(clock)
	}
	opts := append([]core.Option{core.WithStore(store)}, tc.opts...)
	var lim *core.Limiter
	var err error
	if tc.plan != nil {
		lim, err = core.NewPlanLimiter(tc.plan.plan, opts...)
	} else {
		lim, err = core.NewLimiter(tc.limit, opts...)
	}
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
// is clock's (the system clock's when clock is nil): the limiter of an
// adapter's own tests, which replay exact traces without sleeping.
func Limiter(t testing.TB, clock *storetest.Clock, l core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	store := &core.MemoryStore{}
	if clock != nil {
		store.Clock = clock.Now
	}
	lim, err := core.NewLimiter(l, append([]core.Option{core.WithStore(store)}, opts...)...)
	if err != nil {
		t.Fatalf("adaptertest: limiter: %v", err)
	}
	return lim
}
