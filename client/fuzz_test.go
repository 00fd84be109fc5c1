package client_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/client"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The longest waits FuzzHeaders and FuzzWaitRoundTrip run the Transport
// with: the default (0 here, no option), a short one, none at all, and the
// longest Duration.
var fuzzMaxWaits = []time.Duration{0, 5 * time.Second, -1, math.MaxInt64}

// fuzzTransport returns a Transport with the fake clock, the maximum wait
// fuzzMaxWaits[i] (the default for 0, none given; 0 itself for -1) and
// the options, and the maximum wait in effect.
func fuzzTransport(t *testing.T, next http.RoundTripper, clock *fakeClock, i int, opts ...client.Option) (*client.Transport, time.Duration) {
	t.Helper()
	maxWait := fuzzMaxWaits[i%len(fuzzMaxWaits)]
	switch maxWait {
	case 0:
		maxWait = time.Minute // the documented default
	case -1:
		maxWait = 0
		opts = append(opts, client.WithMaxWait(0))
	default:
		opts = append(opts, client.WithMaxWait(maxWait))
	}
	rt, err := client.New(next, append([]client.Option{client.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return rt, maxWait
}

// respond returns a RoundTripper that answers every request with status
// and a copy of header, and counts the requests.
func respond(status int, header http.Header, calls *int) http.RoundTripper {
	return roundTripFunc(func(*http.Request) (*http.Response, error) {
		*calls++
		return &http.Response{StatusCode: status, Header: header.Clone(), Body: io.NopCloser(strings.NewReader("slow down"))}, nil
	})
}

// fuzzRequest is a GET without a body, which the Transport may replay.
func fuzzRequest(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://api.example/items", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// FuzzHeaders feeds arbitrary rate-limit header values to the Transport,
// for a 429, a 503 and a 200, with pacing on, under each maximum wait.
// Whatever the values:
//
//   - it never panics, returns the server's response with a nil error (a
//     denial is not an error) and calls the server at most 1 + retries
//     times;
//   - every wait is between 0 and the maximum wait, the backoff's at most
//     its own maximum, and the Clock sleeps exactly the observed waits;
//   - a wait's source is one that the status allows: a 503 waits only by
//     Retry-After, a 200 only for pacing;
//   - the same responses give the same waits, and RateLimit-Policy, which
//     describes quotas and not their state, never changes them.
func FuzzHeaders(f *testing.F) {
	seeds := [][6]string{
		{"7", "", "", "", "", ""},
		{"Wed, 21 Oct 2015 07:28:00 GMT", "", "", "", "", ""},
		{"Sun, 06 Nov 1994 08:49:37 GMT", "", "", "", "0", ""},
		{"Thu, 01 Jan 2099 00:00:00 GMT", "", "", "", "", ""},
		{"", `"api";r=0;t=30`, "", "", "", `"api";q=100;w=60`},
		{"", `"a";r=0;t=5, "b";r=0;t=40`, "", "", "0", ""},
		{"", `"a\";r=0;t=1";r=0;t=2`, "", "", "", ""},
		{"", `"a";r=5;t=5, "b";r=0;t=3`, "", "", "5", `"a";q=10;w=1, "b";q=1;w=3600`},
		{"", "", "1767571242", "", "0", ""},
		{"", "", "1767571242.125", "1.5", "0", ""},
		{"", "", "3", "", "0", ""},
		{"", "", "1767571242000", "", "0", ""},
		{"-1", `r=;t=`, "NaN", "Inf", "-1", "q=-1"},
		{"99999999999999999999", `"x";r=0;t=999999999999999`, "1e400", "9223372036.9", "99999999999999999999", ""},
		{"", `"x";r=0;t=9999999999999999`, "", "", "", ""},
		{"", "", "", strings.Repeat("9", 400), "0", ""},
		{" ", `"`, ".", "1.2.3", " 0 ", `"`},
		{"0", `;;,,`, "0x1p4", "-0", "00", ""},
		{"\x00", "\xff\"", "1_000", "٣", "+1", "\\"},
		{"1, 2", "a;r=0;t=1;t=2, b;r=0;r=1;t=9", "1 2", "0.0000000001", "0", ""},
	}
	for i, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], 0.5, uint8(i))
	}
	f.Fuzz(func(t *testing.T, retryAfter, rateLimit, reset, resetAfter, remaining, policy string, random float64, sel uint8) {
		header := http.Header{
			"Retry-After": {retryAfter}, "Ratelimit": {rateLimit}, "X-Ratelimit-Remaining": {remaining},
			"X-Ratelimit-Reset": {reset}, "X-Ratelimit-Reset-After": {resetAfter},
		}
		withPolicy := header.Clone()
		withPolicy.Set("Ratelimit-Policy", policy)
		const retries = 2
		const backoffMax = 2 * time.Second
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK} {
			var first []client.Wait
			for run, h := range []http.Header{header, header, withPolicy} {
				var waits []client.Wait
				calls := 0
				clock := newClock()
				rt, maxWait := fuzzTransport(t, respond(status, h, &calls), clock, int(sel),
					client.WithMaxRetries(retries), client.WithPacing(true),
					client.WithBackoff(100*time.Millisecond, backoffMax),
					client.WithRandom(func() float64 { return random }),
					client.WithObserver(func(w client.Wait) { waits = append(waits, w) }))
				for range 2 {
					resp, err := rt.RoundTrip(fuzzRequest(t))
					if err != nil || resp == nil || resp.StatusCode != status {
						t.Fatalf("status %d: got %v, %v", status, resp, err)
					}
				}
				if calls < 2 || calls > 2*(1+retries) {
					t.Fatalf("status %d: %d calls to the server for 2 requests", status, calls)
				}
				slept := clock.Waits()
				if len(slept) != len(waits) {
					t.Fatalf("status %d: observed %v, slept %v", status, waits, slept)
				}
				for i, w := range waits {
					if w.Duration < 0 || w.Duration > maxWait || w.Duration != slept[i] {
						t.Fatalf("status %d, max wait %s: wait %+v (slept %s)", status, maxWait, w, slept[i])
					}
					ok := false
					switch w.Source {
					case client.SourcePacing:
						ok = w.Attempt == 0
					case client.SourceRetryAfter:
						ok = w.Attempt > 0 && status != http.StatusOK
					case client.SourceRateLimit, client.SourceReset:
						ok = w.Attempt > 0 && status == http.StatusTooManyRequests
					case client.SourceBackoff:
						ok = w.Attempt > 0 && status == http.StatusTooManyRequests && w.Duration <= backoffMax
					}
					if !ok {
						t.Fatalf("status %d: wait %+v", status, w)
					}
				}
				if run == 0 {
					first = waits
				} else if !reflect.DeepEqual(waits, first) {
					t.Fatalf("status %d: run %d waited %+v, run 0 %+v", status, run, waits, first)
				}
			}
		}
	})
}

