package replay_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/replay"
	"github.com/ratekit/ratekit/rules"
)

func input(name, text string) replay.Input {
	return replay.Input{Name: name, Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil }}
}

func run(t *testing.T, o replay.Options, text string) *replay.Report {
	t.Helper()
	rep, err := replay.Run(context.Background(), o, input("t.log", text))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func all(count int, period time.Duration) []core.Limit {
	var ls []core.Limit
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
		ls = append(ls, core.Limit{Algorithm: a, Rate: core.Rate{Count: count, Period: period}})
	}
	return ls
}

// A client sends at 0s, 10s, 20s, 59s, 60s, 61s and 62s (after 12:00),
// another once; the limit is 3 per minute.
//
//	token bucket (emission 20s, tau 60s): tat 20, 40, 60, 80, 100, 120 all
//	  within 60s of their times; at 62s tat would be 140: rejected. 1.
//	  Admitted in one minute: 10s, 20s, 59s, 60s, 61s = 5.
//	fixed window: 59s is the 4th in [12:00, 12:01): rejected; 60s, 61s,
//	  62s open a window. 1; admitted in (2s, 62s]: 10, 20, 60, 61, 62 = 5.
//	log: 59s sees 3 within the minute: rejected; at 60s the entry of 0s
//	  has expired: admitted; 61s and 62s see 10, 20, 60: rejected. 3.
//	counter: 59s: cur 3, rejected. 60s, 61s, 62s: prev 3 weighs
//	  ceil(3 x 60/60), ceil(3 x 59/60), ceil(3 x 58/60) = 3: rejected. 4.
const handLog = `10.0.0.1 - - [01/May/2024:12:00:00 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:12:00:10 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:12:00:20 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.2 - - [01/May/2024:12:00:20 +0000] "GET /a HTTP/1.1" 200 12
garbage line
10.0.0.1 - alice [01/May/2024:12:00:59 +0000] "GET /a HTTP/1.1" 429 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:14:01:00 +0200] "GET /a HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:12:01:01 +0000] "GET /a?x=1 HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:08:01:02 -0400] "POST /b HTTP/1.1" 200 12 "-" "curl/8"
`

func TestHandComputed(t *testing.T) {
	rep := run(t, replay.Options{Limits: all(3, time.Minute), ShowKeys: true}, handLog)
	if rep.Lines != 9 || rep.BadLines != 1 || rep.Requests != 8 || rep.Logged429 != 1 || rep.OutOfOrder != 0 {
		t.Fatalf("lines %d bad %d requests %d 429s %d out of order %d", rep.Lines, rep.BadLines, rep.Requests, rep.Logged429, rep.OutOfOrder)
	}
	if s := rep.BadSamples; len(s) != 1 || s[0].Line != 5 || s[0].Text != "garbage line" {
		t.Fatalf("bad samples %+v", s)
	}
	want := []struct {
		algo               string
		rejected, burst, a int
	}{
		{"token-bucket", 1, 5, 7}, {"leaky-bucket", 1, 5, 7}, {"fixed-window", 1, 5, 7},
		{"sliding-window-log", 3, 3, 5}, {"sliding-window-counter", 4, 3, 4},
	}
	if len(rep.Limits) != len(want) {
		t.Fatalf("%d limits", len(rep.Limits))
	}
	for i, w := range want {
		l := rep.Limits[i]
		if l.Algorithm != w.algo || l.Requests != 8 || l.Rejected != int64(w.rejected) || l.Admitted != int64(w.a) ||
			l.MaxAdmittedInPeriod != w.burst || l.Clients != 2 || l.ClientsLimited != 1 {
			t.Errorf("%s: got %+v", w.algo, l)
		}
		if len(l.TopLimited) != 1 || l.TopLimited[0].Key != "10.0.0.1" || l.TopLimited[0].Rejected != int64(w.rejected) || l.TopLimited[0].Peak != 6 {
			t.Errorf("%s: top %+v", w.algo, l.TopLimited)
		}
	}
	d := rep.Limits[0].Distribution
	if d.Clients != 2 || d.P50 != 1 || d.Max != 6 {
		t.Errorf("distribution %+v", d)
	}
	// The counter rejects at 60s where the log admits; at 61s and 62s
	// both reject (the states differ from then on, each its own).
	c := rep.CounterVsLog
	if c == nil || c.Differ != 1 || c.LogOnly != 1 || c.CounterOnly != 0 || c.LogMaxAdmitted != 3 {
		t.Fatalf("comparison %+v", c)
	}
}

func TestKeyHashedByDefault(t *testing.T) {
	rep := run(t, replay.Options{Limits: all(3, time.Minute)[2:3]}, handLog)
	if k := rep.Limits[0].TopLimited[0].Key; k != core.KeyHash("10.0.0.1") {
		t.Fatalf("key %q", k)
	}
	if rep.CounterVsLog != nil {
		t.Fatal("a comparison without the counter")
	}
}

