package replay_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/replay"
)

// abuserLog is three minutes of JSON lines from 12:00:00: 20 normal
// clients, each sending at an even pace (10.0.0.1 to 10.0.0.15 4 a
// minute, 10.0.0.16 to 10.0.0.19 6, 10.0.0.20 12), and an abuser,
// 10.0.0.99, sending 96 a minute (one every 0.625s), as many as all the
// others together: 288 of the 576 requests, half.
//
// At an even pace of k a minute, every interval one minute long holds k
// requests: the clients' peaks are 4 (15 clients), 6 (4), 12 and 96. The
// median peak (the 11th of 21) is 4, so an outlier peaks above
// 10 x 4 = 40: the abuser alone. The busiest normal client peaks at 12,
// and a headroom of 1.5 suggests 12 x 1.5 = 18 a minute, under which no
// normal client is refused (none sends more than 12 in a minute; the
// sliding window counter's estimate for 10.0.0.20 is at most 13). Of
// the abuser's 288 requests, 18 a minute refuses
//
//	fixed window: 96 in each of the 3 minute windows, 18 admitted: 3 x 78 = 234.
//	sliding window log: 18 admitted from 0s, from 60s and from 120s: 288 - 54 = 234.
//	token and leaky bucket: 18 at once, then one per 60/18 s: by the last
//	  request, at 179.375s, 18 + floor(179.375 x 18/60) = 18 + 53 = 71
//	  admitted, 217 refused.
//	sliding window counter: 18 in the first minute. In the second (prev
//	  18), the k-th request (e = 0.625k s into it) is admitted while
//	  cur + 1 + ceil(18 (60 - e)/60) <= 18, that is floor(0.1875 k) > cur:
//	  k = 6, 11, ..., 91, 17 admitted. In the third (prev 17), while
//	  floor(17k/96) >= cur: k = 0, 6, ..., 91, 17 again. 288 - 52 = 236.
func abuserLog() string {
	type line struct {
		ms     int64
		client string
	}
	var lines []line
	add := func(client string, perMinute int) {
		for j := range 3 * perMinute {
			lines = append(lines, line{int64(j) * 60000 / int64(perMinute), client})
		}
	}
	for i := 1; i <= 20; i++ {
		perMinute := 4
		switch {
		case i == 20:
			perMinute = 12
		case i >= 16:
			perMinute = 6
		}
		add("10.0.0."+itoa(i), perMinute)
	}
	add("10.0.0.99", 96)
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.ms - b.ms) })
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	for _, l := range lines {
		at := start.Add(time.Duration(l.ms) * time.Millisecond)
		b.WriteString(`{"time":"` + at.Format("2006-01-02T15:04:05.000Z07:00") + `","remote_addr":"` + l.client + `"}` + "\n")
	}
	return b.String()
}

// testdata/abuser.jsonl is abuserLog, for the command line (from the
// repository's root; TestTargetsLetTheAbuserThrough checks what it
// prints under "suggested limits"):
//
//	go run ./cmd/ratekit replay -format json -algorithm sliding-window-log -limit 18 -period 1m -show-keys -target-reject 1% -target-limited 1% -headroom 1.5 replay/testdata/abuser.jsonl
func TestAbuserLogFile(t *testing.T) {
	data, err := os.ReadFile("testdata/abuser.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != abuserLog() {
		t.Fatal("testdata/abuser.jsonl is not abuserLog(): write it again from abuserLog")
	}
}

// abuserRefused is what 18 a minute refuses the abuser, per algorithm
// of all (see abuserLog).
var abuserRefused = []int64{217, 217, 234, 234, 236}

