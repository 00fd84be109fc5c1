package replay_test

// RATEKIT_MEASURE=1 runs TestMeasureClientMemory as well: the memory a
// replay holds per client, at 200,000 clients.
//
//	RATEKIT_MEASURE=1 go test ./replay -run TestMeasureClientMemory -v -count=1

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/replay"
	"github.com/ratekit/ratekit/rules"
)

// file is the Input of a file of testdata.
func file(name string) replay.Input {
	path := "testdata/" + name
	return replay.Input{Name: path, Open: func() (io.ReadCloser, error) { return os.Open(path) }}
}

func runFile(t *testing.T, o replay.Options, name string) *replay.Report {
	t.Helper()
	rep, err := replay.Run(context.Background(), o, file(name))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// testdata/future.log: one client sends one request a minute for an hour,
// under a limit of 2 a minute; in the middle, two lines are dated 2199.
// They once moved the clock to 2199, and the 30 lines after them were
// replayed at that one instant: all 30 rejected. Two lines do not move the
// clock: they are bad lines, and nothing is rejected.
func TestFutureLinesFile(t *testing.T) {
	lim := []core.Limit{{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 2, Period: time.Minute}}}
	rep := runFile(t, replay.Options{Limits: lim}, "future.log")
	if rep.Lines != 62 || rep.BadLines != 2 || rep.Requests != 60 || rep.OutOfOrder != 0 {
		t.Fatalf("lines %d bad %d requests %d out of order %d; want 62, 2, 60, 0", rep.Lines, rep.BadLines, rep.Requests, rep.OutOfOrder)
	}
	for _, s := range rep.BadSamples {
		if s.Reason != "time jump" || (s.Line != 31 && s.Line != 32) {
			t.Errorf("bad line %+v, want lines 31 and 32, time jump", s)
		}
	}
	if l := rep.Limits[0]; l.Rejected != 0 || l.Admitted != 60 {
		t.Errorf("admitted %d rejected %d, want 60 and 0", l.Admitted, l.Rejected)
	}
	if want := time.Date(2024, 5, 1, 12, 59, 0, 0, time.UTC); !rep.End.Equal(want) {
		t.Errorf("end %v, want %v", rep.End, want)
	}
	// JumpLines 2 restores the old rule: the two lines move the clock.
	rep = runFile(t, replay.Options{Limits: lim, JumpLines: 2}, "future.log")
	if rep.BadLines != 0 || rep.OutOfOrder != 30 || rep.Limits[0].Rejected != 30 {
		t.Errorf("JumpLines 2: bad %d out of order %d rejected %d; want 0, 30, 30", rep.BadLines, rep.OutOfOrder, rep.Limits[0].Rejected)
	}
}

// testdata/gap.log: ten requests a minute apart, a quiet night of six
// hours, ten more: the run of ten after the gap moves the clock.
func TestGapFile(t *testing.T) {
	lim := []core.Limit{{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 2, Period: time.Minute}}}
	rep := runFile(t, replay.Options{Limits: lim}, "gap.log")
	if rep.BadLines != 0 || rep.Requests != 20 || rep.Limits[0].Rejected != 0 {
		t.Fatalf("bad %d requests %d rejected %d; want 0, 20, 0", rep.BadLines, rep.Requests, rep.Limits[0].Rejected)
	}
	if want := time.Date(2024, 5, 1, 18, 9, 0, 0, time.UTC); !rep.End.Equal(want) {
		t.Errorf("end %v, want %v", rep.End, want)
	}
}

// testdata/users.log: user names that hold " [" and "]" (a client
// chooses its name) once hid their own lines, as bad lines "time does not
// parse": a limit keyed by user never saw those users. Each line is read
// with its user; a line cut short is a bad line, counted and quoted.
func TestUserNamesFile(t *testing.T) {
	lim := []core.Limit{{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 2, Period: time.Minute}}}
	rep := runFile(t, replay.Options{Limits: lim, Key: "user", ShowKeys: true}, "users.log")
	if rep.Lines != 31 || rep.BadLines != 1 || rep.Unkeyed != 5 || rep.Requests != 25 {
		t.Fatalf("lines %d bad %d unkeyed %d requests %d; want 31, 1, 5, 25; bad lines %+v", rep.Lines, rep.BadLines, rep.Unkeyed, rep.Requests, rep.BadSamples)
	}
	if s := rep.BadSamples; len(s) != 1 || s[0].Line != 31 || s[0].Reason != "not in the format" {
		t.Errorf("bad lines %+v, want line 31, not in the format", s)
	}
	l := rep.Limits[0]
	if l.Clients != 5 || l.Rejected != 15 {
		t.Errorf("clients %d rejected %d; want 5 users, 3 of 5 rejected each", l.Clients, l.Rejected)
	}
	got := map[string]int64{}
	for _, c := range l.TopLimited {
		got[c.Key] = c.Rejected
	}
	for _, u := range []string{"alice", "bob [ops]", "carol [x", "dave]", `eve \x22q\x22 [1`} {
		if got[u] != 3 {
			t.Errorf("user %q: %d rejected, want 3 (got %v)", u, got[u], got)
		}
	}
}

