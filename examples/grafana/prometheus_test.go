package grafana_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The limits of the two demo servers: the memory one's flag-built limit
// and login limit, and the rules one's two rules (plus its login limit,
// which POST /login passes before the rules).
const (
	limitDemo   = "demo"
	limitLogin  = "login"
	limitRemote = "demo/remote_address"
	limitRLogin = "demo/remote_address@POST/login"
)

// rulesYear limits every client to 4 requests and logins to 2, per year:
// no window ends while the test runs (fixed windows start at multiples of
// the period since the epoch), so the counts and tracked keys are exact.
const rulesYear = `domain: demo
descriptors:
  - key: remote_address
    rate_limit: {unit: year, requests_per_unit: 4}
  - key: remote_address
    match: {method: POST, path: /login}
    rate_limit: {unit: year, requests_per_unit: 2}
`

// decisionNames are the values of the decision label; the exporter
// creates the series of all of them at a limit's first event.
var decisionNames = []string{"allowed", "denied", "shadow_denied", "soft_allowed", "elastic_allowed", "error_allowed", "error_denied"}

// TestDashboardOnPrometheus runs every query of the dashboard on a real
// Prometheus that scrapes two demo servers, one with a flag-built limit
// on a memory store and one with rules, after scripted traffic whose
// counts are known: the request panels count each request once, the
// per-limit panels each limit's decisions, the latency panels have the
// memory store's latencies, the tracked keys are the clients, the $limit
// variable lists every limit, and a rule removed by a reload leaves.
//
// Rates are checked exactly: each burst of traffic is evaluated over a
// window that starts just before the last scrape before it and ends just
// after the first scrape after it, so rate() × window is the burst's
// count (to the extrapolation over the 1 ms at each end).
func TestDashboardOnPrometheus(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus is not on PATH (%v): .ci/run must install it (apt-get install prometheus)", err)
		}
		t.Skipf("prometheus is not on PATH (%v); install it with: apt-get install prometheus", err)
	}
	start := time.Now()
	dash := load(t)
	dir := t.TempDir()
	bin := buildDemo(t, dir)

	rulesPath := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesPath, []byte(rulesYear), 0o644))
	// -period 8760h: one window for the whole test, as for the rules.
	mem := startDemo(t, bin, "-metrics", "-algorithm", "fixed-window", "-limit", "10", "-period", "8760h", "-trusted-proxies", "127.0.0.1/32")
	rul := startDemo(t, bin, "-metrics", "-config", rulesPath, "-trusted-proxies", "127.0.0.1/32")
	prom := startPrometheus(t, promBin, dir, map[string]string{"ratekit-memory": mem.addr, "ratekit-rules": rul.addr})

	// Warm-up, from a client of its own: every limit gets its first
	// event, so that its series exist (at their warm-up values) in the
	// scrape before each burst.
	const warm = "192.0.2.250"
	mem.expect(t, "GET", "/", warm, 200)
	mem.expect(t, "POST", "/login", warm, 200)
	rul.expect(t, "GET", "/", warm, 200)
	rul.expect(t, "POST", "/login", warm, 200) // the login limit, then both rules
	warmEnd := time.Now()
	prom.scrapedAfter(t, "ratekit-rules", warmEnd)
	before := prom.scrapedAfter(t, "ratekit-memory", warmEnd)

	// Burst A, on the memory server: 30 requests of one client at 10 per
	// period (10 allowed, 20 denied; the 9th and 10th leave less than 20%
	// of the limit) and one login: 31 requests, 20 denied.
	const clientA = "192.0.2.1"
	for i := 1; i <= 30; i++ {
		mem.expect(t, "GET", "/", clientA, map[bool]int{true: 200, false: 429}[i <= 10])
	}
	mem.expect(t, "POST", "/login", clientA, 200)
	aEnd := time.Now()
	after := prom.scrapedAfter(t, "ratekit-memory", aEnd)
	one := counts{{limitDemo, "allowed"}: 10, {limitDemo, "denied"}: 20, {limitLogin, "allowed"}: 1}
	prom.requireValues(t, after, `ratekit_requests_total{job="ratekit-memory"}`,
		counts{{limitDemo, "allowed"}: 11, {limitDemo, "denied"}: 20, {limitLogin, "allowed"}: 2})
	prom.requireValues(t, after, `ratekit_decisions_total{job="ratekit-memory"}`,
		counts{{limitDemo, "allowed"}: 11, {limitDemo, "denied"}: 20, {limitLogin, "allowed"}: 2})
	phaseA := &phase{
		name: "burst A (memory store)", from: before, to: after,
		requests: one, decisions: one,
		near: map[string]float64{limitDemo: 2},
		own:  []string{limitDemo, limitLogin},
		// Keys of the limits with year-long windows: the warm-up client
		// and client A. (The login limit's minute may end meanwhile.)
		tracked: map[string]float64{limitDemo: 2, limitRemote: 1, limitRLogin: 1},
	}
	phaseA.checkDashboard(t, prom, dash, ".*")

	// Burst B, on the rules server: three clients send 5 requests each
	// (4 allowed, 1 denied by the rule of every route; the 4th leaves
	// none), and a fourth client logs in 3 times: each login passes the
	// demo's login limit (allowed), then both rules while the login rule
	// admits it (2), and is denied by the login rule the 3rd time, which
	// the rule of every route then does not count. The login rule's
	// decision is each login's (the most restrictive).
	before = prom.scrapedAfter(t, "ratekit-rules", aEnd)
	for _, c := range []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"} {
		for i := 1; i <= 5; i++ {
			rul.expect(t, "GET", "/", c, map[bool]int{true: 200, false: 429}[i <= 4])
		}
	}
	const clientL = "192.0.2.21"
	for i := 1; i <= 3; i++ {
		rul.expect(t, "POST", "/login", clientL, map[bool]int{true: 200, false: 429}[i <= 2])
	}
	bEnd := time.Now()
	after = prom.scrapedAfter(t, "ratekit-rules", bEnd)
	prom.requireValues(t, after, `ratekit_requests_total{job="ratekit-rules"}`, counts{
		{limitRemote, "allowed"}: 13, {limitRemote, "denied"}: 3,
		{limitRLogin, "allowed"}: 3, {limitRLogin, "denied"}: 1,
		{limitLogin, "allowed"}: 4,
	})
	prom.requireValues(t, after, `ratekit_decisions_total{job="ratekit-rules"}`, counts{
		{limitRemote, "allowed"}: 16, {limitRemote, "denied"}: 3,
		{limitRLogin, "allowed"}: 3, {limitRLogin, "denied"}: 1,
		{limitLogin, "allowed"}: 4,
	})
	phaseB := &phase{
		name: "burst B (rules)", from: before, to: after,
		// 15 requests to GET / and 3 logins; each login counts twice: once
		// in the demo's login limiter and once in the rules' limiter,
		// which it passes in turn.
		requests: counts{
			{limitRemote, "allowed"}: 12, {limitRemote, "denied"}: 3,
			{limitRLogin, "allowed"}: 2, {limitRLogin, "denied"}: 1,
			{limitLogin, "allowed"}: 3,
		},
		decisions: counts{
			{limitRemote, "allowed"}: 14, {limitRemote, "denied"}: 3,
			{limitRLogin, "allowed"}: 2, {limitRLogin, "denied"}: 1,
			{limitLogin, "allowed"}: 3,
		},
		near: map[string]float64{limitRemote: 3, limitRLogin: 1},
		own:  []string{limitRemote, limitRLogin, limitLogin},
		// The warm-up client, the three clients and the login client;
		// the warm-up and the login client logged in.
		tracked: map[string]float64{limitDemo: 2, limitRemote: 5, limitRLogin: 2},
	}
	phaseB.checkDashboard(t, prom, dash, ".*")

	// The $limit variable lists every limit, and each of them, alone,
	// gets the values of its own traffic.
	limits := prom.variableValues(t, dash, start)
	assert.ElementsMatch(t, []string{limitDemo, limitLogin, limitRemote, limitRLogin}, limits, "values of $limit")
	for _, l := range []string{limitRemote, limitRLogin, limitLogin} {
		phaseB.checkDashboard(t, prom, dash, l)
	}

	// A reload that removes the login rule: its series leave at the next
	// scrape (Prometheus marks them stale), the other rule's stay.
	require.NoError(t, os.WriteFile(rulesPath, []byte(rulesYear[:strings.Index(rulesYear, "  - key: remote_address\n    match:")]), 0o644))
	removed := fmt.Sprintf(`ratekit_decisions_total{limit=%q}`, limitRLogin)
	prom.poll(t, "the removed rule's series to leave", func() bool { return len(prom.query(t, removed, 0)) == 0 })
	tracked := map[string]float64{}
	for _, s := range prom.query(t, panelExpr(t, dash, "Tracked keys per limit", "A", ".*", "1m"), 0) {
		tracked[s.Metric["limit"]] = s.Value
	}
	assert.Contains(t, tracked, limitLogin)
	delete(tracked, limitLogin) // its minute may have ended
	assert.Equal(t, map[string]float64{limitDemo: 2, limitRemote: 5}, tracked, "tracked keys after the reload")
	// A panel's rate() looks back over its range, which ignores the
	// staleness marker: the removed rule's line ends once its last
	// samples fall out of the range (3 s here; Grafana's $__rate_interval
	// for a 1 s scrape is 4 s), while the kept rule's line goes on.
	prom.poll(t, "the removed rule's line to end", func() bool {
		seen := map[string]bool{}
		for _, s := range prom.query(t, panelExpr(t, dash, "Decisions per second", "A", ".*", "3s"), 0) {
			seen[s.Metric["limit"]] = true
		}
		require.True(t, seen[limitRemote], "Decisions per second lost the kept rule")
		return !seen[limitRLogin]
	})
	t.Logf("checked in %v", time.Since(start).Round(time.Millisecond))
}

