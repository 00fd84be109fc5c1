package demotest

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// Reference is the program every framework's program must answer as: the
// default program, with the metrics of -metrics.
var Reference = withMetrics(demo.StdHTTP)

// withMetrics returns p with Prometheus metrics.
func withMetrics(p demo.Program) demo.Program {
	p.Metrics = prommetrics.New
	return p
}

// Framework runs the program p of a framework as the default program is
// run: the same requests on p and on Reference get the same answers
// (status, header fields but Date, body) under the flags of every kind,
// and every check of a route (CheckOrders, CheckTimeouts, CheckReports, CheckElastic,
// CheckRulesFile, CheckUpstream, CheckAdmin) passes on p. Demo servers
// of p and Reference on one Redis share their limits.
func Framework(t *testing.T, p demo.Program) {
	t.Run("routes", func(t *testing.T) {
		want, got := routesTranscript(t, Reference), routesTranscript(t, p)
		requireAlike(t, p, want, got)
	})
	t.Run("alike", func(t *testing.T) { checkAlike(t, p) })
	t.Run("fail closed", func(t *testing.T) { checkFailClosed(t, p) })
	t.Run("metrics", func(t *testing.T) { checkMetrics(t, p) })
	t.Run("redis shared", func(t *testing.T) { checkRedisShared(t, p) })
	t.Run("orders", func(t *testing.T) { CheckOrders(t, Start(t, p)) })
	t.Run("timeouts", func(t *testing.T) { CheckTimeouts(t, StartWith(t, p, demo.Fakes{Timeouts: ShortTimeouts})) })
	t.Run("reports", func(t *testing.T) {
		d, g := StartGated(t, p, "-trusted-proxies", "127.0.0.1")
		CheckReports(t, d, g)
	})
	t.Run("elastic", func(t *testing.T) {
		d, g := StartGated(t, p, append(ElasticArgs, "-metrics")...)
		CheckElastic(t, d, g, true)
	})
	t.Run("rules file", func(t *testing.T) { CheckRulesFile(t, p) })
	t.Run("upstream", func(t *testing.T) { CheckUpstream(t, p) })
	t.Run("admin", func(t *testing.T) { CheckAdmin(t, p) })
}

// dump is a response as the programs must agree on it: status, header
// fields but Date, body.
func dump(r Response) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(r.Status) + "\n")
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		if name != "Date" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		b.WriteString(name + ": " + strings.Join(r.Header[name], ", ") + "\n")
	}
	return b.String() + "\n" + r.Body
}

// transcript records what a demo answers.
type transcript struct {
	d     *Demo
	steps []string // "METHOD PATH HEADERS" of each request
	dumps []string
}

func (tr *transcript) do(method, path string, header ...string) Response {
	tr.d.t.Helper()
	r := tr.d.Do(method, path, header...)
	tr.steps = append(tr.steps, strings.Join(append([]string{method, path}, header...), " "))
	tr.dumps = append(tr.dumps, dump(r))
	return r
}

// requireAlike fails unless the transcript of p, got, is Reference's,
// want.
func requireAlike(t *testing.T, p demo.Program, want, got *transcript) {
	t.Helper()
	require.Equal(t, want.steps, got.steps, p.Framework)
	for i := range want.dumps {
		assert.Equal(t, want.dumps[i], got.dumps[i], "%s, request %d: %s", p.Framework, i+1, got.steps[i])
	}
}

