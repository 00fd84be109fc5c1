package main

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
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// dump is a response as the frameworks must agree on it: status, header
// fields but Date, body.
func dump(r response) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(r.status) + "\n")
	names := make([]string, 0, len(r.header))
	for name := range r.header {
		if name != "Date" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		b.WriteString(name + ": " + strings.Join(r.header[name], ", ") + "\n")
	}
	return b.String() + "\n" + r.body
}

// transcript records what a demo answers.
type transcript struct {
	d     *demo
	steps []string // "METHOD PATH HEADERS" of each request
	dumps []string
}

func (tr *transcript) do(method, path string, header ...string) response {
	tr.d.t.Helper()
	r := tr.d.do(method, path, header...)
	tr.steps = append(tr.steps, strings.Join(append([]string{method, path}, header...), " "))
	tr.dumps = append(tr.dumps, dump(r))
	return r
}

// requireAlike fails unless every framework's transcript is stdhttp's.
func requireAlike(t *testing.T, got map[string]*transcript) {
	t.Helper()
	want := got["stdhttp"]
	require.NotNil(t, want)
	for _, fw := range frameworks {
		tr := got[fw]
		require.NotNil(t, tr, fw)
		require.Equal(t, want.steps, tr.steps, fw)
		for i := range want.dumps {
			assert.Equal(t, want.dumps[i], tr.dumps[i], "-framework %s, request %d: %s", fw, i+1, tr.steps[i])
		}
	}
}

// TestFrameworks runs the routes of the demo on every framework: each
// limits and exempts as stdhttp does, and answers every request of the
// sequence with the same status, headers and body.
func TestFrameworks(t *testing.T) {
	got := map[string]*transcript{}
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			d := start(t, "-framework", fw, "-algorithm", "fixed-window", "-limit", "4")
			tr := &transcript{d: d}
			got[fw] = tr
			for i := 1; i <= 4; i++ {
				r := tr.do("GET", "/")
				require.Equal(t, http.StatusOK, r.status, "request %d", i)
				assert.Equal(t, "hello\n", r.body)
				assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
				assert.Equal(t, "4", r.header.Get("X-RateLimit-Limit"))
				assert.Equal(t, strconv.Itoa(4-i), r.header.Get("X-RateLimit-Remaining"))
				assert.Equal(t, "60", r.header.Get("X-RateLimit-Reset"))
			}
			r := tr.do("GET", "/")
			p := requireProblem(t, r, http.StatusTooManyRequests)
			assert.Equal(t, quotaExceeded, p.Type)
			assert.Equal(t, "demo", p.Limit)
			for name, want := range map[string]string{"X-RateLimit-Limit": "4", "X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset": "60", "Retry-After": "60", "X-RateLimit-Retry-After": "60"} {
				assert.Equal(t, want, r.header.Get(name), name)
			}
			body := answer.Problem(&answer.Verdict{Decision: core.Decision{Name: "demo", Quota: 4, RetryAfter: time.Minute},
				Status: http.StatusTooManyRequests})
			assert.Equal(t, string(body), r.body, "the problem body of every middleware")

			for range 3 {
				r := tr.do("GET", "/healthz")
				require.Equal(t, http.StatusOK, r.status, "never limited")
				assert.Equal(t, "ok\n", r.body)
				assert.Empty(t, r.header.Values("X-RateLimit-Limit"))
			}
			assert.Equal(t, http.StatusOK, tr.do("HEAD", "/healthz").status)

			for i := 1; i <= 5; i++ {
				r := tr.do("POST", "/login")
				require.Equal(t, http.StatusOK, r.status, "login %d: GET / being exhausted does not matter", i)
				assert.Equal(t, "logged in\n", r.body)
				assert.Equal(t, "5", r.header.Get("X-RateLimit-Limit"))
				assert.Equal(t, strconv.Itoa(5-i), r.header.Get("X-RateLimit-Remaining"))
			}
			r = tr.do("POST", "/login")
			assert.Equal(t, "login", requireProblem(t, r, http.StatusTooManyRequests).Limit)
			assert.Equal(t, "60", r.header.Get("Retry-After"))
			requireProblem(t, tr.do("GET", "/nothing-here"), http.StatusTooManyRequests)
			requireProblem(t, tr.do("GET", "/metrics"), http.StatusTooManyRequests) // not served without -metrics

			// A new window: every other request is counted like GET /,
			// then answers 404; logins still have their own counter.
			d.clock.Advance(time.Minute)
			for i, req := range [][2]string{{"GET", "/nothing-here"}, {"POST", "/"}, {"GET", "/login"}, {"GET", "/healthz/"}} {
				r := tr.do(req[0], req[1])
				require.Equal(t, http.StatusNotFound, r.status, "%s %s", req[0], req[1])
				assert.Equal(t, "404 page not found\n", r.body)
				assert.Equal(t, strconv.Itoa(3-i), r.header.Get("X-RateLimit-Remaining"))
			}
			r = tr.do("HEAD", "/")
			assert.Equal(t, http.StatusTooManyRequests, r.status, "HEAD / is limited as GET /")
			assert.Equal(t, "60", r.header.Get("Retry-After"))
			r = tr.do("POST", "/login")
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, "4", r.header.Get("X-RateLimit-Remaining"))
		})
	}
	requireAlike(t, got)
}