// Forms of a wait in FuzzWaitRoundTrip.
const (
	formRetryAfterSeconds = iota
	formRetryAfterDate
	formRateLimit
	formResetAfter
	formResetDelta
	formResetEpoch
	formCount
)

// FuzzWaitRoundTrip writes a wait in each form a server may send it (the
// Retry-After seconds and HTTP-date, the IETF RateLimit t of the exhausted
// member, X-RateLimit-Reset-After, X-RateLimit-Reset as seconds or as a
// Unix time) and checks that a 429 carrying it is retried after exactly
// that wait, from that source, when it is within the maximum wait, and
// returned at once, with no wait, when it is longer. A wait too large for
// a Duration saturates to the longest Duration: longer than any maximum
// but the longest Duration itself.
func FuzzWaitRoundTrip(f *testing.F) {
	for form := range formCount {
		for _, n := range []uint64{0, 1, 7, 59, 60, 61, 3600, 999_999_999, 1_000_000_000, 1e15 - 1, 1e15, math.MaxInt64 / 1_000_000_000, math.MaxInt64/1_000_000_000 + 1, math.MaxUint64} {
			f.Add(n, uint16(500), uint8(form), uint8(n%4))
		}
	}
	f.Fuzz(func(t *testing.T, n uint64, milli uint16, form, sel uint8) {
		milli %= 1000
		start := newClock().Now()
		var header http.Header
		var source string
		// want is the wait in nanoseconds, as a float64 for waits beyond
		// a Duration; tolerance is the error that the float64 parse of a
		// decimal fraction may make.
		var want, tolerance float64
		seconds := float64(n) * 1e9
		switch form % formCount {
		case formRetryAfterSeconds:
			header, source, want = http.Header{"Retry-After": {strconv.FormatUint(n, 10)}}, client.SourceRetryAfter, seconds
		case formRetryAfterDate:
			n %= 200 * 365 * 24 * 3600 // dates within two centuries
			date := start.Add(time.Duration(n) * time.Second).Format(http.TimeFormat)
			header, source, want = http.Header{"Retry-After": {date}}, client.SourceRetryAfter, float64(n)*1e9
		case formRateLimit:
			n %= 1e15 // at most 15 digits
			v := fmt.Sprintf(`"burst";r=0;t=%d, "other";r=3;t=%d, "daily";r=0;t=%d`, n/2, n+1, n)
			header, source, want = http.Header{"Ratelimit": {v}}, client.SourceRateLimit, float64(n)*1e9
		case formResetAfter, formResetDelta:
			n %= 1e6 // exact in a float64 to the nanosecond
			name := "X-Ratelimit-Reset-After"
			if form%formCount == formResetDelta {
				name = "X-Ratelimit-Reset"
			}
			v := fmt.Sprintf("%d.%03d", n, milli)
			header, source = http.Header{name: {v}, "X-Ratelimit-Remaining": {"0"}}, client.SourceReset
			want, tolerance = float64(n)*1e9+float64(milli)*1e6, 1
		case formResetEpoch:
			n %= 1e9
			v := fmt.Sprintf("%d.%03d", start.Unix()+int64(n), milli)
			header, source = http.Header{"X-Ratelimit-Reset": {v}}, client.SourceReset
			want, tolerance = float64(n)*1e9+float64(milli)*1e6, 1000 // a float64 of 2e9 s is exact to 0.24µs
		}
		var waits []client.Wait
		calls := 0
		clock := newClock()
		rt, maxWait := fuzzTransport(t, respond(http.StatusTooManyRequests, header, &calls), clock, int(sel),
			client.WithMaxRetries(1), client.WithObserver(func(w client.Wait) { waits = append(waits, w) }))
		resp, err := rt.RoundTrip(fuzzRequest(t))
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("got %v, %v", resp, err)
		}
		if want >= math.MaxInt64 {
			// Too large for a Duration: saturated to the longest, which
			// only the longest maximum admits (TestHugeWaitsSaturate).
			want = math.MaxInt64
		}
		if want > float64(maxWait)+tolerance {
			if calls != 1 || len(waits) != 0 {
				t.Fatalf("%v: a wait of %.0fns is beyond the maximum %s, yet %d calls, waits %+v", header, want, maxWait, calls, waits)
			}
			return
		}
		if (want < float64(maxWait)-tolerance || want == math.MaxInt64) && (calls != 2 || len(waits) != 1) {
			t.Fatalf("%v: a wait of %.0fns is within the maximum %s, yet %d calls, waits %+v", header, want, maxWait, calls, waits)
		}
		for _, w := range waits {
			if w.Source != source || math.Abs(float64(w.Duration)-want) > tolerance {
				t.Fatalf("%v: waited %+v, want %.0fns from %s", header, w, want, source)
			}
		}
	})
}
