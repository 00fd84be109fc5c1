package readme

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

func init() { gin.SetMode(gin.TestMode) }

// A response is what a test request got.
type response struct {
	status int
	header http.Header
	body   string
}

// A tclient sends a test's requests over its own connections.
type tclient struct {
	t    *testing.T
	c    *http.Client
	base string
}

// newClient returns a client of the server at base.
func newClient(t *testing.T, base string) *tclient {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &tclient{t: t, c: &http.Client{Transport: tr, Timeout: 10 * time.Second}, base: base}
}

// send sends a request with the header fields of kv (name, value, ...).
func (c *tclient) send(method, path string, kv ...string) response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{resp.StatusCode, resp.Header, string(body)}
}

// admitted checks that r is a 200 with the X-Ratelimit fields of a limit of
// quota, and returns its X-Ratelimit-Remaining.
func admitted(t *testing.T, what string, r response, quota int) int {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("%s: status %d, want 200; body %q", what, r.status, r.body)
	}
	if got := r.header.Get(answer.HeaderLimit); got != strconv.Itoa(quota) {
		t.Errorf("%s: %s = %q, want %d", what, answer.HeaderLimit, got, quota)
	}
	remaining, err := strconv.Atoi(r.header.Get(answer.HeaderRemaining))
	if err != nil || remaining < 0 || remaining >= quota {
		t.Errorf("%s: %s = %q, want 0 to %d", what, answer.HeaderRemaining, r.header.Get(answer.HeaderRemaining), quota-1)
	}
	if reset, err := strconv.Atoi(r.header.Get(answer.HeaderReset)); err != nil || reset < 1 {
		t.Errorf("%s: %s = %q, want whole seconds", what, answer.HeaderReset, r.header.Get(answer.HeaderReset))
	}
	return remaining
}

// rejected checks that r is a 429 of ratekit, with problem details,
// Retry-After, and the X-Ratelimit fields of a limit of quota.
func rejected(t *testing.T, what string, r response, quota int) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("%s: status %d, want 429; body %q", what, r.status, r.body)
	}
	if got := r.header.Get("Content-Type"); got != answer.ProblemContentType {
		t.Errorf("%s: Content-Type %q, want %q", what, got, answer.ProblemContentType)
	}
	var problem struct{ Status int }
	if err := json.Unmarshal([]byte(r.body), &problem); err != nil || problem.Status != http.StatusTooManyRequests {
		t.Errorf("%s: body %q is not the problem details of a 429 (%v)", what, r.body, err)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("%s: Retry-After %q, want whole seconds", what, r.header.Get("Retry-After"))
	}
	if got := r.header.Get(answer.HeaderLimit); got != strconv.Itoa(quota) {
		t.Errorf("%s: %s = %q, want %d", what, answer.HeaderLimit, got, quota)
	}
	if got := r.header.Get(answer.HeaderRemaining); got != "0" {
		t.Errorf("%s: %s = %q, want 0", what, answer.HeaderRemaining, got)
	}
}

// untilRejected sends requests until one is rejected, checks each admitted
// one with check, and returns the rejection. atLeast requests must be
// admitted before it, and no more than the bucket refilled since its first
// request, at since: one every refill (0 for none).
func (c *tclient) untilRejected(method, path string, quota, atLeast int, refill time.Duration, since time.Time, check func(response) int) response {
	c.t.Helper()
	n, last := 0, -1
	for ; n <= 10*quota+1000; n++ {
		r := c.send(method, path)
		if r.status == http.StatusTooManyRequests {
			rejected(c.t, method+" "+path+" over the limit", r, quota)
			if last != 0 {
				c.t.Errorf("%s %s: the last admitted request had %d remaining, want 0", method, path, last)
			}
			atMost := atLeast
			if refill > 0 {
				atMost += int(time.Since(since)/refill) + 1
			}
			if n < atLeast || n > atMost {
				c.t.Errorf("%s %s: %d requests admitted before a 429, want %d to %d", method, path, n, atLeast, atMost)
			}
			return r
		}
		last = check(r)
	}
	c.t.Fatalf("%s %s: no 429 after %d requests", method, path, n)
	return response{}
}