// Lines earlier than the latest seen are replayed at the latest time:
// with a fixed window of 2 per minute, the line of 12:00:30 after
// 12:01:10 counts in the window of 12:01.
func TestOutOfOrder(t *testing.T) {
	log := `1.1.1.1 - - [01/May/2024:12:00:10 +0000] "GET / HTTP/1.1" 200 1
1.1.1.1 - - [01/May/2024:12:01:10 +0000] "GET / HTTP/1.1" 200 1
1.1.1.1 - - [01/May/2024:12:00:30 +0000] "GET / HTTP/1.1" 200 1
1.1.1.1 - - [01/May/2024:12:01:20 +0000] "GET / HTTP/1.1" 200 1
`
	rep := run(t, replay.Options{Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}}}, log)
	if rep.OutOfOrder != 1 || rep.Limits[0].Rejected != 1 || rep.Limits[0].Admitted != 3 {
		t.Fatalf("out of order %d, %+v", rep.OutOfOrder, rep.Limits[0])
	}
	if !rep.End.Equal(time.Date(2024, 5, 1, 12, 1, 20, 0, time.UTC)) {
		t.Fatalf("end %v", rep.End)
	}
}

func TestBadInput(t *testing.T) {
	long := "1.1.1.1 - - [01/May/2024:12:00:10 +0000] \"GET /" + strings.Repeat("x", 5000) + " HTTP/1.1\" 200 1\n"
	log := "\n" + long + `1.1.1.1 - - [01/May/2024:12:00:10 +0000] "GET / HTTP/1.1" 200 1
1.1.1.1 - - [31/Foo/2024:12:00:10 +0000] "GET / HTTP/1.1" 200 1
1.1.1.1 - - [01/May/2024:12:00:10 +0000] "GET / HTTP/1.1" 2x0 1
1.1.1.1 - - [01/May/2024:12:00:10 +0000] "GET / HTTP/1.1
` + long + `1.1.1.1 - - [01/May/2024:12:00:11 +0000] "GET / HTTP/1.1" 200 1`
	rep := run(t, replay.Options{Limits: all(1, time.Second)[:1], MaxLineBytes: 1000}, log)
	if rep.Lines != 7 || rep.BadLines != 5 || rep.Requests != 2 {
		t.Fatalf("lines %d bad %d requests %d: %+v", rep.Lines, rep.BadLines, rep.Requests, rep.BadSamples)
	}
	var lines []int
	for _, s := range rep.BadSamples {
		lines = append(lines, s.Line)
	}
	if len(lines) != 5 || lines[0] != 2 || lines[1] != 4 || lines[4] != 7 || rep.BadSamples[0].Reason != "line too long" {
		t.Fatalf("samples %+v", rep.BadSamples)
	}
}

func TestEmpty(t *testing.T) {
	for _, text := range []string{"", "\n\n"} {
		rep := run(t, replay.Options{Limits: all(5, time.Minute)}, text)
		if rep.Lines != 0 || rep.Requests != 0 || len(rep.Limits) != 0 {
			t.Fatalf("%+v", rep)
		}
		var b bytes.Buffer
		if err := rep.WriteText(&b); err != nil || !strings.Contains(b.String(), "0 lines") {
			t.Fatal(err, b.String())
		}
		if err := rep.WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOptionErrors(t *testing.T) {
	lim := all(5, time.Minute)[:1]
	for name, o := range map[string]replay.Options{
		"format":   {Format: "apache2", Limits: lim},
		"key":      {Key: "cookie", Limits: lim},
		"header":   {Key: "header:X-API-Key", Limits: lim},
		"none":     {},
		"both":     {Limits: lim, Rules: &rules.Config{Domain: "d"}},
		"limit":    {Limits: []core.Limit{{Rate: core.Rate{Count: -1, Period: time.Second}}}},
		"periods":  {Limits: []core.Limit{{Rate: core.PerMinute(1)}, {Rate: core.PerHour(1)}}},
		"target":   {Limits: lim, TargetReject: 1.5},
		"proxies":  {Limits: lim, TrustedProxies: []string{"not-a-cidr"}},
		"rules":    {Rules: &rules.Config{Domain: "d", Descriptors: []rules.Descriptor{{Key: "nope"}}}},
		"jsonhead": {Format: "json", Fields: replay.Fields{Headers: map[string]string{"X": ""}}, Limits: lim},
	} {
		if _, err := replay.Run(context.Background(), o, input("x", "")); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, err := replay.Run(context.Background(), replay.Options{Limits: lim}, replay.Input{Name: "missing", Open: func() (io.ReadCloser, error) { return nil, io.ErrUnexpectedEOF }})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatal(err)
	}
}

func TestGzip(t *testing.T) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(handLog))
	zw.Close()
	rep := run(t, replay.Options{Limits: all(3, time.Minute)[3:4]}, b.String())
	if rep.Requests != 8 || rep.Limits[0].Rejected != 3 {
		t.Fatalf("%+v", rep.Limits)
	}
}

