package ratekitgin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/rules"
)

// engine returns a Gin engine with middleware mw (if any) and one route,
// and a function that serves one request to it from 192.0.2.10, in place.
func engine(mw gin.HandlerFunc) func() int {
	r := gin.New()
	if mw != nil {
		r.Use(mw)
	}
	r.GET("/", func(c *gin.Context) { _, _ = c.Writer.Write(okBody) })
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.10:4711"
	return adaptertest.InPlace(r, req)
}

var okBody = []byte("ok")

func constant(*gin.Context) (string, error) { return "client", nil }

// TestAllocs: on the allowed path the middleware allocates nothing: Gin
// with ratekit allocates what Gin alone does, with a constant key, with
// PeerIP (an IPv4 peer's key is a substring of RemoteAddr), and under
// Rules with a constant generic_key rule (not exhausted: about a thousand
// requests per count, in one second of a stopped clock).
func TestAllocs(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
	}})
	alone := adaptertest.Allocs(t, engine(nil))
	for name, mw := range map[string]gin.HandlerFunc{
		"constant key": ratekitgin.New(adaptertest.Unlimited(), constant),
		"PeerIP":       ratekitgin.New(adaptertest.Unlimited(), ratekitgin.PeerIP),
		"Rules":        ratekitgin.Rules(e),
	} {
		if n := adaptertest.Allocs(t, engine(mw)); n != alone {
			t.Errorf("ratekit (%s): %v allocs/request, gin alone %v", name, n, alone)
		}
	}
}

// BenchmarkMiddleware compares Gin alone with Gin and ratekit (a token
// bucket never exhausted, keyed by a constant and by the peer address).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mw   gin.HandlerFunc
	}{
		{"framework", nil},
		{"ratekit-constant", ratekitgin.New(adaptertest.Unlimited(), constant)},
		{"ratekit-peerip", ratekitgin.New(adaptertest.Unlimited(), ratekitgin.PeerIP)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve := engine(bc.mw)
			if s := serve(); s != http.StatusOK {
				b.Fatalf("status %d", s)
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			if s := serve(); s != http.StatusOK {
				b.Fatalf("status %d: the benchmark must stay on the allowed path", s)
			}
		})
	}
}
