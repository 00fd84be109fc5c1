package benchmarks

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// testAllowance is small enough to spend in a test.
var testAllowance = Allowance{Count: 5, Window: time.Minute}

// rateHeaders returns the names of the rate-limit header fields of h,
// lowercased and sorted (the peers spell them X-RateLimit-*, ratekit
// X-Ratelimit-*).
func rateHeaders(h http.Header) []string {
	var names []string
	for name := range h {
		if n := strings.ToLower(name); strings.HasPrefix(n, "x-ratelimit-") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// TestFrameworkMiddlewareAnswers checks that every middleware, ratekit's
// and the peer's on each framework, under 5 requests a minute, answers
// the first 5 requests from a client 200 and the sixth 429, and that
// ratekit sets its three rate-limit header fields on an admitted request,
// among them every one the peer sets: the benchmarks compare ratekit
// doing at least the peer's work.
func TestFrameworkMiddlewareAnswers(t *testing.T) {
	for _, f := range Frameworks {
		t.Run(f.Name, func(t *testing.T) {
			srv := f.Alone.New(testAllowance)
			for i := 0; i < 10; i++ {
				if s := srv.Serve(); s != http.StatusOK {
					t.Fatalf("framework alone: request %d answered %d", i, s)
				}
			}
			headers := map[string][]string{}
			for _, mw := range []Middleware{f.Ratekit, f.Peer} {
				// ratekit's windows follow the wall clock's.
				awayFromWindowEdge(testAllowance.Window, time.Second)
				srv := mw.New(testAllowance)
				for i := 0; i < testAllowance.Count; i++ {
					if s := srv.Serve(); s != http.StatusOK {
						t.Fatalf("%s: request %d answered %d, want 200", mw.Name, i, s)
					}
					if i == 0 {
						headers[mw.Name] = rateHeaders(srv.Header())
					}
				}
				if s := srv.Serve(); s != http.StatusTooManyRequests {
					t.Errorf("%s: request %d answered %d, want 429", mw.Name, testAllowance.Count, s)
				}
			}
			rk, peer := headers[f.Ratekit.Name], headers[f.Peer.Name]
			for _, name := range peer {
				if !slices.Contains(rk, name) {
					t.Errorf("rate-limit headers of an admission: ratekit %q, %s %q", rk, f.Peer.Name, peer)
				}
			}
			if want := []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}; !slices.Equal(rk, want) {
				t.Errorf("rate-limit headers of an admission: ratekit %q, want %q", rk, want)
			}
			if f.PeerHeaders != (len(peer) > 0) {
				t.Errorf("%s sets %q; PeerHeaders is %v", f.Peer.Name, peer, f.PeerHeaders)
			}
		})
	}
}

// TestFrameworkRowsStayAllowed checks that the allowances of the
// benchmarks admit a run of requests on every row.
func TestFrameworkRowsStayAllowed(t *testing.T) {
	for _, f := range Frameworks {
		for _, row := range f.Rows() {
			t.Run(f.Name+"/"+row.Name, func(t *testing.T) {
				srv := row.Middleware.New(row.Allowance)
				for i := 0; i < 5_000; i++ {
					if s := srv.Serve(); s != http.StatusOK {
						t.Fatalf("request %d answered %d", i, s)
					}
				}
			})
		}
	}
}

// BenchmarkFrameworks serves requests to each framework alone, with
// ratekit's adapter and with the peer's middleware, on the allowed path:
//
//	go test ./benchmarks -run '^$' -bench Frameworks -benchtime 1s
//
// cmd/compare -frameworks runs the same functions and prints them as a
// table.
func BenchmarkFrameworks(b *testing.B) {
	for _, f := range Frameworks {
		b.Run(f.Name, func(b *testing.B) {
			for _, row := range f.Rows() {
				b.Run(row.Name, BenchFramework(row))
			}
		})
	}
}
