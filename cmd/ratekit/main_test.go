package main

import (
	"github.com/ratekit/ratekit/internal/cli"

	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const sample = `10.0.0.1 - - [01/May/2024:12:00:00 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:12:00:10 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:12:00:20 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
bad
`

func runCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &o, &e)
	code = cli.ExitCode("ratekit", err, &e)
	return code, o.String(), e.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUsage(t *testing.T) {
	log := writeFile(t, "a.log", sample)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "valid: replay"},
		{[]string{"play"}, 2, `unknown subcommand "play" (valid: replay, serve)`},
		{[]string{"replay", "-nope", log}, 2, "flag provided but not defined"},
		{[]string{"replay", "-format", "apache", log}, 2, "valid: combined, common, json"},
		{[]string{"replay", "-algorithm", "bogus", log}, 2, "valid: token-bucket"},
		{[]string{"replay", "-limit", "0", log}, 2, "-limit 0"},
		{[]string{"replay", "-period", "-1s", log}, 2, "-period"},
		{[]string{"replay", "-burst", "3", log}, 2, "-burst applies only"},
		{[]string{"replay", "-key", "cookie", log}, 2, "valid: ip, header:NAME, user"},
		{[]string{"replay", "-target-reject", "abc", log}, 2, "not a share"},
		{[]string{"replay", "-target-reject", "150%", log}, 2, "not a share"},
		{[]string{"replay"}, 2, "no FILE"},
		{[]string{"replay", "-json-time", "t", log}, 2, "only with -format json"},
		{[]string{"replay", "-max-line", "1048577", log}, 2, "-max-line 1048577: must be from 16 to 1048576"},
		{[]string{"replay", "-max-jump", "-1h", log}, 2, "-max-jump -1h0m0s: must not be negative"},
		{[]string{"replay", filepath.Join(t.TempDir(), "missing.log")}, 1, "no such file"},
		{[]string{"replay", "-trusted-proxies", "x/99", log}, 1, "trusted proxies"},
		{[]string{"replay", "-key", "header:X-API-Key", log}, 1, "no header X-Api-Key"},
		{[]string{"replay", "-config", filepath.Join(t.TempDir(), "none.yaml"), log}, 1, "-config"},
		{[]string{"replay", "-config", writeFile(t, "r.yaml", "domain: d\ndescriptors:\n  - key: remote_address\n    rate_limt: {}\n"), log}, 1, "rate_limt"},
		{[]string{"replay", "-config", writeFile(t, "r.yaml", "domain: d\n"), "-limit", "3", log}, 2, "only without -config"},
		{[]string{"replay", "-config", writeFile(t, "r.yaml", "domain: d\n"), "-headroom", "2", log}, 2, "-headroom applies only without -config"},
		{[]string{"replay", "-headroom", "0.5", log}, 2, "-headroom 0.5: must be from 1 to 100"},
		{[]string{"replay", "-headroom", "NaN", log}, 2, "-headroom NaN: must be from 1 to 100"},
		{[]string{"replay", "-headroom", "2", "-outlier-factor", "0.5", log}, 2, "-outlier-factor 0.5: must be at least 1"},
		{[]string{"replay", "-outlier-factor", "5", log}, 2, "-outlier-factor applies only with -headroom, -target-reject or -target-limited"},
	} {
		code, _, stderr := runCmd(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want %d with %q; stderr:\n%s", c.args, code, c.code, c.want, stderr)
		}
	}
}

func TestShares(t *testing.T) {
	for in, want := range map[string]float64{"0.1%": 0.001, "0.001": 0.001, "1 %": 0.01, "0": 0} {
		if got, err := parseShare(in); err != nil || got != want {
			t.Errorf("%q: %g %v", in, got, err)
		}
	}
}

// The -json schema: one object with, per limit, at least these fields.
func TestJSON(t *testing.T) {
	log := writeFile(t, "a.log", sample)
	code, out, stderr := runCmd(t, "", "replay", "-json", "-algorithm", "all", "-limit", "2", "-target-limited", "1%", log)
	if code != 0 {
		t.Fatal(stderr)
	}
	var rep map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value")
	}
	limits, _ := rep["limits"].([]any)
	if len(limits) != 5 {
		t.Fatalf("limits: %v", rep["limits"])
	}
	for _, l := range limits {
		m := l.(map[string]any)
		for _, f := range []string{"algorithm", "requests", "admitted", "rejected", "clients", "clients_limited", "top_limited", "max_admitted_in_period", "distribution"} {
			if _, ok := m[f]; !ok {
				t.Errorf("limit %v lacks %q", m["algorithm"], f)
			}
		}
		if m["requests"].(float64) != 3 || m["clients"].(float64) != 1 {
			t.Errorf("%v", m)
		}
	}
	for _, f := range []string{"lines", "bad_lines", "bad_samples", "out_of_order", "counter_vs_log", "suggestions", "series"} {
		if _, ok := rep[f]; !ok {
			t.Errorf("report lacks %q", f)
		}
	}
}

