package demotest

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/queue"
)

// This file holds the checks of the routes that every program must pass,
// the default program's tests and each framework's (Framework).

// CheckOrders: authentication comes before the queueing limiter, so a
// request without a customer's token is answered 401, and never queued,
// even past the limit; two orders a second are placed at once, the next
// one is queued with an ID and placed by the worker, which logs it with
// the customer; a body over the bound (16 KiB) is refused with 413.
func CheckOrders(t *testing.T, d *Demo) {
	t.Helper()
	for i, header := range [][]string{
		nil, nil, nil, // past the limit of 2 a second
		{"Authorization", "Bearer wrong"},
		{"Authorization", "Basic YWxpY2U6YWxpY2U="},
		{demo.CustomerHeader, "alice"}, // a forged name, without a token
	} {
		r := d.OrderAs("", `{"item":"tea"}`, header...)
		require.Equal(t, http.StatusUnauthorized, r.Status, "unauthenticated %d: %s", i, r.Body)
		assert.Empty(t, r.Header.Get(queue.HeaderID), "not queued")
		assert.Equal(t, demo.OrdersRealm, r.Header.Get("WWW-Authenticate"))
		assert.Equal(t, demo.Unauthorized, r.Body)
		assert.Empty(t, r.Header.Get("X-Ratelimit-Remaining"), "refused before the limiter")
	}
	for i := range 2 {
		r := d.Order(`{"item":"tea"}`)
		require.Equal(t, http.StatusCreated, r.Status, "order %d: %s", i, r.Body)
		assert.Equal(t, "order placed\n", r.Body)
	}
	r := d.Order(`{"item":"cake"}`)
	require.Equal(t, http.StatusAccepted, r.Status, r.Body)
	var reply struct{ ID, Status string }
	require.NoError(t, json.Unmarshal([]byte(r.Body), &reply), r.Body)
	assert.Equal(t, "queued", reply.Status)
	assert.Equal(t, reply.ID, r.Header.Get(queue.HeaderID))
	assert.Empty(t, r.Header.Get("Retry-After"), "a queued order is not to be retried")
	assert.Equal(t, "0", r.Header.Get("X-Ratelimit-Remaining"))

	// Waiting for the worker's log line, not timing it.
	line := `msg="demo: queued order placed" id=` + reply.ID + " attempt=1"
	require.Eventually(t, func() bool { return strings.Contains(d.Stderr(), line) }, 5*time.Second, 5*time.Millisecond,
		"the worker places the queued order:\n%s", d.Stderr())
	assert.Contains(t, d.Stderr(), "bytes=15 customer=alice", "the replay carries the customer, not the token")
	assert.NotContains(t, d.Stderr(), "given up")

	big := d.Order(strings.Repeat("x", 16<<10+1))
	assert.Equal(t, http.StatusRequestEntityTooLarge, big.Status, big.Body)
	assert.Empty(t, big.Header.Get(queue.HeaderID))
}

// Other is the header of another client than the test's, for a demo run
// with -trusted-proxies 127.0.0.1.
var Other = []string{"X-Forwarded-For", "192.0.2.9"}

