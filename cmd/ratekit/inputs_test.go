package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// The replay command over the replay package's test logs: two lines
// dated 2199 no longer move the clock (-jump-lines 2 makes them), user
// names holding " [" are read, and -max-clients caps the clients with a
// warning that says what was not replayed.
func TestReplayInputsFiles(t *testing.T) {
	type report struct {
		BadLines   int64 `json:"bad_lines"`
		Requests   int64 `json:"requests"`
		OutOfOrder int64 `json:"out_of_order"`
		Unkeyed    int64 `json:"unkeyed"`
		Untracked  int64 `json:"untracked"`
		ClientCap  *struct {
			Clients int    `json:"clients"`
			Input   string `json:"input"`
			Line    int    `json:"line"`
		} `json:"client_cap"`
		Limits []struct {
			Clients  int   `json:"clients"`
			Rejected int64 `json:"rejected"`
		} `json:"limits"`
	}
	replay := func(args ...string) report {
		t.Helper()
		code, out, stderr := runCmd(t, "", append([]string{"replay", "-json", "-algorithm", "fixed-window", "-limit", "2", "-period", "1m"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	const dir = "../../replay/testdata/"
	if rep := replay(dir + "future.log"); rep.BadLines != 2 || rep.Requests != 60 || rep.OutOfOrder != 0 || rep.Limits[0].Rejected != 0 {
		t.Errorf("future.log: %+v", rep)
	}
	if rep := replay("-jump-lines", "2", dir+"future.log"); rep.BadLines != 0 || rep.OutOfOrder != 30 || rep.Limits[0].Rejected != 30 {
		t.Errorf("future.log, -jump-lines 2: %+v", rep)
	}
	if rep := replay("-key", "user", dir+"users.log"); rep.BadLines != 1 || rep.Requests != 25 || rep.Unkeyed != 5 || rep.Limits[0].Clients != 5 || rep.Limits[0].Rejected != 15 {
		t.Errorf("users.log: %+v", rep)
	}
	rep := replay("-format", "json", "-max-clients", "5", dir+"abuser.jsonl")
	if c := rep.ClientCap; c == nil || c.Clients != 5 || c.Line != 6 || rep.Untracked == 0 || rep.Limits[0].Clients != 5 {
		t.Errorf("abuser.jsonl, -max-clients 5: %+v", rep)
	}
	code, out, _ := runCmd(t, "", "replay", "-format", "json", "-max-clients", "5", dir+"abuser.jsonl")
	if code != 0 || !strings.Contains(out, "warning: the client cap (5 clients; -max-clients) was reached at "+dir+"abuser.jsonl:6") {
		t.Errorf("text report: exit %d:\n%s", code, out)
	}
	for _, bad := range [][]string{{"-jump-lines", "1"}, {"-jump-lines", "65"}, {"-max-clients", "0"}} {
		if code, _, stderr := runCmd(t, "", append(append([]string{"replay"}, bad...), dir+"gap.log")...); code != 2 || !strings.Contains(stderr, bad[0]) {
			t.Errorf("%v: exit %d, %s", bad, code, stderr)
		}
	}
}
