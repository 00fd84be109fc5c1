package client_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/client"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzHeaders feeds arbitrary rate-limit header values to the Transport,
// for a 429 and a 503 and with pacing on: whatever the values, it must not
// panic, never wait less than zero or more than the maximum, and never
// return an error for a denial. `go test` runs the seeds.
func FuzzHeaders(f *testing.F) {
	seeds := [][4]string{
		{"7", "", "", ""},
		{"Wed, 21 Oct 2015 07:28:00 GMT", "", "", ""},
		{"", `"api";r=0;t=30`, "", ""},
		{"", `"a";r=0;t=5, "b";r=0;t=40`, "", ""},
		{"", `"a\";r=0;t=1";r=0;t=2`, "", ""},
		{"", "", "1767571242", ""},
		{"", "", "1767571242.125", "1.5"},
		{"", "", "3", ""},
		{"-1", `r=;t=`, "NaN", "Inf"},
		{"99999999999999999999", `"x";r=0;t=999999999999999`, "1e400", "9223372036.9"},
		{" ", `"`, ".", "1.2.3"},
		{"0", `;;,,`, "0x1p4", "-0"},
		{"\x00", "\xff\"", "1_000", "٣"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, retryAfter, rateLimit, reset, resetAfter string) {
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK} {
			header := http.Header{
				"Retry-After": {retryAfter}, "Ratelimit": {rateLimit},
				"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {reset}, "X-Ratelimit-Reset-After": {resetAfter},
			}
			next := roundTripFunc(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader(""))}, nil
			})
			clock := newClock()
			rt, err := client.New(next, client.WithClock(clock), client.WithMaxRetries(1), client.WithPacing(true))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				req, _ := http.NewRequest(http.MethodGet, "http://api.example/", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil || resp.StatusCode != status {
					t.Fatalf("status %d: got %v, %v", status, resp, err)
				}
			}
			for _, w := range clock.Waits() {
				if w < 0 || w > time.Minute {
					t.Fatalf("status %d: waited %s", status, w)
				}
			}
		}
	})
}