// serveHTTP serves h on a real listener for the test.
func serveHTTP(t *testing.T, h http.Handler) *tclient {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return newClient(t, srv.URL)
}

// serveFiber serves app on a real listener for the test.
func serveFiber(t *testing.T, app *fiber.App) *tclient {
	return serveListener(t, func(ln net.Listener) error { return app.Listener(ln) }, app.ShutdownWithTimeout)
}

// serveListener serves on a real listener, with serve, until the test
// ends and shutdown stops it (Fiber, whose apps are not net/http
// handlers).
func serveListener(t *testing.T, serve func(net.Listener) error, shutdown func(time.Duration) error) *tclient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ln) }()
	t.Cleanup(func() {
		if err := shutdown(5 * time.Second); err != nil {
			t.Errorf("fiber shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("fiber: %v", err)
		}
	})
	return newClient(t, "http://"+ln.Addr().String())
}

// clearOfMinute waits, if needed, until the next minute boundary is at
// least 5 seconds away: the README's login limit is a fixed window of a
// minute, aligned to the minute, which a test's requests must not straddle.
func clearOfMinute() {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < 5*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// tokenRefill is how often the quick start's bucket of 100 a minute gains
// a token.
const tokenRefill = time.Minute / 100

// TestQuickStart serves the net/http quick start: 100 requests a minute,
// then 429.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello\n") })
	c := serveHTTP(t, quickStart(mux))

	since := time.Now()
	r := c.send("GET", "/")
	if got := admitted(t, "first request", r, 100); got != 99 || r.body != "hello\n" {
		t.Errorf("first request: remaining %d, body %q; want 99, hello", got, r.body)
	}
	c.untilRejected("GET", "/", 100, 99, tokenRefill, since, func(r response) int { return admitted(t, "GET /", r, 100) })
}

// TestQuickStartMore serves the route group of the quick start: POST
// /login at 5 a minute, /api/ at 10 a second (and 1000 an hour).
func TestQuickStartMore(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	moreLimits(mux,
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, loggedIn) }),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "api %s\n", r.URL.Path) }))
	c := serveHTTP(t, mux)

	clearOfMinute()
	for i := range 5 {
		r := c.send("POST", "/login")
		if got := admitted(t, "POST /login", r, 5); got != 4-i || r.body != loggedIn {
			t.Errorf("POST /login %d: remaining %d, body %q; want %d, %q", i+1, got, r.body, 4-i, loggedIn)
		}
	}
	rejected(t, "the sixth POST /login", c.send("POST", "/login"), 5)
	if r := c.send("GET", "/login"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /login: status %d, want 405", r.status)
	}

	since := time.Now()
	r := c.send("GET", "/api/items")
	if got := admitted(t, "GET /api/items", r, 10); got != 9 || r.body != "api /api/items\n" {
		t.Errorf("GET /api/items: remaining %d, body %q; want 9", got, r.body)
	}
	c.untilRejected("GET", "/api/items", 10, 9, time.Second/10, since, func(r response) int { return admitted(t, "GET /api/items", r, 10) })
}

// TestDecision serves the handler that reads the decision from the request
// context.
func TestDecision(t *testing.T) {
	t.Parallel()
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	mux := http.NewServeMux()
	quotaRoute(lim, mux)
	c := serveHTTP(t, mux)
	for range 3 {
		r := c.send("GET", "/quota")
		remaining := admitted(t, "GET /quota", r, 100)
		if want := fmt.Sprintf("%d requests left under %q\n", remaining, "api"); r.body != want {
			t.Errorf("GET /quota: body %q, want %q", r.body, want)
		}
	}
}

// A framework is one of the framework quick starts, served for a test.
type framework struct {
	name  string
	serve func(t *testing.T, lim, login *core.Limiter) *tclient
	// quota reads the remaining count from the body of /api/quota.
	quota func(body string) (int, error)
}

// jsonRemaining reads {"remaining": n}.
func jsonRemaining(body string) (int, error) {
	var v struct{ Remaining *int }
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return 0, err
	}
	if v.Remaining == nil {
		return 0, errors.New("no remaining")
	}
	return *v.Remaining, nil
}

