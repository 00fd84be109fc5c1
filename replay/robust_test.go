package replay_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/replay"
	"github.com/ratekit/ratekit/rules"
)

// clf is a combined-format line of client ip at the given time.
func clf(ip, at string) string {
	return ip + ` - - [` + at + `] "GET / HTTP/1.1" 200 1 "-" "curl/8"` + "\n"
}

// Times out of the years 1970 to 2200, impossible dates and zones are bad
// lines, each with its reason, and never wrap around: the two lines of
// 1678 and 2262, int64's limits, once crashed the replay.
func TestTimeRange(t *testing.T) {
	good := clf("1.1.1.1", "01/May/2024:12:00:00 +0000")
	for _, c := range []struct {
		name, line, reason string
	}{
		{"1678", clf("1.1.1.1", "01/Jan/1678:00:00:00 +0000"), "time out of range (years 1970 to 2200)"},
		{"2262", clf("1.1.1.1", "01/Apr/2262:00:00:00 +0000"), "time out of range (years 1970 to 2200)"},
		{"9999", clf("1.1.1.1", "01/Jan/9999:00:00:00 +0000"), "time out of range (years 1970 to 2200)"},
		{"before 1970 by the zone", clf("1.1.1.1", "01/Jan/1970:00:00:00 +0100"), "time out of range (years 1970 to 2200)"},
		{"31 February", clf("1.1.1.1", "31/Feb/2024:12:00:00 +0000"), "no such date"},
		{"29 February 2023", clf("1.1.1.1", "29/Feb/2023:12:00:00 +0000"), "no such date"},
		{"zone", clf("1.1.1.1", "01/May/2024:12:00:00 +1500"), "zone offset beyond 14 hours"},
	} {
		rep := run(t, replay.Options{Limits: all(1, time.Minute)[2:3]}, good+c.line+good)
		if rep.BadLines != 1 || rep.Requests != 2 || len(rep.BadSamples) != 1 || rep.BadSamples[0].Reason != c.reason {
			t.Errorf("%s: bad %d requests %d %+v", c.name, rep.BadLines, rep.Requests, rep.BadSamples)
		}
	}
	// The edges are times (and far apart: MaxJump allows it).
	rep := run(t, replay.Options{Limits: all(1, time.Minute)[2:3], MaxJump: 240 * 365 * 24 * time.Hour},
		clf("1.1.1.1", "29/Feb/2024:12:00:00 +1400")+clf("1.1.1.1", "01/Jan/1970:00:00:00 +0000")+clf("1.1.1.1", "31/Dec/2200:23:59:59 -0000"))
	if rep.BadLines != 0 {
		t.Errorf("edges: %+v", rep.BadSamples)
	}

	json := func(v string) string { return `{"time":` + v + `,"remote_addr":"1.1.1.1"}` + "\n" }
	jgood := json("1714564800")
	for _, c := range []struct{ v, reason string }{
		{"99999999999", "time out of range (years 1970 to 2200)"},         // seconds: year 5138
		{"99999999999999999", "time out of range (years 1970 to 2200)"},   // µs
		{"9223372036854775807", "time out of range (years 1970 to 2200)"}, // ns: 2262
		{"99999999999999999999999", "time out of range (years 1970 to 2200)"},
		{`"9999-01-01T00:00:00Z"`, "time out of range (years 1970 to 2200)"},
		{`"1600-01-01T00:00:00Z"`, "time out of range (years 1970 to 2200)"},
		{`"2024-02-31T00:00:00Z"`, "no such date"},
		{`"2024-05-01T12:00:00+15:00"`, "zone offset beyond 14 hours"},
		{`"01/Jan/2262:00:00:00 +0000"`, "time out of range (years 1970 to 2200)"},
	} {
		rep := run(t, replay.Options{Format: "json", Limits: all(1, time.Minute)[2:3]}, jgood+json(c.v)+jgood)
		if rep.BadLines != 1 || rep.Requests != 2 || len(rep.BadSamples) != 1 || rep.BadSamples[0].Reason != c.reason {
			t.Errorf("%s: bad %d requests %d %+v", c.v, rep.BadLines, rep.Requests, rep.BadSamples)
		}
	}
}