func TestStdinAndGzip(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(sample))
	zw.Close()
	gz := writeFile(t, "a.log.gz", z.String())
	for name, c := range map[string]struct {
		stdin string
		args  []string
	}{
		"stdin":      {sample, []string{"-"}},
		"stdin gzip": {z.String(), []string{"-"}},
		"file gzip":  {"", []string{gz}},
	} {
		args := append([]string{"replay", "-json", "-algorithm", "fixed-window", "-limit", "2", "-target-reject", "0.1%"}, c.args...)
		code, out, stderr := runCmd(t, c.stdin, args...)
		if code != 0 {
			t.Fatalf("%s: %s", name, stderr)
		}
		var rep struct {
			BadLines int64 `json:"bad_lines"`
			Limits   []struct {
				Requests, Rejected int64
			} `json:"limits"`
			Suggestions []struct{ Limit int } `json:"suggestions"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.BadLines != 1 || rep.Limits[0].Requests != 3 || rep.Limits[0].Rejected != 1 || rep.Suggestions[0].Limit != 3 {
			t.Errorf("%s: %+v", name, rep)
		}
	}
}

// Standard input without suggestions is read as it comes, once, never
// copied: the streamed path.
func TestStdinStreamed(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(sample))
	zw.Close()
	for name, stdin := range map[string]string{"plain": sample, "gzip": z.String()} {
		code, out, stderr := runCmd(t, stdin, "replay", "-json", "-algorithm", "fixed-window", "-limit", "2", "-")
		if code != 0 {
			t.Fatalf("%s: %s", name, stderr)
		}
		var rep struct {
			Inputs   []string `json:"inputs"`
			BadLines int64    `json:"bad_lines"`
			Limits   []struct {
				Requests, Rejected int64
			} `json:"limits"`
			Suggestions []any `json:"suggestions"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Inputs) != 1 || rep.Inputs[0] != "-" || rep.BadLines != 1 || len(rep.Limits) != 1 ||
			rep.Limits[0].Requests != 3 || rep.Limits[0].Rejected != 1 || rep.Suggestions != nil {
			t.Errorf("%s: %+v", name, rep)
		}
	}
}

