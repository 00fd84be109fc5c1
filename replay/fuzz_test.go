package replay_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/replay"
)

// FuzzReplay feeds arbitrary text to both parsers and checks that the
// replay never fails or panics on it and that its counts add up: every
// line read is bad, unkeyed or replayed, and every replayed request is
// admitted or rejected by each limit.
func FuzzReplay(f *testing.F) {
	for _, s := range []string{
		handLog,
		`10.0.0.1 - - [01/May/2024:12:00:00 +0000] "GET / HTTP/1.1" 200 1` + "\n" + `10.0.0.1 - - [31/Dec/9999:23:59:59 -9999] "GET / HTTP/1.1" 200 1`,
		`10.0.0.1 - - [01/Jan/1678:00:00:00 +0000] "GET / HTTP/1.1" 200 1` + "\n" + `10.0.0.1 - - [01/Apr/2262:00:00:00 +0000] "GET / HTTP/1.1" 200 1`,
		`::1 - "quoted user" [29/Feb/2024:12:00:00 +1400] "GET /a?b=c HTTP/2.0" 429 - "ref" "agent \"q\""`,
		`{"time":"2024-05-01T12:00:00Z","remote_addr":"10.0.0.1","method":"GET","path":"/","status":200}`,
		`{"time":1714564800,"remote_addr":"[2001:db8::1]:443","status":"429","user":"u\u00e9"}` + "\n" + `{"time":1e300}`,
		`{"time":"2024-05-01T12:00:00.123456789+02:00","remote_addr":"10.0.0.1","x":{"nested":[1,2,{"a":null}]}}`,
		"\x00\xff\xfe{\"time\":",
		"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	limits := []core.Limit{
		{Algorithm: core.TokenBucket, Rate: core.PerMinute(2)},
		{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		{Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(2)},
		{Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(2)},
	}
	f.Fuzz(func(t *testing.T, text string, asJSON bool) {
		o := replay.Options{Limits: limits, MaxLineBytes: 512, ShowKeys: true}
		if asJSON {
			o.Format = "json"
		}
		in := replay.Input{Name: "fuzz.log", Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil }}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rep, err := replay.Run(ctx, o, in)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if rep.Lines != rep.BadLines+rep.Unkeyed+rep.Requests {
			t.Fatalf("%d lines, but %d bad + %d unkeyed + %d replayed", rep.Lines, rep.BadLines, rep.Unkeyed, rep.Requests)
		}
		for _, l := range rep.Limits {
			if l.Admitted+l.Rejected != rep.Requests || l.ClientsLimited > l.Clients {
				t.Fatalf("%s: %d admitted + %d rejected of %d requests; %d of %d clients limited", l.Algorithm, l.Admitted, l.Rejected, rep.Requests, l.ClientsLimited, l.Clients)
			}
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("JSON: %v", err)
		}
		if err := rep.WriteText(io.Discard); err != nil {
			t.Fatalf("text: %v", err)
		}
		if err := rep.WriteHTML(io.Discard); err != nil {
			t.Fatalf("HTML: %v", err)
		}
	})
}