// perMinute writes n combined-format lines of one client, one a minute
// from 12:00, with extra lines inserted before line i (0-based).
func perMinute(n int, extra map[int]string) string {
	var b strings.Builder
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		b.WriteString(extra[i])
		b.WriteString(clf("1.1.1.1", start.Add(time.Duration(i)*time.Minute).Format("02/Jan/2006:15:04:05 -0700")))
	}
	return b.String()
}

// The reviewer's case: 60 requests at one a minute, under 2 a minute,
// with one line dated next year in the middle. The outlier would have set
// the clock a year ahead, and every later line would have been replayed
// at that one instant; it is a bad line, and nothing is rejected.
func TestTimeJumpOutlier(t *testing.T) {
	log := perMinute(60, map[int]string{30: clf("1.1.1.1", "01/May/2025:12:00:00 +0000")})
	rep := run(t, replay.Options{Limits: all(2, time.Minute)}, log)
	if rep.Lines != 61 || rep.BadLines != 1 || rep.Requests != 60 || rep.OutOfOrder != 0 {
		t.Fatalf("lines %d bad %d requests %d out of order %d", rep.Lines, rep.BadLines, rep.Requests, rep.OutOfOrder)
	}
	if s := rep.BadSamples; len(s) != 1 || s[0].Line != 31 || s[0].Reason != "time jump" {
		t.Fatalf("samples %+v", s)
	}
	for _, l := range rep.Limits {
		if l.Rejected != 0 || l.Admitted != 60 {
			t.Errorf("%s: %+v", l.Algorithm, l)
		}
	}
	if want := time.Date(2024, 5, 1, 12, 59, 0, 0, time.UTC); !rep.End.Equal(want) {
		t.Errorf("end %v", rep.End)
	}
}

