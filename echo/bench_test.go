package ratekitecho_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/internal/echoport/echotest"
	"github.com/ratekit/ratekit/rules"
)

var okBody = []byte("ok")

// server returns a function that serves one request from 192.0.2.10, in
// place, to an Echo instance with the middleware mws and one route.
func server(mws ...echo.MiddlewareFunc) func() int {
	e := echo.New()
	e.Use(mws...)
	e.GET("/", func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMETextPlainCharsetUTF8, okBody) })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.10:4711"
	return adaptertest.InPlace(e, r)
}

func constant(echo.Context) (string, error) { return "client", nil }

// noop is the least middleware Echo can have.
func noop(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return next(c) }
}

// TestAllocs: on the allowed path ratekit allocates nothing of its own,
// not even the closure that Echo makes every middleware pay for: Echo v4
// applies middleware anew for every request, one closure (holding next)
// per middleware, but ratekit's keeps a handler for each route it is the
// innermost middleware of (see chains). In front of another middleware,
// whose closure is new for every request, it costs what a no-op one costs,
// as on a route whose handler is not kept. Rules hands the engine the
// rules.Request of an echo.Context, an interface: one small allocation, as
// many as a no-op middleware in all.
func TestAllocs(t *testing.T) {
	unlimited := adaptertest.Unlimited
	alone := adaptertest.Allocs(t, server())
	withNoop, twoNoops := adaptertest.Allocs(t, server(noop)), adaptertest.Allocs(t, server(noop, noop))
	if withNoop != alone+1 || twoNoops != alone+2 {
		t.Fatalf("a no-op middleware costs Echo %v allocs, two %v; expected 1 and 2", withNoop-alone, twoNoops-alone)
	}
	for name, n := range map[string]float64{
		"constant key": adaptertest.Allocs(t, server(ratekitecho.New(unlimited(), constant))),
		"PeerIP":       adaptertest.Allocs(t, server(ratekitecho.New(unlimited(), ratekitecho.PeerIP))),
		"config":       adaptertest.Allocs(t, server(ratekitecho.NewWithConfig(ratekitecho.Config{Limiter: unlimited()}))),
		"after no-op":  adaptertest.Allocs(t, server(noop, ratekitecho.New(unlimited(), ratekitecho.PeerIP))) - 1,
	} {
		if n != alone {
			t.Errorf("ratekit (%s): %v allocs, echo alone %v", name, n, alone)
		}
	}
	if n := adaptertest.Allocs(t, server(ratekitecho.New(unlimited(), ratekitecho.PeerIP), noop)); n != twoNoops {
		t.Errorf("ratekit in front of a no-op middleware: %v allocs, two no-op middlewares %v", n, twoNoops)
	}
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
	}})
	if n := adaptertest.Allocs(t, server(ratekitecho.Rules(e))); n > withNoop {
		t.Errorf("ratekit Rules: %v allocs, echo with a no-op middleware %v", n, withNoop)
	}
}

// BenchmarkMiddleware compares Echo alone, with one and two no-op
// middlewares, with ratekit (a token bucket never exhausted, keyed by a
// constant and by the peer address, with its three X-Ratelimit-* fields
// and without, alone and in front of a no-op middleware) and with Echo's
// own middleware.RateLimiter on its memory store configured alike (a rate
// and burst never reached, keyed by its default, c.RealIP()).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mws  []echo.MiddlewareFunc
	}{
		{"framework", nil},
		{"framework+noop", []echo.MiddlewareFunc{noop}},
		{"framework+noop+noop", []echo.MiddlewareFunc{noop, noop}},
		{"ratekit/constant", []echo.MiddlewareFunc{ratekitecho.New(adaptertest.Unlimited(), constant)}},
		{"ratekit/PeerIP", []echo.MiddlewareFunc{ratekitecho.New(adaptertest.Unlimited(), ratekitecho.PeerIP)}},
		// In front of another middleware: its next handler is new for
		// every request, so its handler is built anew too.
		{"ratekit/PeerIP+noop", []echo.MiddlewareFunc{ratekitecho.New(adaptertest.Unlimited(), ratekitecho.PeerIP), noop}},
		// Echo's RateLimiter sets no header: like for like.
		{"ratekit/PeerIP/no-headers", []echo.MiddlewareFunc{ratekitecho.New(adaptertest.Unlimited(), ratekitecho.PeerIP, ratekitecho.WithHeaders(answer.NoHeaders))}},
		{"echo-ratelimiter", []echo.MiddlewareFunc{middleware.RateLimiter(middleware.NewRateLimiterMemoryStore(1e9))}},
	} {
		b.Run(bc.name, func(b *testing.B) { echotest.Bench(b, server(bc.mws...)) })
	}
}