var frameworks = []framework{
	{"gin", func(t *testing.T, lim, login *core.Limiter) *tclient { return serveHTTP(t, ginServer(lim, login)) }, jsonRemaining},
	{"echo", func(t *testing.T, lim, login *core.Limiter) *tclient { return serveHTTP(t, echoServer(lim, login)) }, jsonRemaining},
	{"fiber", func(t *testing.T, lim, login *core.Limiter) *tclient { return serveFiber(t, fiberApp(lim, login)) }, jsonRemaining},
	{"chi", func(t *testing.T, lim, login *core.Limiter) *tclient { return serveHTTP(t, chiRouter(lim, login)) },
		func(body string) (int, error) {
			if !strings.HasSuffix(body, "\n") {
				return 0, errors.New("no newline")
			}
			return strconv.Atoi(strings.TrimSuffix(body, "\n"))
		}},
}

// TestFrameworkQuickStarts serves the quick start of each framework, with
// the README's limiters, on a real listener: every route is limited to 100
// a minute, POST /api/login also to 5 a minute, and GET /api/quota answers
// the remaining count of its decision.
func TestFrameworkQuickStarts(t *testing.T) {
	for _, f := range frameworks {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			lim, login := limiters()
			c := f.serve(t, lim, login)

			quota := func(r response) int {
				t.Helper()
				remaining := admitted(t, "GET /api/quota", r, 100)
				if got, err := f.quota(r.body); err != nil || got != remaining {
					t.Errorf("GET /api/quota: body %q, want the remaining count %d (%v)", r.body, remaining, err)
				}
				return remaining
			}
			since := time.Now()
			if got := quota(c.send("GET", "/api/quota")); got != 99 {
				t.Errorf("first GET /api/quota: remaining %d, want 99", got)
			}
			if got := quota(c.send("GET", "/api/quota")); got > 98 {
				t.Errorf("second GET /api/quota: remaining %d, want 98", got)
			}

			clearOfMinute()
			for i := range 5 {
				r := c.send("POST", "/api/login")
				if got := admitted(t, "POST /api/login", r, 5); got != 4-i || r.body != loggedIn {
					t.Errorf("POST /api/login %d: remaining %d, body %q; want %d, %q", i+1, got, r.body, 4-i, loggedIn)
				}
			}
			rejected(t, "the sixth POST /api/login", c.send("POST", "/api/login"), 5)

			// 2 + 6 requests were counted by the limit of 100.
			c.untilRejected("GET", "/api/quota", 100, 92, tokenRefill, since, quota)
		})
	}
}

// TestGinTenant serves the Gin custom key: one bucket per tenant, 400
// without one.
func TestGinTenant(t *testing.T) {
	t.Parallel()
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(2)}))
	c := serveHTTP(t, ginTenants(lim))
	for _, tenant := range []string{"a", "b"} {
		for range 2 {
			r := c.send("GET", "/tenants/"+tenant+"/items")
			admitted(t, "tenant "+tenant, r, 2)
			if want := "items of " + tenant + "\n"; r.body != want {
				t.Errorf("tenant %s: body %q, want %q", tenant, r.body, want)
			}
		}
		rejected(t, "tenant "+tenant+" over the limit", c.send("GET", "/tenants/"+tenant+"/items"), 2)
	}
	if r := c.send("GET", "/health"); r.status != http.StatusBadRequest || r.header.Get("Content-Type") != answer.ProblemContentType {
		t.Errorf("no tenant: status %d, Content-Type %q; want 400 with problem details", r.status, r.header.Get("Content-Type"))
	}
}

// TestProxies serves the trusted-proxy key: a client that is no trusted
// proxy cannot pick its bucket with X-Forwarded-For.
func TestProxies(t *testing.T) {
	t.Parallel()
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(2)}))
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello\n") })
	served := false
	err := behindProxies(lim, mux, func(h http.Handler) error {
		served = true
		c := serveHTTP(t, h)
		admitted(t, "first request", c.send("GET", "/"), 2)
		admitted(t, "second request", c.send("GET", "/", "X-Forwarded-For", "192.0.2.1"), 2)
		rejected(t, "a spoofed X-Forwarded-For", c.send("GET", "/", "X-Forwarded-For", "192.0.2.2"), 2)
		return nil
	})
	if err != nil || !served {
		t.Fatalf("behindProxies: %v (served: %t)", err, served)
	}
}