// counts are the values of counter series by limit and decision.
type counts map[[2]string]float64

// phase is a burst of traffic and the increase it made.
type phase struct {
	name     string
	from, to float64 // the last scrape before the burst and the first after it, Unix seconds

	requests  counts             // increase of ratekit_requests_total
	decisions counts             // increase of ratekit_decisions_total
	near      map[string]float64 // increase of ratekit_near_limit_total
	// own are the limits of the server that got the burst: it was
	// scraped at both ends of the window, so all their series are there.
	own []string
	// tracked are ratekit_tracked_keys (summed over the servers) after
	// the burst, for the limits whose count is certain.
	tracked map[string]float64
}

// window returns the range of the window, a duration for PromQL, its
// length in seconds and the evaluation time.
func (ph *phase) window() (string, float64, float64) {
	from, to := int64(math.Round(ph.from*1000)), int64(math.Round(ph.to*1000))
	ms := to - from + 2
	return fmt.Sprintf("%dms", ms), float64(ms) / 1000, float64(to+1) / 1000
}

// checkDashboard evaluates every query of every panel with $limit set to
// sel (".*" for All, or one limit) and checks its values.
func (ph *phase) checkDashboard(t *testing.T, prom *promServer, dash dashboard, sel string) {
	t.Helper()
	rng, secs, at := ph.window()
	selected := func(limit string) bool { return sel == ".*" || limit == sel }
	sum := func(c counts, decision string) float64 {
		n := 0.0
		for k, v := range c {
			if selected(k[0]) && (decision == "" || k[1] == decision) {
				n += v
			}
		}
		return n
	}
	active := map[string]bool{} // the selected limits that decided in the burst
	for k, v := range ph.decisions {
		if selected(k[0]) && v > 0 {
			active[k[0]] = true
		}
	}
	var own []string
	for _, l := range ph.own {
		if selected(l) {
			own = append(own, l)
		}
	}
	// count compares a rate over the window with a count.
	count := func(t *testing.T, want, rate float64, msgAndArgs ...any) {
		t.Helper()
		assert.InDelta(t, want, rate*secs, 0.01*want+0.01, msgAndArgs...)
	}
	t.Run(ph.name+" $limit="+sel, func(t *testing.T) {
		for _, p := range dash.Panels {
			results := map[string][]sample{}
			for _, tg := range p.Targets {
				expr := subst(t, tg.Expr, sel, rng)
				rs := prom.query(t, expr, at)
				for _, s := range rs {
					assert.False(t, math.IsNaN(s.Value) || math.IsInf(s.Value, 0), "%s: %s: %v %v", p.Title, expr, s.Metric, s.Value)
				}
				results[tg.RefID] = rs
			}
			rs := results["A"]
			switch p.Title {
			case "Request rate":
				if assert.Len(t, rs, 1, p.Title) {
					count(t, sum(ph.requests, ""), rs[0].Value, "%s: requests, each once", p.Title)
				}
			case "Denial ratio":
				if assert.Len(t, rs, 1, p.Title) {
					assert.InDelta(t, sum(ph.requests, "denied")/sum(ph.requests, ""), rs[0].Value, 0.005, p.Title)
				}
			case "Store errors", "Store errors per second":
				if assert.Len(t, rs, 1, p.Title) {
					assert.Zero(t, rs[0].Value, p.Title)
					if p.Title == "Store errors per second" {
						assert.Equal(t, "memory", rs[0].Metric["store"], p.Title)
					}
				}
			case "p99 store latency":
				if assert.Len(t, rs, 1, p.Title) {
					assert.Greater(t, rs[0].Value, 0.0, p.Title)
					assert.Less(t, rs[0].Value, 1.0, p.Title)
				}
			case "Decisions per second":
				seen := map[[2]string]bool{}
				for _, s := range rs {
					k := [2]string{s.Metric["limit"], s.Metric["decision"]}
					seen[k] = true
					assert.True(t, selected(k[0]), "%s: %v is not selected", p.Title, k)
					count(t, ph.decisions[k], s.Value, "%s: decisions %v", p.Title, k)
				}
				for _, l := range own {
					for _, d := range decisionNames {
						assert.True(t, seen[[2]string{l, d}], "%s: no series for %s %s", p.Title, l, d)
					}
				}
			case "Denial ratio per limit":
				got := map[string]float64{}
				for _, s := range rs {
					got[s.Metric["limit"]] = s.Value
				}
				want := map[string]float64{}
				for l := range active {
					want[l] = ph.decisions[[2]string{l, "denied"}] / sumLimit(ph.decisions, l)
				}
				assertClose(t, want, got, 0.005, p.Title)
			case "Near-limit rate per limit":
				seen := map[string]bool{}
				for _, s := range rs {
					l := s.Metric["limit"]
					seen[l] = true
					count(t, ph.near[l], s.Value, "%s: %s", p.Title, l)
				}
				for _, l := range own {
					assert.True(t, seen[l], "%s: no series for %s", p.Title, l)
				}
			case "Fail-open / fail-closed decisions per second":
				seen := map[[2]string]bool{}
				for _, s := range rs {
					k := [2]string{s.Metric["limit"], s.Metric["decision"]}
					seen[k] = true
					assert.Contains(t, []string{"error_allowed", "error_denied"}, k[1], p.Title)
					assert.Zero(t, s.Value, "%s: %v", p.Title, k)
				}
				for _, l := range own {
					for _, d := range []string{"error_allowed", "error_denied"} {
						assert.True(t, seen[[2]string{l, d}], "%s: no series for %s %s", p.Title, l, d)
					}
				}
			case "Store latency p50 / p99":
				q := map[string]map[string]float64{} // refID → limit → seconds
				for ref, rs := range results {
					q[ref] = map[string]float64{}
					for _, s := range rs {
						assert.Equal(t, "memory", s.Metric["store"], p.Title)
						assert.Greater(t, s.Value, 0.0, "%s %s %v", p.Title, ref, s.Metric)
						assert.Less(t, s.Value, 1.0, "%s %s %v", p.Title, ref, s.Metric)
						q[ref][s.Metric["limit"]] = s.Value
					}
					assert.Equal(t, (sortedKeys(active)), (sortedKeys(q[ref])), "%s %s: the limits that decided", p.Title, ref)
				}
				for l, p50 := range q["A"] {
					assert.LessOrEqual(t, p50, q["B"][l], "%s: p50 > p99 for %s", p.Title, l)
				}
			case "Tracked keys per limit":
				got := map[string]float64{}
				for _, s := range rs {
					got[s.Metric["limit"]] = s.Value
				}
				for l, n := range ph.tracked {
					if selected(l) {
						assert.Equal(t, n, got[l], "%s: %s", p.Title, l)
					}
				}
				for _, l := range own {
					assert.Contains(t, got, l, p.Title)
				}
			default:
				t.Errorf("panel %q: no check of its values", p.Title)
			}
		}
	})
}