// routesTranscript runs the routes of the demo on p: it limits and
// exempts as the default program does.
func routesTranscript(t *testing.T, p demo.Program) *transcript {
	t.Helper()
	d := Start(t, p, "-algorithm", "fixed-window", "-limit", "4")
	tr := &transcript{d: d}
	for i := 1; i <= 4; i++ {
		r := tr.do("GET", "/")
		require.Equal(t, http.StatusOK, r.Status, "request %d", i)
		assert.Equal(t, "hello\n", r.Body)
		assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
		assert.Equal(t, "4", r.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(4-i), r.Header.Get("X-RateLimit-Remaining"))
		assert.Equal(t, "60", r.Header.Get("X-RateLimit-Reset"))
	}
	r := tr.do("GET", "/")
	pr := RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, QuotaExceeded, pr.Type)
	assert.Equal(t, "demo", pr.Limit)
	for name, want := range map[string]string{"X-RateLimit-Limit": "4", "X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset": "60", "Retry-After": "60", "X-RateLimit-Retry-After": "60"} {
		assert.Equal(t, want, r.Header.Get(name), name)
	}
	body := answer.Problem(http.StatusTooManyRequests, &core.Decision{Name: "demo", Quota: 4, RetryAfter: time.Minute}, nil)
	assert.Equal(t, string(body), r.Body, "the problem body of every middleware")

	for range 3 {
		r := tr.do("GET", "/healthz")
		require.Equal(t, http.StatusOK, r.Status, "never limited")
		assert.Equal(t, "ok\n", r.Body)
		assert.Empty(t, r.Header.Values("X-RateLimit-Limit"))
	}
	assert.Equal(t, http.StatusOK, tr.do("HEAD", "/healthz").Status)

	for i := 1; i <= 5; i++ {
		r := tr.do("POST", "/login")
		require.Equal(t, http.StatusOK, r.Status, "login %d: GET / being exhausted does not matter", i)
		assert.Equal(t, "logged in\n", r.Body)
		assert.Equal(t, "5", r.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(5-i), r.Header.Get("X-RateLimit-Remaining"))
	}
	r = tr.do("POST", "/login")
	assert.Equal(t, "login", RequireProblem(t, r, http.StatusTooManyRequests).Limit)
	assert.Equal(t, "60", r.Header.Get("Retry-After"))
	RequireProblem(t, tr.do("GET", "/nothing-here"), http.StatusTooManyRequests)
	RequireProblem(t, tr.do("GET", "/metrics"), http.StatusTooManyRequests) // not served without -metrics

	// A new window: every other request is counted like GET /, then
	// answers 404; logins still have their own counter.
	d.Clock.Advance(time.Minute)
	for i, req := range [][2]string{{"GET", "/nothing-here"}, {"POST", "/"}, {"GET", "/login"}, {"GET", "/healthz/"}} {
		r := tr.do(req[0], req[1])
		require.Equal(t, http.StatusNotFound, r.Status, "%s %s", req[0], req[1])
		assert.Equal(t, "404 page not found\n", r.Body)
		assert.Equal(t, strconv.Itoa(3-i), r.Header.Get("X-RateLimit-Remaining"))
	}
	r = tr.do("HEAD", "/")
	assert.Equal(t, http.StatusTooManyRequests, r.Status, "HEAD / is limited as GET /")
	assert.Equal(t, "60", r.Header.Get("Retry-After"))
	r = tr.do("POST", "/login")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "4", r.Header.Get("X-RateLimit-Remaining"))
	tr.d.Client.CloseIdleConnections() // not a leak of the next demo's
	return tr
}

// checkAlike runs the same requests on p and on Reference under other
// flags, keys and algorithms: the answers are Reference's.
func checkAlike(t *testing.T, p demo.Program) {
	type request struct {
		method, path string
		header       []string
	}
	get := func(path string, header ...string) request { return request{"GET", path, header} }
	login := func(header ...string) request { return request{"POST", "/login", header} }
	post := func(path string) request { return request{"POST", path, nil} }
	tests := []struct {
		name string
		args []string
		reqs []request
	}{
		{"defaults", nil, append(slices.Repeat([]request{get("/")}, 11), get("/nothing-here"), login())},
		{"ietf token bucket", []string{"-headers", "ietf", "-algorithm", "token-bucket", "-limit", "6", "-burst", "2"},
			[]request{get("/"), get("/"), get("/"), login(), get("/healthz")}},
		{"both sliding log", []string{"-headers", "both", "-algorithm", "sliding-window-log", "-limit", "2", "-period", "10s"},
			[]request{get("/"), get("/"), get("/"), login()}},
		{"no headers", []string{"-headers", "none", "-limit", "1"}, []request{get("/"), get("/"), login()}},
		{"shaping", []string{"-algorithm", "leaky-bucket", "-limit", "20", "-period", "1s", "-shape", "-max-delay", "60ms"},
			[]request{get("/"), get("/"), get("/")}},
		{"key header", []string{"-key", "header:X-API-Key", "-limit", "1"}, []request{
			get("/", "X-API-Key", "alice"), get("/", "X-API-Key", " alice "), get("/", "X-API-Key", "bob"),
			get("/"), get("/", "X-API-Key", " "), get("/nothing-here"), login(), login("X-API-Key", "alice")}},
		{"key query", []string{"-key", "query:user", "-limit", "1"}, []request{
			get("/?user=alice"), get("/?user=alice&user=bob"), get("/?user=b%6Fb"), get("/?user=bob"),
			get("/"), get("/?user="), get("/?User=carol"), get("/nothing-here?user=dave"), login()}},
		{"trusted proxies", []string{"-trusted-proxies", "10.0.0.0/8, 127.0.0.1", "-ipv6-prefix", "48", "-limit", "1"}, []request{
			get("/", "X-Forwarded-For", "192.0.2.1"), get("/", "X-Forwarded-For", "192.0.2.1"),
			get("/", "X-Forwarded-For", "198.51.100.7, 192.0.2.2"), get("/", "X-Forwarded-For", "192.0.2.2"),
			get("/", "X-Forwarded-For", "192.0.2.3, 10.1.2.3"), get("/", "X-Forwarded-For", "192.0.2.3"),
			get("/", "X-Forwarded-For", "2001:db8:1:1::1"), get("/", "X-Forwarded-For", "2001:db8:1:2::1"),
			get("/", "X-Forwarded-For", "nonsense"), get("/"), get("/"),
			login("X-Forwarded-For", "192.0.2.1"), login("X-Forwarded-For", "192.0.2.1")}},
		{"untrusted forwarded for", []string{"-limit", "1"}, []request{
			get("/", "X-Forwarded-For", "192.0.2.1"), get("/", "X-Forwarded-For", "192.0.2.2")}},
		{"elastic", []string{"-elastic", "100", "-limit", "1", "-headers", "both"}, []request{
			get("/"), get("/"), get("/"), get("/healthz"), get("/nothing-here")}},
		{"reports and upstream", []string{"-limit", "3"}, []request{
			post("/reports?ms=0"), post("/reports?ms=x"), get("/reports"), get("/upstream"), get("/upstream"),
			get("/upstream"), post("/upstream"), {"HEAD", "/upstream", nil}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var trs []*transcript
			for _, prog := range []demo.Program{Reference, p} {
				tr := &transcript{d: Start(t, prog, tt.args...)}
				for _, req := range tt.reqs {
					tr.do(req.method, req.path, req.header...)
				}
				tr.d.Client.CloseIdleConnections() // not a leak of the next demo's
				trs = append(trs, tr)
			}
			requireAlike(t, p, trs[0], trs[1])
		})
	}
}