// TestFrameworksAlike runs the same requests on every framework under
// other flags, keys and algorithms: the answers are stdhttp's.
func TestFrameworksAlike(t *testing.T) {
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
			got := map[string]*transcript{}
			for _, fw := range frameworks {
				tr := &transcript{d: start(t, append([]string{"-framework", fw}, tt.args...)...)}
				for _, req := range tt.reqs {
					tr.do(req.method, req.path, req.header...)
				}
				tr.d.client.CloseIdleConnections() // not a leak of the next demo's
				got[fw] = tr
			}
			requireAlike(t, got)
		})
	}
}

// TestFrameworksFailClosed: with the store down and -fail closed, every
// framework answers 503 as stdhttp does, and still serves /healthz.
func TestFrameworksFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop(t)
	got := map[string]*transcript{}
	for _, fw := range frameworks {
		tr := &transcript{d: start(t, "-framework", fw, "-store", "redis", "-redis", "redis://"+addr+"/0", "-fail", "closed")}
		requireProblem(t, tr.do("GET", "/"), http.StatusServiceUnavailable)
		require.Equal(t, http.StatusOK, tr.do("GET", "/healthz").status)
		requireProblem(t, tr.do("POST", "/login"), http.StatusServiceUnavailable)
		tr.d.client.CloseIdleConnections()
		got[fw] = tr
	}
	requireAlike(t, got)
}

// TestFrameworkMetrics: with -metrics, GET /metrics is served and never
// limited on every framework.
func TestFrameworkMetrics(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			d := start(t, "-framework", fw, "-metrics", "-algorithm", "fixed-window", "-limit", "2")
			for range 3 {
				d.get("/")
			}
			d.do("POST", "/login")
			var r response
			for range 5 {
				r = d.get("/metrics")
				require.Equal(t, http.StatusOK, r.status)
				assert.Empty(t, r.header.Values("X-RateLimit-Limit"))
			}
			for _, line := range []string{
				`ratekit_requests_total{decision="allowed",limit="demo"} 2`,
				`ratekit_requests_total{decision="denied",limit="demo"} 1`,
				`ratekit_requests_total{decision="allowed",limit="login"} 1`,
			} {
				assert.Contains(t, r.body, line+"\n")
			}
		})
	}
}

// TestRedisSharedByFrameworks: demo servers of every framework on one
// Redis share their limits.
func TestRedisSharedByFrameworks(t *testing.T) {
	srv := redistest.Start(t)
	// Fiber (both majors) last: its idle workers outlive their
	// connections by up to 10 s, and would count as a leak of a demo
	// started before it and stopped after it (cleanups run last started
	// first).
	fiber := func(fw string) bool { return strings.HasPrefix(fw, "fiber") }
	order := append(slices.DeleteFunc(slices.Clone(frameworks), fiber), slices.DeleteFunc(slices.Clone(frameworks), func(fw string) bool { return !fiber(fw) })...)
	var demos []*demo
	for _, fw := range order {
		demos = append(demos, start(t, "-framework", fw, "-store", "redis", "-redis", "redis://"+srv.Addr()+"/0",
			"-algorithm", "fixed-window", "-limit", "7"))
	}
	for i := 1; i <= 7; i++ {
		r := demos[i%len(demos)].get("/")
		require.Equal(t, http.StatusOK, r.status, "request %d", i)
		assert.Equal(t, strconv.Itoa(7-i), r.header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
	for i := 1; i <= 5; i++ {
		require.Equal(t, http.StatusOK, demos[i%len(demos)].do("POST", "/login").status, "login %d", i)
	}
	for _, d := range demos {
		requireProblem(t, d.get("/"), http.StatusTooManyRequests)
		requireProblem(t, d.do("POST", "/login"), http.StatusTooManyRequests)
	}
	for _, d := range demos {
		d.client.CloseIdleConnections()
	}
}