// CheckReports, on a demo run with -trusted-proxies 127.0.0.1 by
// StartGated: two reports of a client IP at once, the third refused with
// 429 (that of the concurrency limit, with the rate limit's fields), while
// another client's report runs; a slot frees when a report ends; ?ms= out
// of bounds is 400; the rate limit comes first.
func CheckReports(t *testing.T, d *Demo, g *Gate) {
	t.Helper()
	first, second := d.GoDo("POST", "/reports"), d.GoDo("POST", "/reports")
	g.Await(t, 2)
	r := d.Do("POST", "/reports")
	p := RequireProblem(t, r, http.StatusTooManyRequests)
	assert.Equal(t, QuotaExceeded, p.Type)
	assert.Equal(t, "reports-in-flight", p.Limit)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Equal(t, "10", r.Header.Get("X-RateLimit-Limit"), "the rate limit came first")
	assert.Equal(t, "7", r.Header.Get("X-RateLimit-Remaining"))

	third := d.GoDo("POST", "/reports", Other...) // the slots are per client IP
	g.Await(t, 1)
	g.Release()
	for _, ch := range []<-chan Response{first, second, third} {
		r := Receive(t, ch)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		assert.Equal(t, "report ready after 1s of work\n", r.Body)
		assert.Equal(t, demo.TextPlain, r.Header.Get("Content-Type"))
	}

	r = d.Do("POST", "/reports?ms=250")
	require.Equal(t, http.StatusOK, r.Status, "the slots are free: %s", r.Body)
	assert.Equal(t, "report ready after 250ms of work\n", r.Body)
	for _, ms := range []string{"5001", "-1", "1e3", "%3Cscript%3E"} {
		r := d.Do("POST", "/reports?ms="+ms)
		require.Equal(t, http.StatusBadRequest, r.Status, ms)
		assert.Equal(t, "ms: want a whole number of milliseconds from 0 to 5000\n", r.Body, "no client text in the answer")
	}
	// 8 of the 10 a minute counted so far: the refused one too.
	for i := range 2 {
		require.Equal(t, http.StatusOK, d.Do("POST", "/reports?ms=0").Status, "report %d", 9+i)
	}
	r = d.Do("POST", "/reports?ms=0")
	assert.Equal(t, "reports", RequireProblem(t, r, http.StatusTooManyRequests).Limit)
	assert.Equal(t, "60", r.Header.Get("Retry-After"))
	g.Await(t, 3) // the reports that worked since the gate opened
}

// ElasticArgs: 2 a minute, up to 100% more while fewer than 2 requests
// are in flight (the one decided included): while a report is at work,
// there is no room. Add -metrics for CheckElastic's metrics.
var ElasticArgs = []string{"-elastic", "100", "-elastic-in-flight", "2", "-algorithm", "fixed-window", "-limit", "2"}

// CheckElastic, on a demo run with ElasticArgs by StartGated: GET /
// admits twice its limit while the server has room, the headers reporting
// the limit itself and Remaining 0 beyond it; with a request in flight
// elsewhere (a report at work) it is exact. With metrics (the demo runs
// with -metrics), the metrics count the elastic admissions apart.
func CheckElastic(t *testing.T, d *Demo, g *Gate, metrics bool) {
	t.Helper()
	for i := 1; i <= 4; i++ {
		r := d.Get("/")
		require.Equal(t, http.StatusOK, r.Status, "request %d", i)
		assert.Equal(t, "2", r.Header.Get("X-RateLimit-Limit"), "the limit itself, never the ceiling")
		assert.Equal(t, strconv.Itoa(max(2-i, 0)), r.Header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
	r := d.Get("/")
	assert.Equal(t, "demo", RequireProblem(t, r, http.StatusTooManyRequests).Limit, "over the ceiling")
	assert.Equal(t, "60", r.Header.Get("Retry-After"))

	d.Clock.Advance(time.Minute) // a new window
	for range 2 {
		require.Equal(t, http.StatusOK, d.Get("/").Status)
	}
	report := d.GoDo("POST", "/reports")
	g.Await(t, 1)
	RequireProblem(t, d.Get("/"), http.StatusTooManyRequests) // busy: exact at the limit
	g.Release()
	require.Equal(t, http.StatusOK, Receive(t, report).Status)
	r = d.Get("/")
	require.Equal(t, http.StatusOK, r.Status, "room again")
	assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))

	if !metrics {
		return
	}
	body := d.Get("/metrics").Body
	for _, line := range []string{
		`ratekit_requests_total{decision="allowed",limit="demo"} 4`,
		`ratekit_requests_total{decision="elastic_allowed",limit="demo"} 3`,
		`ratekit_requests_total{decision="denied",limit="demo"} 2`,
	} {
		assert.Contains(t, body, line+"\n")
	}
}