func sumLimit(c counts, limit string) float64 {
	n := 0.0
	for k, v := range c {
		if k[0] == limit {
			n += v
		}
	}
	return n
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func assertClose(t *testing.T, want, got map[string]float64, delta float64, msg string) {
	t.Helper()
	assert.ElementsMatch(t, sortedKeys(want), sortedKeys(got), "%s: series", msg)
	for k, w := range want {
		if g, ok := got[k]; ok {
			assert.InDelta(t, w, g, delta, "%s: %s", msg, k)
		}
	}
}

// subst substitutes Grafana's variables in expr: $limit as Grafana does
// for a regex matcher (All is ".*"; a value is escaped), and
// $__rate_interval.
func subst(t *testing.T, expr, limit, rng string) string {
	t.Helper()
	if limit != ".*" {
		limit = strings.ReplaceAll(regexp.QuoteMeta(limit), `\`, `\\`)
	}
	out := strings.NewReplacer("$limit", limit, "$__rate_interval", rng).Replace(expr)
	require.NotContains(t, out, "$", "a variable left in %s", out)
	return out
}

// panelExpr returns the query refID of the panel titled title, with its
// variables substituted.
func panelExpr(t *testing.T, dash dashboard, title, refID, limit, rng string) string {
	t.Helper()
	for _, p := range dash.Panels {
		if p.Title != title {
			continue
		}
		for _, tg := range p.Targets {
			if tg.RefID == refID {
				return subst(t, tg.Expr, limit, rng)
			}
		}
	}
	t.Fatalf("no panel %q with a query %s", title, refID)
	return ""
}

// buildDemo builds examples/demo/metrics (the demo with Prometheus
// metrics) into dir, from the root of the
// workspace (two levels up from this package).
func buildDemo(t *testing.T, dir string) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.work")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		require.NotEqual(t, root, parent, "no go.work above %s", wd)
		root = parent
	}
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the demo")
	bin := filepath.Join(dir, "demo")
	cmd := exec.Command(goBin, "build", "-o", bin, "./examples/demo/metrics")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./examples/demo/metrics: %s", out)
	return bin
}

// output collects what a process writes and hands over its first line.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan string // buffered; receives the first line
	sent  bool
}

func newOutput() *output { return &output{first: make(chan string, 1)} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if !o.sent {
		if line, _, ok := bytes.Cut(o.buf.Bytes(), []byte("\n")); ok {
			o.sent = true
			o.first <- string(line)
		}
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// startProcess starts cmd and stops it (by its PID) when the test ends;
// the returned channel receives its exit.
func startProcess(t *testing.T, cmd *exec.Cmd, name string, stderr *output) <-chan error {
	t.Helper()
	require.NoError(t, cmd.Start(), "start %s", name)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (pid %d) standard error:\n%s", name, cmd.Process.Pid, stderr)
		}
		select {
		case <-exited:
			return // exited by itself
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// demoServer is a demo process and the client that sends it requests.
type demoServer struct {
	addr   string
	client *http.Client
}

func startDemo(t *testing.T, bin string, args ...string) *demoServer {
	t.Helper()
	stdout, stderr := newOutput(), newOutput()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	exited := startProcess(t, cmd, "demo "+strings.Join(args, " "), stderr)
	var line string
	select {
	case line = <-stdout.first:
	case err := <-exited:
		t.Fatalf("demo %v exited before listening: %v\n%s", args, err, stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("demo %v did not print its address", args)
	}
	addr, ok := strings.CutPrefix(line, "listening on ")
	require.True(t, ok, "first line %q", line)
	return &demoServer{addr: addr, client: &http.Client{Timeout: 10 * time.Second}}
}

// expect sends a request from client (X-Forwarded-For, which the demo
// trusts from 127.0.0.1) and checks its status.
func (d *demoServer) expect(t *testing.T, method, path, client string, status int) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.addr+path, nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-For", client)
	resp, err := d.client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, status, resp.StatusCode, "%s %s from %s", method, path, client)
}

// promServer is a Prometheus process of the test's own.
type promServer struct {
	base   string
	client *http.Client
}

// startPrometheus starts prometheus on a free port, with its storage in
// dir, scraping each job's target every second.
func startPrometheus(t *testing.T, bin, dir string, targets map[string]string) *promServer {
	t.Helper()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n")
	for _, job := range sortedKeys(targets) {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%q]\n", job, targets[job])
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg.String()), 0o644))

	// The port is free when picked; should another process take it
	// before prometheus does, prometheus exits and another is tried.
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		stderr := newOutput()
		cmd := exec.Command(bin,
			"--config.file="+cfgPath,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data%d", attempt)),
			"--web.listen-address="+addr,
		)
		cmd.Stdout, cmd.Stderr = io.Discard, stderr
		exited := startProcess(t, cmd, "prometheus", stderr)
		p := &promServer{base: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
		err = p.waitReady(exited)
		if err == nil {
			return p
		}
		if attempt == 3 || !strings.Contains(stderr.String(), "address already in use") {
			t.Fatalf("%v\n%s", err, stderr)
		}
	}
}

// waitReady polls /-/ready until Prometheus is ready, for at most 30 s.
func (p *promServer) waitReady(exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("prometheus exited: %v", err)
		default:
		}
		if resp, err := p.client.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("prometheus not ready within 30 s")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// api calls the HTTP API at path and decodes its data into v.
func (p *promServer) api(t *testing.T, path string, params url.Values, v any) {
	t.Helper()
	resp, err := p.client.Get(p.base + path + "?" + params.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body), "%s %v", path, params)
	require.Equal(t, "success", body.Status, "%s %v: %s: %s", path, params, body.ErrorType, body.Error)
	require.NoError(t, json.Unmarshal(body.Data, v))
}

// query evaluates expr at the Unix time at (now, if zero); it must be an
// instant vector.
func (p *promServer) query(t *testing.T, expr string, at float64) []sample {
	t.Helper()
	params := url.Values{"query": {expr}}
	if at != 0 {
		params.Set("time", strconv.FormatFloat(at, 'f', 3, 64))
	}
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	p.api(t, "/api/v1/query", params, &data)
	require.Equal(t, "vector", data.ResultType, expr)
	out := make([]sample, len(data.Result))
	for i, r := range data.Result {
		s, ok := r.Value[1].(string)
		require.True(t, ok, "%s: value %v", expr, r.Value)
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, expr)
		out[i] = sample{Metric: r.Metric, Value: v}
	}
	return out
}

// poll calls cond until it holds, for at most 20 s.
func (p *promServer) poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// scrapeMargin is the time by which a scrape's timestamp must follow an
// instant to be sure the scrape began after it: Prometheus aligns scrape
// timestamps to the interval when they are within 2 ms of it.
const scrapeMargin = 10 * time.Millisecond

// scrapedAfter waits until Prometheus holds a successful scrape of job
// that began after t0, and returns its timestamp (Unix seconds).
func (p *promServer) scrapedAfter(t *testing.T, job string, t0 time.Time) float64 {
	t.Helper()
	after := float64(t0.Add(scrapeMargin).UnixMilli()) / 1000
	var ts float64
	p.poll(t, "a scrape of "+job+" after "+t0.Format(time.StampMilli), func() bool {
		// timestamp() of a bare selector: of an expression (up == 1)
		// it would be the evaluation time.
		rs := p.query(t, fmt.Sprintf(`timestamp(up{job=%q})`, job), 0)
		if len(rs) == 1 && rs[0].Value > after {
			ts = rs[0].Value
			return true
		}
		return false
	})
	up := p.query(t, fmt.Sprintf(`up{job=%q}`, job), ts)
	require.Len(t, up, 1, "up{job=%q} at %.3f", job, ts)
	require.Equal(t, 1.0, up[0].Value, "the scrape of %s at %.3f failed", job, ts)
	return ts
}

// requireValues checks the values of a counter's series at the Unix time
// at: want's, and zero for the others.
func (p *promServer) requireValues(t *testing.T, at float64, expr string, want counts) {
	t.Helper()
	got := counts{}
	for _, s := range p.query(t, expr, at) {
		if s.Value != 0 {
			got[[2]string{s.Metric["limit"], s.Metric["decision"]}] = s.Value
		}
	}
	require.Equal(t, want, got, "%s at %.3f", expr, at)
}

// variableValues returns the values of the dashboard's $limit variable,
// label_values(METRIC, limit), as Grafana gets them: from the label
// values API with the metric as match[], and from the series API (older
// Grafana versions), which must agree.
func (p *promServer) variableValues(t *testing.T, dash dashboard, since time.Time) []string {
	t.Helper()
	var q string
	for _, v := range dash.Templating.List {
		if v.Name == "limit" {
			require.NoError(t, json.Unmarshal(v.Query, &q))
		}
	}
	m := regexp.MustCompile(`^label_values\((ratekit_[a-z_]+), limit\)$`).FindStringSubmatch(q)
	require.NotNil(t, m, "$limit query %q", q)
	params := url.Values{
		"match[]": {m[1]},
		"start":   {strconv.FormatInt(since.Add(-time.Minute).Unix(), 10)},
		"end":     {strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)},
	}
	var values []string
	p.api(t, "/api/v1/label/limit/values", params, &values)
	var series []map[string]string
	p.api(t, "/api/v1/series", params, &series)
	fromSeries := map[string]bool{}
	for _, s := range series {
		fromSeries[s["limit"]] = true
	}
	assert.ElementsMatch(t, values, sortedKeys(fromSeries), "label values and series of %s", m[1])
	assert.NotEmpty(t, values, "$limit has no values")
	return values
}
