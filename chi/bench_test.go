package ratekitchi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/rules"
)

// router returns a Chi router with use on r.Use and the route
// /users/{id} with with on its r.With, and a function that serves GET
// /users/42 from 192.0.2.10 to it, in place.
func router(use, with []func(http.Handler) http.Handler) func() int {
	r := chi.NewRouter()
	r.Use(use...)
	r.With(with...).Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(okBody) })
	req := httptest.NewRequest(http.MethodGet, "/users/42", nil)
	req.RemoteAddr = "192.0.2.10:4711"
	return adaptertest.InPlace(r, req)
}

var okBody = []byte("ok")

func constant(*http.Request) (string, error) { return "client", nil }

// routers are Chi alone and with ratekit (a token bucket never exhausted)
// keyed by a constant, by the peer address, and by the route pattern on
// r.With: those of TestAllocs and BenchmarkMiddleware.
func routers() map[string]func() int {
	return map[string]func() int{
		"framework":        router(nil, nil),
		"ratekit-constant": router(mws{ratekitchi.New(adaptertest.Unlimited(), constant)}, nil),
		"ratekit-peerip":   router(mws{ratekitchi.New(adaptertest.Unlimited(), ratekitchi.PeerIP)}, nil),
		"ratekit-route":    router(nil, mws{ratekitchi.New(adaptertest.Unlimited(), ratekitchi.Route)}),
	}
}

// TestAllocs: on the allowed path the middleware allocates nothing: Chi
// with ratekit allocates what Chi alone does (the request copy that
// carries its route context), with a constant key, with PeerIP (an IPv4
// peer's key is a substring of r.RemoteAddr), and under Rules with a
// constant generic_key rule (not exhausted: about a thousand requests per
// count, in one second of a stopped clock), on r.Use and on r.With alike.
// Route costs what building "METHOD pattern" costs, which is logged.
func TestAllocs(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
	}})
	serves := routers()
	serves["ratekit-rules-use"], serves["ratekit-rules-with"] = router(mws{ratekitchi.Rules(e)}, nil), router(nil, mws{ratekitchi.Rules(e)})
	alone := adaptertest.Allocs(t, serves["framework"])
	for name, serve := range serves {
		if n := adaptertest.Allocs(t, serve); name == "ratekit-route" {
			t.Logf("allocs/request: chi %v, %s %v", alone, name, n)
		} else if n != alone {
			t.Errorf("%s: %v allocs/request, chi alone %v", name, n, alone)
		}
	}
}

// BenchmarkMiddleware compares Chi alone with Chi and ratekit. (httprate,
// Chi's usual limiter, is a module of its own and is benchmarked outside
// this module.)
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for name, serve := range routers() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s := serve(); s != http.StatusOK {
					b.Fatalf("status %d: the benchmark must stay on the allowed path", s)
				}
			}
		})
	}
}
