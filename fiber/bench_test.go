package ratekitfiber_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

// app returns a Fiber app with middleware mw (if any) and one route, and a
// function that serves one request to it in place, without a network or
// the goroutines of app.Test: what the middleware costs is then visible.
func app(mw fiber.Handler) func() *fasthttp.RequestCtx {
	a := fiber.New()
	if mw != nil {
		a.Use(mw)
	}
	a.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
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

func constant(*fiber.Ctx) (string, error) { return "client", nil }

// TestAllocs: on the allowed path the middleware allocates nothing of its
// own, not even with a key of the peer address once the client is hot
// (keyfuncs keeps the keys of recent clients), where Fiber itself
// allocates a string for c.IP().
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
		return testing.AllocsPerRun(1000, func() { serve() })
	}
	alone := count(app(nil))
	withConstant := count(app(ratekitfiber.New(never(), constant)))
	withPeerIP := count(app(ratekitfiber.New(never(), ratekitfiber.PeerIP)))
	fiberIP := count(app(func(c *fiber.Ctx) error { _ = c.IP(); return c.Next() }))
	t.Logf("allocs/request: fiber %v, +ratekit (constant key) %v, +ratekit (PeerIP) %v, fiber + c.IP() %v",
		alone, withConstant, withPeerIP, fiberIP)
	if withConstant != alone {
		t.Errorf("ratekit with a constant key: %v allocs, fiber alone %v", withConstant, alone)
	}
	if withPeerIP != alone {
		t.Errorf("ratekit with PeerIP: %v allocs, fiber alone %v (fiber with c.IP(): %v)", withPeerIP, alone, fiberIP)
	}
	// Concurrency allocates the request's lease, and nothing for its key:
	// a key function's key is the caller's to keep (see Key).
	inFlight, err := concurrency.NewLimiter(1000)
	if err != nil {
		t.Fatal(err)
	}
	withConcurrency := count(app(ratekitfiber.Concurrency(inFlight, ratekitfiber.PeerIP)))
	if withConcurrency > alone+1 {
		t.Errorf("Concurrency with PeerIP: %v allocs, fiber alone %v; want at most one more, the lease", withConcurrency, alone)
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
		{"ratekit-constant", ratekitfiber.New(never(), constant)},
		{"ratekit-peerip", ratekitfiber.New(never(), ratekitfiber.PeerIP)},
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
