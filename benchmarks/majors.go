package benchmarks

// The current majors of Echo (v5) and Fiber (v3), compared as their
// previous majors are in frameworks.go, through ratekit's modules echo5
// and fiber3.

import (
	"net"
	"net/http"

	fiber3 "github.com/gofiber/fiber/v3"
	fiber3limiter "github.com/gofiber/fiber/v3/middleware/limiter"
	echo5 "github.com/labstack/echo/v5"
	echo5middleware "github.com/labstack/echo/v5/middleware"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
)

func init() {
	Frameworks = append(Frameworks, Framework{
		Name:   "echo5",
		Module: "github.com/labstack/echo/v5",
		Alone:  Middleware{Name: "framework", Setup: "echo.New(), one route", New: func(Allowance) Server { return echo5Server(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/echo5",
			Setup:  "ratekitecho5.New(core.NewLimiter(Limit{Algorithm: TokenBucket, Rate: count per window}), ratekitecho5.PeerIP); X-Ratelimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return echo5Server(ratekitecho5.New(core.Must(core.NewLimiter(a.ratekitLimit(core.TokenBucket))), ratekitecho5.PeerIP))
			},
		},
		Extra: []Middleware{{
			Name:   "ratekit-no-headers",
			Module: "github.com/ratekit/ratekit/echo5",
			Setup:  "as ratekit, with ratekitecho5.WithHeaders(answer.NoHeaders): no headers",
			New: func(a Allowance) Server {
				lim := core.Must(core.NewLimiter(a.ratekitLimit(core.TokenBucket)))
				return echo5Server(ratekitecho5.New(lim, ratekitecho5.PeerIP, ratekitecho5.WithHeaders(answer.NoHeaders)))
			},
		}},
		Peer: Middleware{
			Name:   "echo-ratelimiter",
			Module: "github.com/labstack/echo/v5",
			Setup:  "middleware.RateLimiter(NewRateLimiterMemoryStoreWithConfig({Rate: count per window, Burst: count})), keyed by its default, c.RealIP() (the peer, in v5); a token bucket (x/time/rate); X-RateLimit-Limit, -Remaining",
			New: func(a Allowance) Server {
				st := echo5middleware.NewRateLimiterMemoryStoreWithConfig(echo5middleware.RateLimiterMemoryStoreConfig{
					Rate: a.perSecond(), Burst: a.Count,
				})
				return echo5Server(echo5middleware.RateLimiter(st))
			},
		},
		PeerHeaders: true,
	}, Framework{
		Name:   "fiber3",
		Module: "github.com/gofiber/fiber/v3",
		Alone:  Middleware{Name: "framework", Setup: "fiber.New(), one route, the response reset before each request as fasthttp does", New: func(Allowance) Server { return fiber3Server(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/fiber3",
			Setup:  "ratekitfiber3.New(core.NewLimiter(Limit{Algorithm: FixedWindow, Rate: count per window}), ratekitfiber3.PeerIP); X-Ratelimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return fiber3Server(ratekitfiber3.New(core.Must(core.NewLimiter(a.ratekitLimit(core.FixedWindow))), ratekitfiber3.PeerIP))
			},
		},
		Peer: Middleware{
			Name:   "fiber-limiter",
			Module: "github.com/gofiber/fiber/v3",
			Setup:  "middleware/limiter.New(Config{Max: count, Expiration: window}), keyed by its default, c.IP(); a fixed window of whole seconds, memory storage; X-RateLimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return fiber3Server(fiber3limiter.New(fiber3limiter.Config{Max: a.Count, Expiration: a.Window}))
			},
		},
		PeerHeaders: true,
	})
}

func echo5Server(mw echo5.MiddlewareFunc) Server {
	e := echo5.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/", func(c *echo5.Context) error { return c.Blob(http.StatusOK, echo5.MIMETextPlainCharsetUTF8, okBody) })
	return httpServer(e)
}

func fiber3Server(mw fiber3.Handler) Server {
	app := fiber3.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c fiber3.Ctx) error { return c.Send(okBody) })
	return fasthttpServer(app.Handler())
}

// fasthttpServer serves GET / to a fasthttp handler from 192.0.2.10:4711,
// the response reset before each request as fasthttp does.
func fasthttpServer(h fasthttp.RequestHandler) Server {
	var req fasthttp.Request
	req.Header.SetMethod(http.MethodGet)
	req.SetRequestURI("/")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 4711}, nil)
	return Server{
		Serve: func() int {
			ctx.Response.Reset()
			h(ctx)
			return ctx.Response.StatusCode()
		},
		Header: func() http.Header {
			hdr := http.Header{}
			for k, v := range ctx.Response.Header.All() {
				hdr.Add(string(k), string(v))
			}
			return hdr
		},
	}
}