// A first line far in the past ("time":1, 1970) once became the store's
// origin, and the store's clock stood still 54 years later: every request
// at one instant. The clock starts at the first line kept.
func TestTimeJumpFirstLine(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"time":1,"remote_addr":"1.1.1.1"}` + "\n")
	for i := range 10 {
		fmt.Fprintf(&b, `{"time":%d,"remote_addr":"1.1.1.1"}`+"\n", 1714564800+60*i)
	}
	rep := run(t, replay.Options{Format: "json", Limits: all(2, time.Minute)}, b.String())
	if rep.BadLines != 1 || rep.Requests != 10 || rep.BadSamples[0].Line != 1 || rep.BadSamples[0].Reason != "time jump" {
		t.Fatalf("bad %d requests %d %+v", rep.BadLines, rep.Requests, rep.BadSamples)
	}
	if want := time.Unix(1714564800, 0).UTC(); !rep.Start.Equal(want) {
		t.Fatalf("start %v, want %v", rep.Start, want)
	}
	for _, l := range rep.Limits {
		if l.Rejected != 0 {
			t.Errorf("%s: %+v", l.Algorithm, l)
		}
	}
	// A future first line, likewise.
	rep = run(t, replay.Options{Limits: all(2, time.Minute)[:1]}, clf("1.1.1.1", "01/May/2199:12:00:00 +0000")+perMinute(3, nil))
	if rep.BadLines != 1 || rep.Requests != 3 || rep.Limits[0].Rejected != 0 {
		t.Fatalf("future first: bad %d requests %d %+v", rep.BadLines, rep.Requests, rep.Limits[0])
	}
}

// A real gap, confirmed by the lines after it (JumpLines of them in a
// row), is kept; a jump by the last lines is not; MaxJump sets the
// tolerance.
func TestTimeJumpGap(t *testing.T) {
	log := perMinute(2, nil) + clf("1.1.1.1", "01/May/2024:15:00:00 +0000") + clf("1.1.1.1", "01/May/2024:15:00:30 +0000")
	rep := run(t, replay.Options{Limits: all(1, time.Minute)[2:3], JumpLines: 2}, log)
	if rep.BadLines != 0 || rep.Requests != 4 || rep.Limits[0].Rejected != 1 || !rep.End.Equal(time.Date(2024, 5, 1, 15, 0, 30, 0, time.UTC)) {
		t.Fatalf("gap: bad %d requests %d end %v %+v", rep.BadLines, rep.Requests, rep.End, rep.Limits[0])
	}
	// By default, two lines after the gap do not confirm it.
	rep = run(t, replay.Options{Limits: all(1, time.Minute)[2:3]}, log)
	if rep.BadLines != 2 || rep.Requests != 2 || !rep.End.Equal(time.Date(2024, 5, 1, 12, 1, 0, 0, time.UTC)) {
		t.Fatalf("gap of two lines: bad %d requests %d end %v", rep.BadLines, rep.Requests, rep.End)
	}
	rep = run(t, replay.Options{Limits: all(1, time.Minute)[2:3], MaxJump: 4 * time.Hour}, perMinute(3, map[int]string{2: clf("1.1.1.1", "01/May/2024:15:00:00 +0000")}))
	if rep.BadLines != 0 || rep.Requests != 4 || rep.OutOfOrder != 1 {
		t.Fatalf("MaxJump 4h: bad %d requests %d out of order %d", rep.BadLines, rep.Requests, rep.OutOfOrder)
	}
	rep = run(t, replay.Options{Limits: all(1, time.Minute)[2:3]}, perMinute(3, nil)+clf("1.1.1.1", "01/May/2030:15:00:00 +0000"))
	if rep.BadLines != 1 || rep.Requests != 3 || rep.BadSamples[0].Line != 4 {
		t.Fatalf("last line: bad %d requests %d %+v", rep.BadLines, rep.Requests, rep.BadSamples)
	}
	// One line alone is kept.
	rep = run(t, replay.Options{Limits: all(1, time.Minute)[2:3]}, clf("1.1.1.1", "01/May/2024:15:00:00 +0000"))
	if rep.BadLines != 0 || rep.Requests != 1 {
		t.Fatalf("one line: bad %d requests %d", rep.BadLines, rep.Requests)
	}
}

// Many lines out of order, as from files given newest first, draw a
// warning in the text report.
func TestOutOfOrderWarning(t *testing.T) {
	newer, older := perMinute(5, nil), strings.ReplaceAll(perMinute(5, nil), ":12:", ":11:")
	for _, c := range []struct {
		log  string
		warn bool
	}{{older + newer, false}, {newer + older, true}} {
		rep := run(t, replay.Options{Limits: all(5, time.Minute)[2:3]}, c.log)
		var b strings.Builder
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "warning: 50.0% of the lines are earlier"); got != c.warn || rep.OutOfOrder != map[bool]int64{false: 0, true: 5}[c.warn] {
			t.Errorf("warning %v, out of order %d:\n%s", got, rep.OutOfOrder, b.String())
		}
	}
}

// remote_address 1 per minute and generic_key 3 per minute. TakeAll
// stops at the first rule that rejects, so the other did not decide:
//
//	1 10.0.0.1: both admit.                       (admitted 1)
//	2-5 10.0.0.1: remote_address rejects; generic_key not decided.
//	6 10.0.0.2, 7 10.0.0.3: both admit, generic_key at 2 and 3.
//	8 10.0.0.4: generic_key rejects (4th); remote_address not decided.
//
// remote_address: 8 requests, 3 admitted, 4 rejected, 1 not decided;
// generic_key: 8 requests, 3 admitted, 1 rejected, 4 not decided, and
// never more than its 3 admitted in a minute.
func TestRulesNotDecided(t *testing.T) {
	cfg := &rules.Config{Source: "t.yaml", Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1}},
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
	}}
	var log strings.Builder
	for i, ip := range []string{"10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		log.WriteString(clf(ip, fmt.Sprintf("01/May/2024:12:00:%02d +0000", i)))
	}
	rep := run(t, replay.Options{Rules: cfg}, log.String())
	if rep.Requests != 8 || rep.Admitted != 3 || rep.Rejected != 5 || len(rep.Limits) != 2 {
		t.Fatalf("requests %d admitted %d rejected %d limits %d", rep.Requests, rep.Admitted, rep.Rejected, len(rep.Limits))
	}
	want := map[string]struct {
		admitted, rejected, notDecided int64
		clients, limited, maxAdmitted  int
	}{
		"d/remote_address":  {3, 4, 1, 4, 1, 1},
		"d/generic_key:all": {3, 1, 4, 1, 1, 3},
	}
	for _, l := range rep.Limits {
		w, ok := want[l.Name]
		if !ok {
			t.Fatalf("limit %q", l.Name)
		}
		if l.Requests != 8 || l.Admitted != w.admitted || l.Rejected != w.rejected || l.NotDecided != w.notDecided ||
			l.Clients != w.clients || l.ClientsLimited != w.limited || l.MaxAdmittedInPeriod != w.maxAdmitted {
			t.Errorf("%s: %+v", l.Name, l)
		}
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil || !strings.Contains(b.String(), "4 of its 8 requests not decided by it") {
		t.Errorf("%v:\n%s", err, b.String())
	}
}

// More than 65536 admitted to one client in one period: the figure is a
// floor, said so.
func TestSaturated(t *testing.T) {
	var b strings.Builder
	for range maxTimes + 10 {
		b.WriteString(`{"time":1714564800,"remote_addr":"1.1.1.1"}` + "\n")
	}
	rep := run(t, replay.Options{Format: "json", Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: core.PerMinute(1 << 20)}}}, b.String())
	l := rep.Limits[0]
	if !l.Saturated || l.MaxAdmittedInPeriod != maxTimes || l.Admitted != maxTimes+10 {
		t.Fatalf("%+v", l)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "at least 65536") {
		t.Fatalf("%v:\n%s", err, text.String())
	}
	var html strings.Builder
	if err := rep.WriteHTML(&html); err != nil || !strings.Contains(html.String(), "at least 65536") {
		t.Fatal(err)
	}
}

const maxTimes = 1 << 16

// The counter is compared with a log of its own rate, never another's.
func TestCounterVsLogSameRate(t *testing.T) {
	counter := core.Limit{Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(3)}
	alone := run(t, replay.Options{Limits: []core.Limit{counter}}, handLog).CounterVsLog
	rep := run(t, replay.Options{Limits: []core.Limit{{Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(1)}, counter}}, handLog)
	c := rep.CounterVsLog
	if c == nil || alone == nil || *c != *alone || c.Limit != 3 || c.LogMaxAdmitted != 3 || len(rep.Limits) != 2 {
		t.Fatalf("%+v, alone %+v", c, alone)
	}
}

// Control characters of a log-controlled key never reach the terminal.
func TestTextKeysPrintable(t *testing.T) {
	log := "10.0.0.1 - \x1b]0;pwned\x07\x1b[31m [01/May/2024:12:00:00 +0000] \"GET / HTTP/1.1\" 200 1\n" +
		"10.0.0.1 - \x1b]0;pwned\x07\x1b[31m [01/May/2024:12:00:01 +0000] \"GET / HTTP/1.1\" 200 1\n"
	rep := run(t, replay.Options{Limits: all(1, time.Minute)[2:3], Key: "user", ShowKeys: true}, log)
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") || !strings.Contains(b.String(), `"\x1b]0;pwned\a\x1b[31m"`) {
		t.Fatalf("%q", b.String())
	}
}

// Open is called once per pass, concurrently when suggesting: each
// call gets its own reader.
func TestInputOpenConcurrent(t *testing.T) {
	var opens atomic.Int32
	in := replay.Input{Name: "t.log", Open: func() (io.ReadCloser, error) {
		opens.Add(1)
		return io.NopCloser(strings.NewReader(handLog)), nil
	}}
	rep, err := replay.Run(context.Background(), replay.Options{Limits: all(3, time.Minute), TargetReject: 0.1}, in)
	if err != nil || len(rep.Suggestions) == 0 || opens.Load() < 2 {
		t.Fatalf("%v: %d opens", err, opens.Load())
	}
}

func TestLimitOptions(t *testing.T) {
	for name, o := range map[string]replay.Options{
		"max line": {Limits: all(1, time.Minute), MaxLineBytes: replay.MaxLineBytesLimit + 1},
		"max jump": {Limits: all(1, time.Minute), MaxJump: -time.Second},
	} {
		if _, err := replay.Run(context.Background(), o, input("x", "")); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