// Compressed content cut short or corrupt ends its input as one bad
// line: the lines before it are replayed, the next input is read, and
// the replay does not fail. An error of the input itself still fails it.
func TestGzipBroken(t *testing.T) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(handLog))
	zw.Close()
	whole := b.Bytes()
	// handLog has 9 lines, 8 replayed; its last line is 80 bytes.
	corrupt := append([]byte(nil), whole...)
	corrupt[len(corrupt)-5] ^= 0xff // the length in the trailer
	for name, c := range map[string]struct {
		text            string
		lines, requests int64
		line            int
		reason          string
	}{
		"magic only":  {"\x1f\x8b", 1, 0, 1, "compressed input ends early"},
		"bad header":  {"\x1f\x8bnot gzip at all\n", 1, 0, 1, "compressed input is corrupt (gzip: invalid header)"},
		"cut short":   {string(whole[:len(whole)-12]), 10, 8, 10, "compressed input ends early"},
		"bad trailer": {string(corrupt), 10, 8, 10, "compressed input is corrupt (gzip: invalid checksum)"},
	} {
		rep, err := replay.Run(context.Background(), replay.Options{Limits: all(3, time.Minute)[3:4]}, input("z.log.gz", c.text), input("next.log", "10.0.0.9 - - [01/May/2024:12:02:00 +0000] \"GET / HTTP/1.1\" 200 1\n"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var last replay.BadLine
		if n := len(rep.BadSamples); n > 0 {
			last = rep.BadSamples[n-1]
		}
		if rep.Lines != c.lines+1 || rep.Requests != c.requests+1 || last.Input != "z.log.gz" || last.Line != c.line || last.Reason != c.reason {
			t.Errorf("%s: %d lines, %d requests, last bad line %+v", name, rep.Lines, rep.Requests, last)
		}
	}
	broken := replay.Input{Name: "disk.log.gz", Open: func() (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(whole[:40]), errReader{})), nil
	}}
	if _, err := replay.Run(context.Background(), replay.Options{Limits: all(3, time.Minute)[3:4]}, broken); err == nil || !strings.Contains(err.Error(), "disk.log.gz: line 1: disk failed") {
		t.Fatalf("an input's own error: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk failed") }

// JSON lines, keyed by the client IP behind a trusted proxy: the
// X-Forwarded-For member counts only when the peer is the proxy.
func TestJSONTrustedProxy(t *testing.T) {
	log := `{"ts":"2024-05-01T12:00:00Z","ip":"10.9.9.9","xff":"203.0.113.7","m":"GET","p":"/a","s":200}
{"ts":"2024-05-01T12:00:01.5Z","ip":"10.9.9.9","xff":"203.0.113.7","nested":{"a":[1,"}"]},"s":200}
{"ts":1714564803,"ip":"10.9.9.9","xff":"203.0.113.8","s":200}
{"ts":"01/May/2024:12:00:04 +0000","ip":"198.51.100.1","xff":"203.0.113.7","s":"200"}
{"ts":1714564805250,"ip":"198.51.100.1","xff":"203.0.113.7"}
{"ip":"1.2.3.4"}
{"ts":"yesterday","ip":"1.2.3.4"}
not json
`
	o := replay.Options{
		Format: "json", Fields: replay.Fields{Time: "ts", Client: "ip", Method: "m", Path: "p", Status: "s", Headers: map[string]string{"X-Forwarded-For": "xff"}},
		Limits:         []core.Limit{{Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(1)}},
		TrustedProxies: []string{"10.0.0.0/8"}, ShowKeys: true,
	}
	rep := run(t, o, log)
	l := rep.Limits[0]
	if rep.BadLines != 3 || rep.Requests != 5 || l.Clients != 3 || l.Rejected != 2 {
		t.Fatalf("bad %d requests %d: %+v %+v", rep.BadLines, rep.Requests, l, rep.BadSamples)
	}
	if l.TopLimited[0].Key != "198.51.100.1" || l.TopLimited[1].Key != "203.0.113.7" {
		t.Fatalf("top %+v", l.TopLimited)
	}
	if rep.BadSamples[0].Reason != "no time" || rep.BadSamples[1].Reason != "time does not parse" {
		t.Fatalf("%+v", rep.BadSamples)
	}
}