// RulesV1 limits every client to 3 requests per minute and logins to 2.
const RulesV1 = `domain: demo-test
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: remote_address
    match:
      method: POST
      path: /login
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// WriteRules writes RulesV1 to a rules file of the test, and returns its
// path.
func WriteRules(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(RulesV1), 0o644))
	return path
}

// CheckRulesFile runs p with -config: the file's rules decide GET / and
// also apply to POST /login; an edit applies while it runs, keeping the
// counts; an invalid edit is logged and ignored.
func CheckRulesFile(t *testing.T, p demo.Program) {
	t.Helper()
	path := WriteRules(t)
	d := Start(t, p, "-config", path, "-trusted-proxies", "127.0.0.1/32")
	client := func(ip string) []string { return []string{"X-Forwarded-For", ip} }

	for i := 1; i <= 3; i++ {
		r := d.Get("/", client("192.0.2.1")...)
		require.Equal(t, 200, r.Status, "request %d", i)
		assert.Equal(t, "3", r.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(3-i), r.Header.Get("X-RateLimit-Remaining"))
	}
	r := d.Get("/", client("192.0.2.1")...)
	pr := RequireProblem(t, r, 429)
	assert.Equal(t, "demo-test/remote_address", pr.Limit)
	assert.Equal(t, "60", r.Header.Get("Retry-After"))

	for i := 1; i <= 2; i++ {
		r := d.Do("POST", "/login", client("192.0.2.2")...)
		require.Equal(t, 200, r.Status, "login %d", i)
		assert.Equal(t, "2", r.Header.Get("X-RateLimit-Limit"), "the file's login rule is the most restrictive")
	}
	RequireProblem(t, d.Do("POST", "/login", client("192.0.2.2")...), 429)
	assert.Empty(t, d.Get("/healthz", client("192.0.2.1")...).Header.Get("X-RateLimit-Limit"), "never limited")

	// Raise the limit to 5: the 3 requests counted stay counted.
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(RulesV1, "requests_per_unit: 3", "requests_per_unit: 5", 1)), 0o644))
	WaitFor(t, func(n int) bool { // each probe is another client
		return d.Get("/", client("198.51.100."+strconv.Itoa(n))...).Header.Get("X-RateLimit-Limit") == "5"
	})
	r = d.Get("/", client("192.0.2.1")...)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "1", r.Header.Get("X-RateLimit-Remaining"), "3 of 5 used before the reload; this is the 4th")

	// An invalid edit is logged with its line and changes nothing.
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(RulesV1, "unit: minute", "unit: fortnight", 1)), 0o644))
	WaitFor(t, func(int) bool { return strings.Contains(d.Stderr(), "rules reload rejected") })
	assert.Contains(t, d.Stderr(), "rules.yaml:4: descriptors[0].rate_limit: unit")
	r = d.Get("/", client("192.0.2.1")...)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "5", r.Header.Get("X-RateLimit-Limit"))
	RequireProblem(t, d.Get("/", client("192.0.2.1")...), 429)

	// A new minute: the counts start over.
	d.Clock.Advance(time.Minute)
	assert.Equal(t, 200, d.Get("/", client("192.0.2.1")...).Status)
}

// CheckUpstream: GET /upstream calls the demo's provider; two calls go
// at once (the pacer's burst), the next waits its turn, 200 ms of the fake
// clock that the pacing Transport moves as it waits; the provider never
// answers 429.
func CheckUpstream(t *testing.T, p demo.Program) {
	t.Helper()
	d := Start(t, p)
	for i, waited := range []string{"0s", "0s", "200ms", "200ms"} {
		r := d.Get("/upstream")
		require.Equal(t, http.StatusOK, r.Status, "call %d: %s", i+1, r.Body)
		assert.Equal(t, "upstream: 200 OK after waiting "+waited+" for its turn\n", r.Body, "call %d", i+1)
		assert.Equal(t, demo.TextPlain, r.Header.Get("Content-Type"))
		assert.Empty(t, r.Header.Values("X-RateLimit-Limit"), "the route itself is not limited")
	}
}

// CheckAdmin exhausts a client's limit on p, then operates on it through
// the admin listener: state, reset and grant, each only with the bearer
// token.
func CheckAdmin(t *testing.T, p demo.Program) {
	t.Helper()
	d := Start(t, p, "-admin", "127.0.0.1:0", "-admin-token", "t0ken",
		"-trusted-proxies", "127.0.0.1", "-algorithm", "fixed-window", "-limit", "2")
	const ip = "192.0.2.1"
	api := func() int { return d.Get("/", "X-Forwarded-For", ip).Status }
	require.Equal(t, 200, api())
	require.Equal(t, 200, api())
	require.Equal(t, 429, api())

	status, got := d.Admin("GET", "limiters", "t0ken", nil)
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, []any{"demo", "login"}, got["limiters"])

	status, got = d.Admin("GET", "state?limiter=demo&key="+ip, "t0ken", nil)
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, core.KeyHash(ip), got["key_hash"])
	assert.Equal(t, true, got["tracked"])
	assert.Equal(t, false, got["decision"].(map[string]any)["allowed"])
	assert.NotContains(t, d.Stderr(), "t0ken", "a given token is never printed")

	// Without the token, or with a wrong one, nothing is done.
	reset := map[string]any{"limiter": "demo", "key": ip, "reason": "test reset"}
	for _, token := range []string{"", "t0ke", "t0ken0", "T0KEN"} {
		status, got = d.Admin("POST", "reset", token, reset)
		require.Equal(t, 401, status, "token %q", token)
		assert.Equal(t, "a valid bearer token is required", got["error"])
		status, _ = d.Admin("GET", "state?limiter=demo&key="+ip, token, nil)
		require.Equal(t, 401, status, "token %q", token)
	}
	req, err := http.NewRequest("GET", d.AdminURL()+"limiters", nil)
	require.NoError(t, err)
	req.SetBasicAuth("admin", "t0ken")
	resp, err := d.Client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 401, resp.StatusCode, "only a bearer token")
	require.Equal(t, 429, api(), "not reset")

	status, got = d.Admin("POST", "reset", "t0ken", reset)
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, true, got["found"])
	assert.Contains(t, d.Stderr(), `msg="ratekit: key reset" limit=demo key_hash=`+core.KeyHash(ip)+` reason="test reset" found=true`)
	require.Equal(t, 200, api(), "reset")
	require.Equal(t, 200, api())
	require.Equal(t, 429, api())

	status, got = d.Admin("POST", "grant", "Bearer", map[string]any{"limiter": "demo", "key": ip, "amount": 1})
	require.Equal(t, 401, status, "%v", got)
	status, got = d.Admin("POST", "grant", "t0ken", map[string]any{"limiter": "demo", "key": ip, "amount": 1, "reason": "test grant"})
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, true, got["state"].(map[string]any)["decision"].(map[string]any)["allowed"])
	require.Equal(t, 200, api(), "granted")
	require.Equal(t, 429, api(), "one request only")

	// The login limit is there too; the API is not served there.
	status, got = d.Admin("GET", "state?limiter=login&key="+ip, "t0ken", nil)
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, false, got["tracked"])
	status, _ = d.Admin("GET", "", "t0ken", nil)
	assert.Equal(t, 404, status)
	assert.Equal(t, 404, d.Get("/admin/ratekit/limiters", "Authorization", "Bearer t0ken").Status, "not on the API's listener")
}

// ShortTimeouts are the servers' timeouts of CheckTimeouts: short, so
// that the test watches them act.
var ShortTimeouts = demo.Timeouts{ReadHeader: 200 * time.Millisecond, Read: 300 * time.Millisecond,
	Write: time.Second, Idle: 200 * time.Millisecond}

// CheckTimeouts, on a demo started with ShortTimeouts (StartWith): the
// server closes connections that send nothing, that stall in a request's
// header or body, and that idle after a request, each within its timeout:
// over real connections, each read bounded by 5 s, the server closing
// them long before.
func CheckTimeouts(t *testing.T, d *Demo) {
	t.Helper()
	addr := strings.TrimPrefix(d.Base, "http://")
	const n = 10 // connections of each kind
	type kind struct {
		name  string
		start func(c net.Conn) // what the client sends before it goes quiet
	}
	kinds := []kind{
		{"silent", func(net.Conn) {}},
		{"stalled header", func(c net.Conn) { _, _ = io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: x\r\n") }},
		{"stalled body", func(c net.Conn) {
			_, _ = io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+Alice+
				"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"item\":")
		}},
		{"idle", func(c net.Conn) {
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		}},
	}
	for _, k := range kinds {
		conns := make([]net.Conn, n)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			k.start(c)
			conns[i] = c
		}
		start := time.Now()
		for i, c := range conns {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
			// Read until the server closes: what it answered (the idle
			// connection's 200, a stalled body's error) comes first.
			got, err := io.ReadAll(c)
			var ne net.Error
			require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s connection %d still open after 5 s; read %q", k.name, i, got)
			if k.name == "idle" {
				assert.Contains(t, string(got), "200 OK", "the request before the idle time was answered")
			}
		}
		assert.Less(t, time.Since(start), 5*time.Second, k.name)
	}
}