// -max-jump: a line 2 hours ahead, not confirmed by the next, is a time
// jump by default, and replayed with -max-jump 3h.
func TestMaxJump(t *testing.T) {
	log := writeFile(t, "a.log", `10.0.0.1 - - [01/May/2024:12:00:00 +0000] "GET /a HTTP/1.1" 200 12
10.0.0.1 - - [01/May/2024:12:00:10 +0000] "GET /a HTTP/1.1" 200 12
10.0.0.1 - - [01/May/2024:14:00:00 +0000] "GET /a HTTP/1.1" 200 12
10.0.0.1 - - [01/May/2024:12:00:20 +0000] "GET /a HTTP/1.1" 200 12
`)
	for _, c := range []struct {
		args          []string
		bad, requests int64
	}{
		{nil, 1, 3},
		{[]string{"-max-jump", "3h"}, 0, 4},
	} {
		args := append(append([]string{"replay", "-json"}, c.args...), log)
		code, out, stderr := runCmd(t, "", args...)
		if code != 0 {
			t.Fatal(stderr)
		}
		var rep struct {
			BadLines   int64 `json:"bad_lines"`
			Requests   int64 `json:"requests"`
			BadSamples []struct {
				Line   int    `json:"line"`
				Reason string `json:"reason"`
			} `json:"bad_samples"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.BadLines != c.bad || rep.Requests != c.requests || (c.bad > 0 && (rep.BadSamples[0].Line != 3 || rep.BadSamples[0].Reason != "time jump")) {
			t.Errorf("%v: %+v", c.args, rep)
		}
	}
}

func TestTextAndHTML(t *testing.T) {
	log := writeFile(t, "a.log", sample)
	html := filepath.Join(t.TempDir(), "r.html")
	code, out, stderr := runCmd(t, "", "replay", "-algorithm", "sliding-window-counter", "-limit", "2", "-html", html, log)
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{"3 requests replayed, 1 bad lines", "a.log:4: not in the format", "sliding-window-counter vs sliding-window-log"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatal(err)
	}
}

func TestRulesFile(t *testing.T) {
	log := writeFile(t, "a.log", sample)
	rules := writeFile(t, "rules.yaml", "domain: d\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n")
	code, out, stderr := runCmd(t, "", "replay", "-config", rules, "-json", log)
	if code != 0 {
		t.Fatal(stderr)
	}
	var rep struct {
		Requests, Admitted, Rejected int64
		Limits                       []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 3 || rep.Rejected != 1 || len(rep.Limits) != 1 || rep.Limits[0].Name != "d/remote_address" {
		t.Fatalf("%+v", rep)
	}
}

// writeBenchLog writes n lines of the combined format: 20000 clients
// over an hour, in time order.
func writeBenchLog(b *testing.B, n int) string {
	p := filepath.Join(b.TempDir(), "bench.log")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	x := uint64(1)
	for i := range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		at := start.Add(time.Duration(int64(i) * int64(time.Hour) / int64(n)))
		c := x % 20000
		fmt.Fprintf(w, "10.%d.%d.%d - - [%s] \"GET /api/items/%d HTTP/1.1\" 200 %d \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n",
			c>>16, c>>8&255, c&255, at.Format("02/Jan/2006:15:04:05 -0700"), x%1000, 100+x%5000)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return p
}

// BenchmarkReplay replays a generated log of 3 million lines end to end
// (reading, parsing, deciding, reporting), as the command does:
//
//	cd cmd/ratekit && go test -run '^$' -bench Replay -benchtime 3x
func BenchmarkReplay(b *testing.B) {
	const lines = 3_000_000
	log := writeBenchLog(b, lines)
	for _, algo := range []string{"sliding-window-counter", "fixed-window", "all"} {
		b.Run(algo, func(b *testing.B) {
			for b.Loop() {
				var out, errs bytes.Buffer
				if err := run(context.Background(), []string{"replay", "-algorithm", algo, "-limit", "100", "-json", log}, nil, &out, &errs); err != nil {
					b.Fatal(err, errs.String())
				}
			}
			b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}

// -headroom suggests the busiest normal client's peak times the factor,
// and says what it refuses the outlier: nine clients send 2 to 10
// requests in one minute, 10.0.0.99 sends 41 (half of them all). The
// median peak is 4, so 10.0.0.99 peaks above 10 x 4 and is an outlier;
// the busiest normal client sent 10, and 10 x 1.5 = 15 a minute admits
// 15 of the outlier's 41 in the sliding window log. Read from standard
// input, which the suggestion reads again.
func TestHeadroom(t *testing.T) {
	type request struct {
		at     time.Time
		client string
	}
	var requests []request
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for i, n := range []int{2, 3, 3, 4, 4, 4, 5, 6, 10, 41} {
		client := fmt.Sprintf("10.0.0.%d", i+1)
		if n == 41 {
			client = "10.0.0.99"
		}
		for j := range n {
			requests = append(requests, request{start.Add(time.Duration(j) * time.Minute / time.Duration(n)), client})
		}
	}
	sort.SliceStable(requests, func(i, j int) bool { return requests[i].at.Before(requests[j].at) })
	var log strings.Builder
	for _, r := range requests {
		fmt.Fprintf(&log, "%s - - [%s] \"GET / HTTP/1.1\" 200 5\n", r.client, r.at.Format("02/Jan/2006:15:04:05 -0700"))
	}
	code, out, stderr := runCmd(t, log.String(), "replay", "-algorithm", "sliding-window-log", "-limit", "100", "-headroom", "1.5", "-show-keys", "-")
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{
		"suggested limits (each replayed):\n" +
			"  normal clients: 9 of 10, those whose peak is at most 40 per 1m0s (10x the median client's peak, 4); the busiest, 10.0.0.9, peaked at 10 per 1m0s\n" +
			"  outliers: 1 client, peaking above 40 per 1m0s, which sent 41 of the 82 requests (50.0%)\n" +
			"  sliding-window-log     headroom 1.5x over the busiest normal client's peak, 10 per 1m0s: 15/1m0s (replayed: 31.7% rejected, 1 of 10 clients limited; normal clients limited: 0 of 9)\n" +
			"      outlier 10.0.0.99 sent 41 in its busiest 1m0s and 41 in all (50.0% of all requests); this limit would have refused 26 of the 41 (63.4%)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	// -outlier-factor 5 puts the bound at 5 x 4 = 20: 10.0.0.99 (41) is
	// an outlier still, and the busiest normal client's 10 x 2 is 20.
	code, out, stderr = runCmd(t, log.String(), "replay", "-algorithm", "fixed-window", "-limit", "100", "-headroom", "2", "-outlier-factor", "5", "-json", "-")
	if code != 0 {
		t.Fatal(stderr)
	}
	var rep struct {
		Normal struct {
			OutlierAbove int `json:"outlier_above"`
			Outliers     int `json:"outliers"`
		} `json:"normal"`
		Suggestions []struct {
			Target   string
			Headroom float64
			Limit    int
		} `json:"suggestions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Normal.OutlierAbove != 20 || rep.Normal.Outliers != 1 || len(rep.Suggestions) != 1 ||
		rep.Suggestions[0].Target != "headroom" || rep.Suggestions[0].Headroom != 2 || rep.Suggestions[0].Limit != 20 {
		t.Fatalf("%s", out)
	}
}