// checkFailClosed: with the store down and -fail closed, p answers 503
// as Reference does, and still serves /healthz.
func checkFailClosed(t *testing.T, p demo.Program) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop(t)
	// No retries: go-redis would retry each dial at start-up for about
	// 3 s per server; the default's behaviour is the demo's TestRedisDown,
	// and here only the answers are compared.
	var trs []*transcript
	for _, prog := range []demo.Program{Reference, p} {
		tr := &transcript{d: Start(t, prog, "-store", "redis", "-redis", "redis://"+addr+"/0?max_retries=-1", "-fail", "closed")}
		RequireProblem(t, tr.do("GET", "/"), http.StatusServiceUnavailable)
		require.Equal(t, http.StatusOK, tr.do("GET", "/healthz").Status)
		RequireProblem(t, tr.do("POST", "/login"), http.StatusServiceUnavailable)
		tr.d.Client.CloseIdleConnections()
		trs = append(trs, tr)
	}
	requireAlike(t, p, trs[0], trs[1])
}

// checkMetrics: with -metrics, GET /metrics is served by p and never
// limited.
func checkMetrics(t *testing.T, p demo.Program) {
	d := Start(t, p, "-metrics", "-algorithm", "fixed-window", "-limit", "2")
	for range 3 {
		d.Get("/")
	}
	d.Do("POST", "/login")
	var r Response
	for range 5 {
		r = d.Get("/metrics")
		require.Equal(t, http.StatusOK, r.Status)
		assert.Empty(t, r.Header.Values("X-RateLimit-Limit"))
	}
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo"} 2`,
		`ratekit_requests_total{decision="denied",limit="demo"} 1`,
		`ratekit_requests_total{decision="allowed",limit="login"} 1`,
	} {
		assert.Contains(t, r.Body, line+"\n")
	}
}

// checkRedisShared: a demo server of p and one of Reference on one Redis
// share their limits.
func checkRedisShared(t *testing.T, p demo.Program) {
	srv := redistest.Start(t)
	// p last: the idle workers of Fiber's server outlive their
	// connections by up to 10 s, and would count as a leak of a demo
	// started before it and stopped after it (cleanups run last started
	// first).
	var demos []*Demo
	for _, prog := range []demo.Program{Reference, p} {
		demos = append(demos, Start(t, prog, "-store", "redis", "-redis", RedisURL(srv),
			"-algorithm", "fixed-window", "-limit", "7"))
	}
	for i := 1; i <= 7; i++ {
		r := demos[i%len(demos)].Get("/")
		require.Equal(t, http.StatusOK, r.Status, "request %d", i)
		assert.Equal(t, strconv.Itoa(7-i), r.Header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
	for i := 1; i <= 5; i++ {
		require.Equal(t, http.StatusOK, demos[i%len(demos)].Do("POST", "/login").Status, "login %d", i)
	}
	for _, d := range demos {
		RequireProblem(t, d.Get("/"), http.StatusTooManyRequests)
		RequireProblem(t, d.Do("POST", "/login"), http.StatusTooManyRequests)
	}
	for _, d := range demos {
		d.Client.CloseIdleConnections()
	}
}
