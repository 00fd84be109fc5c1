package stdhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

// inPlace serves a GET of / from 192.0.2.1 to mw in front of a handler
// that writes "ok", in place (adaptertest.InPlace).
func inPlace(mw func(http.Handler) http.Handler) func() int {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	return adaptertest.InPlace(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(okBody) })), r)
}

var okBody = []byte("ok")

// unexhausted is the rate of adaptertest.Unlimited: 4000 requests per
// 100 µs, below 4096 and more than one goroutine sends.
var unexhausted = core.Rate{Count: 4000, Period: 100 * time.Microsecond}

// TestAllocs: a request that the middleware passes on, keyed by
// keyfuncs.PeerIP on a memory store, costs no allocation with X-Ratelimit
// fields whose numbers are below 4096 (answer's table of formatted
// numbers), under Rules too, and one (the block of the field values) with
// larger numbers or the IETF fields. WithDecisionInContext costs two:
// a context holding the decision, and a shallow copy of the request.
func TestAllocs(t *testing.T) {
	large := core.PerMinute(1_000_000_000)
	for _, tc := range []struct {
		name   string
		rate   core.Rate
		opts   []stdhttp.Option
		allocs float64
	}{
		{"ordinary", unexhausted, nil, 0},
		{"ordinary/no-headers", unexhausted, []stdhttp.Option{stdhttp.WithHeaders(answer.NoHeaders)}, 0},
		{"large", large, nil, 1},
		{"ietf", unexhausted, []stdhttp.Option{stdhttp.WithHeaders(answer.IETF)}, 1},
		{"both/large", large, []stdhttp.Option{stdhttp.WithHeaders(answer.Both)}, 1},
		{"decision-in-context", unexhausted, []stdhttp.Option{stdhttp.WithDecisionInContext()}, 2},
	} {
		for _, algo := range algorithms {
			if algo == core.SlidingWindowLog && tc.rate == large {
				continue // a log of every request grows with each request
			}
			t.Run(tc.name+"/"+algo.String(), func(t *testing.T) {
				lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: algo, Rate: tc.rate}))
				if n := adaptertest.Allocs(t, inPlace(stdhttp.New(lim, keyfuncs.PeerIP, tc.opts...))); n > tc.allocs {
					t.Errorf("%v allocs/request, want at most %v", n, tc.allocs)
				}
			})
		}
	}
	t.Run("rules", func(t *testing.T) {
		e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
			{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
		}})
		if n := adaptertest.Allocs(t, inPlace(stdhttp.Rules(e))); n != 0 {
			t.Errorf("%v allocs/request, want 0", n)
		}
	})
}

// BenchmarkMiddleware compares net/http alone with ratekit in front, for
// each algorithm, keyed by keyfuncs.IP.
func BenchmarkMiddleware(b *testing.B) {
	ip, err := keyfuncs.IP()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bare", func(b *testing.B) { loop(b, inPlace(func(h http.Handler) http.Handler { return h })) })
	for _, algo := range algorithms {
		lim := core.Must(core.NewLimiter(core.Limit{Name: "bench", Algorithm: algo, Rate: unexhausted}))
		b.Run(algo.String(), func(b *testing.B) { loop(b, inPlace(stdhttp.New(lim, ip))) })
	}
}

func loop(b *testing.B, serve func() int) {
	serve() // the key is tracked from here on
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
	if s := serve(); s != http.StatusOK {
		b.Fatalf("status %d: the benchmark must stay on the allowed path", s)
	}
}