func TestHeaderAndUserKeys(t *testing.T) {
	rep := run(t, replay.Options{Limits: all(1, time.Hour)[2:3], Key: "header:user-agent", ShowKeys: true}, handLog)
	if rep.Unkeyed != 1 || rep.Limits[0].Clients != 1 || rep.Limits[0].Rejected != 6 {
		t.Fatalf("unkeyed %d %+v", rep.Unkeyed, rep.Limits[0])
	}
	rep = run(t, replay.Options{Limits: all(1, time.Hour)[2:3], Key: "user", ShowKeys: true}, handLog)
	if rep.Unkeyed != 7 || rep.Limits[0].Clients != 1 || len(rep.Limits[0].TopLimited) != 0 {
		t.Fatalf("unkeyed %d %+v", rep.Unkeyed, rep.Limits[0])
	}
}

// A rules config decides as the middleware: the POST /b line gets its
// shadow block list entry beside remote_address's 3 per minute.
func TestRules(t *testing.T) {
	cfg := &rules.Config{Source: "test.yaml", Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "generic_key", Value: "b", Match: &rules.Match{Methods: []string{"POST"}, Path: "/b"},
			ShadowMode: true, RateLimit: &rules.RateLimit{Unit: "hour", RequestsPerUnit: 0}},
	}}
	rep := run(t, replay.Options{Rules: cfg, ShowKeys: true}, handLog)
	// 10.0.0.1, fixed window of 3: 59s rejected, as above. The shadow
	// block list entry would reject POST /b but passes it.
	if rep.Requests != 8 || rep.Rejected != 1 || rep.Admitted != 7 || len(rep.Limits) != 2 {
		t.Fatalf("%+v", rep)
	}
	ra, b := rep.Limits[0], rep.Limits[1]
	if ra.Requests != 8 || ra.Rejected != 1 || ra.Clients != 2 || ra.ClientsLimited != 1 || ra.Algorithm != "fixed-window" {
		t.Fatalf("remote_address %+v", ra)
	}
	if b.Requests != 1 || b.Rejected != 1 || !b.Shadow {
		t.Fatalf("shadow %+v", b)
	}
}

// Every suggestion meets its target when its limit is replayed, and the
// count below it, when reported as tried, misses.
func TestSuggestionsMeetTargets(t *testing.T) {
	var b strings.Builder
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	x := uint32(7)
	for i := 0; i < 6000; i++ {
		x = x*1664525 + 1013904223
		client := x >> 24 % 40
		if client < 4 { // heavy clients
			client = 100 + client
		}
		at := start.Add(time.Duration(i) * 150 * time.Millisecond).Add(time.Duration(x>>16%1000) * time.Millisecond)
		b.WriteString(`{"time":"` + at.Format(time.RFC3339Nano) + `","remote_addr":"10.0.0.` + itoa(int(client)) + `"}` + "\n")
	}
	log := b.String()
	o := replay.Options{Format: "json", Limits: all(10, time.Minute), TargetReject: 0.02, TargetLimited: 0.1}
	rep := run(t, o, log)
	if len(rep.Suggestions) != 10 {
		t.Fatalf("%d suggestions", len(rep.Suggestions))
	}
	for _, s := range rep.Suggestions {
		if !s.Met {
			t.Errorf("%+v", s)
			continue
		}
		algo, _ := core.ParseAlgorithm(s.Algorithm)
		check := func(count int) (rejShare, limShare float64) {
			l := core.Limit{Algorithm: algo, Rate: core.Rate{Count: count, Period: time.Minute}}
			r := run(t, replay.Options{Format: "json", Limits: []core.Limit{l}}, log)
			return r.Limits[0].RejectedShare, r.Limits[0].LimitedShare
		}
		meets := func(rej, lim float64) bool {
			if s.Target == "reject" {
				return rej <= s.Share
			}
			return lim <= s.Share
		}
		if rej, lim := check(s.Limit); !meets(rej, lim) {
			t.Errorf("%s %s: %d replays to %g rejected, %g limited", s.Algorithm, s.Target, s.Limit, rej, lim)
		}
		if s.Below != s.Limit-1 {
			t.Errorf("%s %s: %d, smallest not found (below %d)", s.Algorithm, s.Target, s.Limit, s.Below)
		} else if rej, lim := check(s.Below); meets(rej, lim) {
			t.Errorf("%s %s: %d meets the target too", s.Algorithm, s.Target, s.Below)
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func TestSyntheticDeterministic(t *testing.T) {
	read := func() []byte {
		rc, _ := replay.Synthetic(1).Open()
		defer rc.Close()
		buf := make([]byte, 1<<16)
		n, _ := io.ReadFull(rc, buf)
		return buf[:n]
	}
	a, b := read(), read()
	if !bytes.Equal(a, b) || !bytes.HasPrefix(a, []byte(`{"time":1700000000.`)) {
		t.Fatalf("%.200s", a)
	}
}