// tenantKey is where the test's authentication puts the tenant.
type tenantKey struct{}

// TestCustomKey serves the custom key function: one bucket per tenant, 400
// without one.
func TestCustomKey(t *testing.T) {
	t.Parallel()
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(1)}))
	tenantFrom := func(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello\n") })
	limited := perTenant(lim, hello, tenantFrom)
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := r.Header.Get("X-Tenant"); tenant != "" {
			r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
		}
		limited.ServeHTTP(w, r)
	})
	c := serveHTTP(t, auth)
	admitted(t, "tenant a", c.send("GET", "/", "X-Tenant", "a"), 1)
	rejected(t, "tenant a again", c.send("GET", "/", "X-Tenant", "a"), 1)
	admitted(t, "tenant b", c.send("GET", "/", "X-Tenant", "b"), 1)
	if r := c.send("GET", "/"); r.status != http.StatusBadRequest || r.header.Get("Content-Type") != answer.ProblemContentType {
		t.Errorf("no tenant: status %d, Content-Type %q; want 400 with problem details", r.status, r.header.Get("Content-Type"))
	}
}

// TestClient calls a server that answers 429 once: the client of the
// README waits Retry-After and retries.
func TestClient(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "ok\n")
	}))
	t.Cleanup(srv.Close)
	hc, err := retryingClient()
	if err != nil {
		t.Fatal(err)
	}
	hc.Timeout = 10 * time.Second
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || calls.Load() != 2 {
		t.Errorf("status %d after %d calls, want 200 after 2", resp.StatusCode, calls.Load())
	}
}

// TestRedisSnippet builds the Redis example's limiter. It sends nothing:
// the README's Redis address is not the test's.
func TestRedisSnippet(t *testing.T) {
	t.Parallel()
	called := false
	if err := sharedLimiter(func(lim *core.Limiter) error { called = lim != nil; return nil }); err != nil || !called {
		t.Fatalf("sharedLimiter: %v (limiter passed on: %t)", err, called)
	}
}

// TestPrometheusSnippet counts two decisions through the Prometheus
// snippet and reads them from the default registry, a fresh one for the
// test.
func TestPrometheusSnippet(t *testing.T) {
	reg := prometheus.NewRegistry()
	prevRegisterer, prevGatherer := prometheus.DefaultRegisterer, prometheus.DefaultGatherer
	prometheus.DefaultRegisterer, prometheus.DefaultGatherer = reg, reg
	t.Cleanup(func() { prometheus.DefaultRegisterer, prometheus.DefaultGatherer = prevRegisterer, prevGatherer })

	limit := core.Limit{Name: "readme-prometheus", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}
	err := promLimiter(limit, &core.MemoryStore{}, func(lim *core.Limiter) error {
		for _, want := range []bool{true, false} {
			d, err := lim.Take(context.Background(), "client", 1)
			if err != nil || d.Allowed != want {
				return fmt.Errorf("Take: allowed %t, %v; want %t", d.Allowed, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ratekit_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["limit"] == limit.Name {
				counts[labels["decision"]] = m.GetCounter().GetValue()
			}
		}
	}
	if counts["allowed"] != 1 || counts["denied"] != 1 {
		t.Errorf("ratekit_requests_total of %s: %v, want allowed 1, denied 1", limit.Name, counts)
	}
}

// TestOtelSnippet counts a decision through the OpenTelemetry snippet,
// with a global meter provider that the test reads.
func TestOtelSnippet(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	limit := core.Limit{Name: "readme-otel", Rate: core.PerMinute(10)}
	err := otelLimiter(limit, func(lim *core.Limiter) error {
		_, err := lim.Take(context.Background(), "client", 1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			found = found || m.Name == "ratekit.requests"
		}
	}
	if !found {
		t.Errorf("no ratekit.requests among the metrics collected: %+v", rm.ScopeMetrics)
	}
}