// testdata/abuser.jsonl has 21 clients; with a cap of 5, the requests of
// the 16 others are not replayed, and the report says so; the first 5
// are replayed to the end. With Rules, each rule's clients are capped.
func TestClientCapFile(t *testing.T) {
	lim := []core.Limit{{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 18, Period: time.Minute}}}
	full := runFile(t, replay.Options{Format: "json", Limits: lim}, "abuser.jsonl")
	if full.ClientCap != nil || full.Untracked != 0 || full.Limits[0].Clients != 21 {
		t.Fatalf("no cap reached: %+v, untracked %d, clients %d", full.ClientCap, full.Untracked, full.Limits[0].Clients)
	}
	rep := runFile(t, replay.Options{Format: "json", Limits: lim, MaxClients: 5, ShowKeys: true}, "abuser.jsonl")
	if c := rep.ClientCap; c == nil || c.Clients != 5 || c.Input != "testdata/abuser.jsonl" || c.Line != 6 {
		t.Fatalf("client cap %+v, want 5 reached at testdata/abuser.jsonl:6", c)
	}
	l := rep.Limits[0]
	if l.Clients != 5 || rep.Requests+rep.Untracked != full.Requests || rep.Untracked == 0 {
		t.Fatalf("clients %d, requests %d + untracked %d, want 5 clients and %d in all", l.Clients, rep.Requests, rep.Untracked, full.Requests)
	}
	// The clients tracked were replayed to the end: the abuser, 10.0.0.1,
	// is refused what it was refused without the cap.
	for _, c := range l.TopLimited {
		if c.Key == "10.0.0.1" && c.Rejected != full.Limits[0].TopLimited[0].Rejected {
			t.Errorf("the abuser: %d rejected, want %d", c.Rejected, full.Limits[0].TopLimited[0].Rejected)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("warning: the client cap (5 clients; -max-clients) was reached at testdata/abuser.jsonl:6: from there on, %d requests of clients first seen after it were not replayed (counted only here); the clients tracked before it were replayed to the end", rep.Untracked)
	if !strings.Contains(b.String(), want) {
		t.Errorf("text report lacks %q:\n%s", want, b.String())
	}

	// Rules: a rule full of clients.
	cfg := rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 18}},
	}}
	rep = runFile(t, replay.Options{Format: "json", Rules: &cfg, MaxClients: 5}, "abuser.jsonl")
	if rep.ClientCap == nil || rep.ClientCap.Line != 6 || rep.Limits[0].Clients != 5 || rep.Requests+rep.Untracked != full.Requests {
		t.Fatalf("rules: cap %+v clients %d requests %d untracked %d", rep.ClientCap, rep.Limits[0].Clients, rep.Requests, rep.Untracked)
	}
}

// clientsLog is a log of n distinct clients, one request each, 100
// microseconds apart (all within one period); it measures the heap when
// it ends.
type clientsLog struct {
	n, i int
	buf  []byte
	heap *uint64
}

func (c *clientsLog) Read(p []byte) (int, error) {
	for len(c.buf) < len(p) && c.i < c.n {
		at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(c.i) * 100 * time.Microsecond)
		c.buf = fmt.Appendf(c.buf, `{"time":"%s","remote_addr":"10.%d.%d.%d"}`+"\n", at.Format(time.RFC3339Nano), c.i>>16, c.i>>8&255, c.i&255)
		c.i++
	}
	if len(c.buf) == 0 {
		if *c.heap == 0 {
			var ms runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			*c.heap = ms.HeapAlloc
		}
		return 0, io.EOF
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *clientsLog) Close() error { return nil }

// The memory a replay holds per client, with one limit and with the
// five algorithms: the figures docs/replay.md gives for the client cap.
func TestMeasureClientMemory(t *testing.T) {
	if os.Getenv("RATEKIT_MEASURE") == "" {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
	const n = 200_000
	for _, tc := range []struct {
		name   string
		limits []core.Limit
	}{
		{"one limit", []core.Limit{{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 10, Period: time.Minute}}}},
		{"five algorithms", all(10, time.Minute)},
	} {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var heap uint64
		in := replay.Input{Name: "clients", Open: func() (io.ReadCloser, error) { return &clientsLog{n: n, heap: &heap}, nil }}
		rep, err := replay.Run(context.Background(), replay.Options{Format: "json", Limits: tc.limits}, in)
		if err != nil {
			t.Fatal(err)
		}
		per := float64(heap-base) / n
		t.Logf("%s: %d clients: %.0f B per client; at the default cap (%d clients) %.0f MB", tc.name, rep.Limits[0].Clients, per, replay.DefaultMaxClients, per*replay.DefaultMaxClients/1e6)
	}
}
