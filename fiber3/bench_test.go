package ratekitfiber3_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/limiter"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
)

// app returns a Fiber app with middleware mw (if any) and one route, and a
// function that serves one request to it in place, without a network or
// the goroutines of app.Test: what the middleware costs is then visible.
func app(mw fiber.Handler) func() *fasthttp.RequestCtx { return serveOn(fiber.New(), mw) }

// serveOn is app on the app a.
func serveOn(a *fiber.App, mw fiber.Handler) func() *fasthttp.RequestCtx {
	if mw != nil {
		a.Use(mw)
	}
	a.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	h := a.Handler()
	var req fasthttp.Request
	req.Header.SetMethod(http.MethodGet)
	req.SetRequestURI("/")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 4711}, nil)
	return func() *fasthttp.RequestCtx {
		h(ctx)
		return ctx
	}
}

// never is a token bucket that a benchmark never exhausts: 4000 requests
// per 100 µs, as in stdhttp's benchmark (a count below 4096, the largest
// number core formats without allocating).
func never() *core.Limiter {
	return core.Must(core.NewLimiter(core.Limit{Name: "bench", Algorithm: core.TokenBucket,
		Rate: core.Rate{Count: 4000, Period: 100 * time.Microsecond}}))
}

func constant(fiber.Ctx) (string, error) { return "client", nil }

// TestAllocs: on the allowed path the middleware allocates nothing of its
// own. A key of the peer address costs nothing once the client is hot
// (keyfuncs keeps the keys of recent clients), where c.IP() costs Fiber
// one string; ClientIP costs c.IP()'s string and the key's copy; the
// decision kept for DecisionFrom costs two; Concurrency its lease, and
// nothing for its key. These are the counts measured
// with Fiber v3.1.0, asserted exactly so that a change shows.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	if raceEnabled {
		t.Skip("allocation counts: under the race detector, sync.Pool drops pooled values at random")
	}
	count := func(serve func() *fasthttp.RequestCtx) float64 {
		t.Helper()
		if c := serve().Response.StatusCode(); c != http.StatusOK {
			t.Fatalf("status %d", c)
		}
		n := testing.AllocsPerRun(1000, func() { serve() })
		if c := serve().Response.StatusCode(); c != http.StatusOK {
			t.Fatalf("status %d: the count must stay on the allowed path", c)
		}
		return n
	}
	fiberApp := fiber.New()
	clientIP, err := ratekitfiber3.ClientIP(fiberApp)
	if err != nil {
		t.Fatal(err)
	}
	inFlight, err := concurrency.NewLimiter(1000)
	if err != nil {
		t.Fatal(err)
	}
	alone := count(app(nil))
	for _, tc := range []struct {
		name  string
		serve func() *fasthttp.RequestCtx
		added float64
	}{
		{"fiber + c.IP()", app(func(c fiber.Ctx) error { _ = c.IP(); return c.Next() }), 1},
		{"ratekit, constant key", app(ratekitfiber3.New(never(), constant)), 0},
		{"ratekit, PeerIP", app(ratekitfiber3.New(never(), ratekitfiber3.PeerIP)), 0},
		{"ratekit, ClientIP", serveOn(fiberApp, ratekitfiber3.New(never(), clientIP)), 2},
		{"ratekit, decision in context", app(ratekitfiber3.New(never(), constant, ratekitfiber3.WithDecisionInContext())), 2},
		{"LimitByIP", app(ratekitfiber3.LimitByIP(4000, 100*time.Microsecond)), 0},
		{"Concurrency, PeerIP: its lease", app(ratekitfiber3.Concurrency(inFlight, ratekitfiber3.PeerIP)), 1},
	} {
		got := count(tc.serve)
		t.Logf("allocs/request: %s %v (fiber alone %v)", tc.name, got, alone)
		if got != alone+tc.added {
			t.Errorf("%s: %v allocs/request, want fiber's %v + %v", tc.name, got, alone, tc.added)
		}
	}
}

// BenchmarkMiddleware compares Fiber alone, with ratekit on the allowed
// path (a token bucket never exhausted, with a constant key and keyed by
// the peer address) and with Fiber's own middleware/limiter configured
// alike (a limit never reached, keyed by c.IP(), its default).
//
//	GOWORK=off go test -run '^$' -bench BenchmarkMiddleware -benchmem
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name string
		mw   fiber.Handler
	}{
		{"framework", nil},
		{"ratekit-constant", ratekitfiber3.New(never(), constant)},
		{"ratekit-peerip", ratekitfiber3.New(never(), ratekitfiber3.PeerIP)},
		{"fiber-limiter", limiter.New(limiter.Config{Max: 1 << 30, Expiration: time.Minute})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve := app(bc.mw)
			if c := serve().Response.StatusCode(); c != http.StatusOK {
				b.Fatalf("status %d", c)
			}
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			if c := serve().Response.StatusCode(); c != http.StatusOK {
				b.Fatalf("status %d: the benchmark must stay on the allowed path", c)
			}
		})
	}
}
