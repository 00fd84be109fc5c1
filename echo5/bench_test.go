package ratekitecho5_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	"github.com/ratekit/ratekit/internal/echoport/echotest"
	"github.com/ratekit/ratekit/rules"
)

var okBody = []byte("ok")

// server returns a function that serves one request from 192.0.2.10, in
// place, to an Echo instance with the middleware mw (if any) and one route.
func server(mw echo.MiddlewareFunc) func() int {
	e := echo.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/", func(c *echo.Context) error { return c.Blob(http.StatusOK, echo.MIMETextPlainCharsetUTF8, okBody) })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.10:4711"
	return adaptertest.InPlace(e, r)
}

func constant(*echo.Context) (string, error) { return "client", nil }

// noop is the least middleware Echo can have.
func noop(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error { return next(c) }
}

// TestAllocs: on the allowed path ratekit allocates nothing of its own.
// Echo v5 compiles its middleware chains once, when e.Use, a group or a
// route adds middleware (Echo v4 applied them anew for every request, one
// closure per middleware), so a middleware costs Echo v5 no allocation
// per request: Echo alone, with a middleware that only calls next, and
// with ratekit (keyed by a constant, PeerIP or ClientIP; its Config form;
// LimitByIP; Rules with a constant generic_key rule, not exhausted, whose
// rules.Request of an *echo.Context is one pointer) allocate alike.
func TestAllocs(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
	}})
	alone := adaptertest.Allocs(t, server(nil))
	clientIP, err := ratekitecho5.ClientIP(echo.New()) // Echo's default, as server's instance
	if err != nil {
		t.Fatal(err)
	}
	for name, mw := range map[string]echo.MiddlewareFunc{
		"no-op middleware":   noop,
		"ratekit, constant":  ratekitecho5.New(adaptertest.Unlimited(), constant),
		"ratekit, PeerIP":    ratekitecho5.New(adaptertest.Unlimited(), ratekitecho5.PeerIP),
		"ratekit, ClientIP":  ratekitecho5.New(adaptertest.Unlimited(), clientIP),
		"ratekit, config":    ratekitecho5.NewWithConfig(ratekitecho5.Config{Limiter: adaptertest.Unlimited()}),
		"ratekit, LimitByIP": ratekitecho5.LimitByIP(4000, 100*time.Microsecond),
		"ratekit, Rules":     ratekitecho5.Rules(e),
	} {
		if n := adaptertest.Allocs(t, server(mw)); n != alone {
			t.Errorf("echo with %s: %v allocs, echo alone %v", name, n, alone)
		}
	}
}

// BenchmarkMiddleware compares Echo alone, with a no-op middleware, with
// ratekit (a token bucket never exhausted, keyed by a constant and by the
// peer address, with its three X-Ratelimit-* fields and without) and with
// Echo's own middleware.RateLimiter on its memory store configured alike
// (a rate and burst never reached, keyed by its default, c.RealIP(), which
// is the peer address in Echo v5).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mw   echo.MiddlewareFunc
	}{
		{"framework", nil},
		{"framework+noop", noop},
		{"ratekit/constant", ratekitecho5.New(adaptertest.Unlimited(), constant)},
		{"ratekit/PeerIP", ratekitecho5.New(adaptertest.Unlimited(), ratekitecho5.PeerIP)},
		// Echo's RateLimiter sets no header: like for like.
		{"ratekit/PeerIP/no-headers", ratekitecho5.New(adaptertest.Unlimited(), ratekitecho5.PeerIP, ratekitecho5.WithHeaders(answer.NoHeaders))},
		{"echo-ratelimiter", middleware.RateLimiter(middleware.NewRateLimiterMemoryStore(1e9))},
	} {
		b.Run(bc.name, func(b *testing.B) { echotest.Bench(b, server(bc.mw)) })
	}
}