func text(t *testing.T, rep *replay.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The headroom suggestion is the busiest normal client's peak times the
// headroom, whatever the abuser sends, and says what it refuses the abuser.
func TestHeadroomOverBusiestNormal(t *testing.T) {
	log := abuserLog()
	rep := run(t, replay.Options{Format: "json", Limits: all(100, time.Minute), Headroom: 1.5, ShowKeys: true}, log)
	if rep.Requests != 576 {
		t.Fatalf("%d requests", rep.Requests)
	}
	n := rep.Normal
	if n == nil || n.MedianPeak != 4 || n.Factor != replay.DefaultOutlierFactor || n.OutlierAbove != 40 || n.Clients != 20 ||
		n.BusiestPeak != 12 || n.BusiestClient != "10.0.0.20" || n.Outliers != 1 || n.OutlierRequests != 288 || n.OutlierShare != 0.5 {
		t.Fatalf("normal clients %+v", n)
	}
	if len(rep.Suggestions) != 5 {
		t.Fatalf("%d suggestions", len(rep.Suggestions))
	}
	for i, s := range rep.Suggestions {
		algo, _ := core.ParseAlgorithm(s.Algorithm)
		wantBurst := 0
		if algo == core.TokenBucket || algo == core.LeakyBucket {
			wantBurst = 18
		}
		if s.Target != "headroom" || s.Headroom != 1.5 || !s.Met || s.Limit != 18 || s.Burst != wantBurst || s.Period != "1m0s" ||
			s.BusiestNormal != 12 || s.NormalClients != 20 || s.NormalLimited != 0 || s.ClientsLimited != 1 ||
			s.Rejected != abuserRefused[i] || s.OutliersRejected != abuserRefused[i] {
			t.Errorf("%s: %+v", s.Algorithm, s)
		}
		if len(s.Outliers) != 1 || s.Outliers[0] != (replay.Outlier{Key: "10.0.0.99", Peak: 96, Requests: 288, Share: 0.5, Rejected: abuserRefused[i]}) {
			t.Errorf("%s: outliers %+v", s.Algorithm, s.Outliers)
		}
	}
	out := text(t, rep)
	for _, want := range []string{
		"  normal clients: 20 of 21, those whose peak is at most 40 per 1m0s (10x the median client's peak, 4); the busiest, 10.0.0.20, peaked at 12 per 1m0s\n",
		"  outliers: 1 client, peaking above 40 per 1m0s, which sent 288 of the 576 requests (50.0%)\n",
		"  sliding-window-log     headroom 1.5x over the busiest normal client's peak, 12 per 1m0s: 18/1m0s (replayed: 40.6% rejected, 1 of 21 clients limited; normal clients limited: 0 of 20)\n" +
			"      outlier 10.0.0.99 sent 96 in its busiest 1m0s and 288 in all (50.0% of all requests); this limit would have refused 234 of the 288 (81.2%)\n",
		"  token-bucket           headroom 1.5x over the busiest normal client's peak, 12 per 1m0s: 18/1m0s burst 18 (",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "note:") {
		t.Errorf("a note without a target:\n%s", out)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"headroom 1.5x over the busiest normal client&#39;s peak, 12", "suggested 18 (headroom 1.5x)",
		"Normal clients: 20, whose peak is at most 40 per 1m0s", "<code>10.0.0.99</code>: 234 of 288"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// The JSON form names the rule and the outliers.
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"normal":{"period":"1m0s","median_peak":4,"outlier_factor":10,"outlier_above":40,`, `"target":"headroom"`, `"headroom":1.5`,
		`"outliers":[{"key":"10.0.0.99","peak":96,"requests":288,"share":0.5,"rejected":234}]`} {
		if !bytes.Contains(js, []byte(want)) {
			t.Errorf("the JSON lacks %s", want)
		}
	}
}

// A headroom whose product is not whole rounds up, and says so.
func TestHeadroomRoundsUp(t *testing.T) {
	rep := run(t, replay.Options{Format: "json", Limits: all(100, time.Minute)[3:4], Headroom: 1.3, ShowKeys: true}, abuserLog())
	s := rep.Suggestions[0]
	if s.Limit != 16 || s.NormalLimited != 0 {
		t.Fatalf("%+v", s)
	}
	// The log admits 16 a minute: 48 of the abuser's 288.
	if s.Outliers[0].Rejected != 240 {
		t.Fatalf("outliers %+v", s.Outliers)
	}
	if want := "headroom 1.3x over the busiest normal client's peak, 12 per 1m0s (12 x 1.3 = 15.6, rounded up): 16/1m0s ("; !strings.Contains(text(t, rep), want) {
		t.Fatalf("the report lacks %q:\n%s", want, text(t, rep))
	}
}

// Options.OutlierFactor moves the bound: at 30 x 4 = 120 the abuser is a
// normal client, the busiest, and the headroom is over its peak.
func TestOutlierFactor(t *testing.T) {
	rep := run(t, replay.Options{Format: "json", Limits: all(100, time.Minute)[2:3], Headroom: 1.5, OutlierFactor: 30, ShowKeys: true}, abuserLog())
	n, s := rep.Normal, rep.Suggestions[0]
	if n.OutlierAbove != 120 || n.Outliers != 0 || n.Clients != 21 || n.BusiestPeak != 96 || n.BusiestClient != "10.0.0.99" {
		t.Fatalf("normal clients %+v", n)
	}
	if s.Limit != 144 || s.Rejected != 0 || len(s.Outliers) != 0 {
		t.Fatalf("%+v", s)
	}
	if want := "  outliers: none (no client peaked above 120 per 1m0s)\n"; !strings.Contains(text(t, rep), want) {
		t.Fatalf("the report lacks %q:\n%s", want, text(t, rep))
	}
}

// The targets count the abuser's requests with everyone's. The smallest
// sliding window log rejecting at most 1% of the 576 requests (5) is 95,
// which refuses the abuser 1 in each of the 3 minutes: the 96th, until
// the first of the minute expires, after which each admitted request
// makes room for one a minute later. Limiting at most 1% of 21 clients
// limits none: 96, which refuses it nothing. The report says so, and
// why, beside the headroom suggestion: the whole section, as the
// command in TestAbuserLogFile's comment prints it.
func TestTargetsLetTheAbuserThrough(t *testing.T) {
	rep := run(t, replay.Options{Format: "json", Limits: all(18, time.Minute)[3:4], TargetReject: 0.01, TargetLimited: 0.01, Headroom: 1.5, ShowKeys: true}, abuserLog())
	if len(rep.Suggestions) != 3 {
		t.Fatalf("%d suggestions", len(rep.Suggestions))
	}
	for i, want := range []struct {
		limit   int
		refused int64
	}{{95, 3}, {96, 0}, {18, 234}} {
		s := rep.Suggestions[i]
		if s.Limit != want.limit || s.NormalLimited != 0 || len(s.Outliers) != 1 || s.Outliers[0].Rejected != want.refused || s.OutliersRejected != want.refused {
			t.Errorf("%s: %+v", s.Target, s)
		}
	}
	out := text(t, rep)
	const want = `
suggested limits (each replayed):
  normal clients: 20 of 21, those whose peak is at most 40 per 1m0s (10x the median client's peak, 4); the busiest, 10.0.0.20, peaked at 12 per 1m0s
  outliers: 1 client, peaking above 40 per 1m0s, which sent 288 of the 576 requests (50.0%)
  sliding-window-log     rejects at most 1.0% of requests: 95/1m0s (replayed: 0.521% rejected, 1 of 21 clients limited; 94 missed it)
      outlier 10.0.0.99 sent 96 in its busiest 1m0s and 288 in all (50.0% of all requests); this limit would have refused 3 of the 288 (1.0%)
  sliding-window-log     limits at most 1.0% of clients: 96/1m0s (replayed: 0% rejected, 0 of 21 clients limited; 95 missed it)
      outlier 10.0.0.99 sent 96 in its busiest 1m0s and 288 in all (50.0% of all requests); this limit would have refused 0 of the 288 (0%)
  sliding-window-log     headroom 1.5x over the busiest normal client's peak, 12 per 1m0s: 18/1m0s (replayed: 40.6% rejected, 1 of 21 clients limited; normal clients limited: 0 of 20)
      outlier 10.0.0.99 sent 96 in its busiest 1m0s and 288 in all (50.0% of all requests); this limit would have refused 234 of the 288 (81.2%)
  note: a target counts the outliers like any client: what a limit refuses them counts against the share of requests rejected (they sent 50.0% of all requests), and each of them it limits against the share of clients limited, so a target can leave the limit near an outlier's peak; a headroom suggestion sizes it from the busiest normal client instead
`
	if i := strings.Index(out, "\nsuggested limits"); i < 0 || out[i:] != want {
		t.Errorf("the suggestions read\n%s\nwant\n%s", out[max(i, 0):], want)
	}
}

// Without outliers nor a headroom suggestion, the targets' report is as
// it was: no word about normal clients.
func TestTargetsWithoutOutliers(t *testing.T) {
	rep := run(t, replay.Options{Limits: all(3, time.Minute)[2:3], TargetReject: 0.2}, handLog)
	if rep.Normal == nil || rep.Normal.Outliers != 0 {
		t.Fatalf("normal clients %+v", rep.Normal)
	}
	if out := text(t, rep); strings.Contains(out, "normal clients") || strings.Contains(out, "outlier") {
		t.Fatalf("%s", out)
	}
}

func TestHeadroomOptionErrors(t *testing.T) {
	lim := all(5, time.Minute)[:1]
	for _, o := range []replay.Options{
		{Limits: lim, Headroom: 0.5}, {Limits: lim, Headroom: math.NaN()}, {Limits: lim, Headroom: replay.MaxHeadroom + 1},
		{Limits: lim, Headroom: 2, OutlierFactor: 0.9}, {Limits: lim, Headroom: 2, OutlierFactor: math.Inf(1)},
	} {
		if _, err := replay.Run(t.Context(), o, input("x", "")); err == nil {
			t.Errorf("headroom %g, outlier factor %g: no error", o.Headroom, o.OutlierFactor)
		}
	}
}
