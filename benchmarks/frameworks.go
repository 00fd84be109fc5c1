package benchmarks

// The framework comparison: what a rate-limiting middleware adds to a
// request on each web framework ratekit has an adapter for, ratekit's
// adapter beside the limiter the framework's users would otherwise pick,
// on the allowed path. Each request is served in place, without a
// network, from the client 192.0.2.10:4711, as the adapters' own
// benchmarks serve it:
//
//	go test ./benchmarks -run '^$' -bench Frameworks -benchtime 1s
//	go run ./benchmarks/cmd/compare -frameworks      # the Markdown table
//
// TestFrameworkMiddlewareAnswers checks that every middleware answers 200
// while its quota lasts and 429 once it is spent.

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	ulule "github.com/ulule/limiter/v3"
	ululegin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/ratekit/ratekit/answer"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// An Allowance is the quota of a middleware in the framework comparison:
// Count requests per Window. The window limiters take it as it is; the
// token buckets (ratekit when its peer is one, Echo's RateLimiter) refill
// Count per Window and hold Count.
type Allowance struct {
	Count  int
	Window time.Duration
}

// perSecond is the refill rate in requests per second.
func (a Allowance) perSecond() float64 { return float64(a.Count) / a.Window.Seconds() }

// ratekitLimit is the ratekit limit of the allowance, counted with algo.
func (a Allowance) ratekitLimit(algo core.Algorithm) core.Limit {
	return core.Limit{Name: "bench", Algorithm: algo, Rate: core.Rate{Count: a.Count, Period: a.Window}}
}

// BenchAllowance is the quota of every middleware in the benchmarks: a
// billion requests a minute, which no benchmark here exhausts (that would
// take 16M requests a second), so that every request takes the allowed
// path. Its header values are large numbers, which every library,
// ratekit included, formats anew for each response.
var BenchAllowance = Allowance{Count: 1_000_000_000, Window: time.Minute}

// SmallCountsAllowance is a quota no benchmark exhausts either, 4000
// requests per 100 µs, whose header values are all below 4096: the
// numbers ratekit formats without allocating, as for the limits of real
// APIs (100 a minute, 5000 an hour). The benchmarks run ratekit under it
// too, beside BenchAllowance, where the peer sets such headers.
var SmallCountsAllowance = Allowance{Count: 4000, Window: 100 * time.Microsecond}

// A Server serves one request to a framework, in place.
type Server struct {
	// Serve serves GET / from 192.0.2.10:4711 and returns the status.
	Serve func() int
	// Header returns the header fields of the last response.
	Header func() http.Header
}

// A Middleware is one rate limiter mounted on a framework, or none.
type Middleware struct {
	Name   string // short name, without slashes: a sub-benchmark name
	Module string // Go module path of the middleware; "" for none
	// Setup tells how the middleware is configured, for the table's notes.
	Setup string
	// New returns a server with the middleware configured with the
	// allowance.
	New func(Allowance) Server
}

// A Framework is a web framework, or net/http alone, with the middlewares
// compared on it.
type Framework struct {
	Name   string // short name: a sub-benchmark name
	Module string
	// Alone is the framework without a rate limiter, the baseline.
	Alone Middleware
	// Ratekit is ratekit's adapter, configured like Peer: the same
	// algorithm, the client IP as key, the same headers.
	Ratekit Middleware
	// Peer is the limiter the framework's users would otherwise pick.
	Peer Middleware
	// PeerHeaders tells whether Peer sets rate-limit headers on
	// admitted requests. ratekit sets its X-Ratelimit-* fields either way.
	PeerHeaders bool
	// Extra are more configurations of ratekit's adapter, measured after
	// Ratekit: on Echo, without headers, as Echo's limiter answers.
	Extra []Middleware
}

// Frameworks are the frameworks compared, in table order.
var Frameworks = []Framework{
	{
		Name:   "gin",
		Module: "github.com/gin-gonic/gin",
		Alone:  Middleware{Name: "framework", Setup: "gin.New() in release mode, one route", New: func(Allowance) Server { return ginServer(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/gin",
			Setup:  "ratekitgin.New(core.NewLimiter(Limit{Algorithm: FixedWindow, Rate: count per window}), ratekitgin.PeerIP); X-Ratelimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return ginServer(ratekitgin.New(core.Must(core.NewLimiter(a.ratekitLimit(core.FixedWindow))), ratekitgin.PeerIP))
			},
		},
		Peer: Middleware{
			Name:   "ulule-limiter",
			Module: "github.com/ulule/limiter/v3",
			Setup:  "drivers/middleware/gin.NewMiddleware(limiter.New(memory.NewStore(), Rate{Limit: count, Period: window})), keyed by its default, c.ClientIP(); a fixed window; X-RateLimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				lim := ulule.New(ululememory.NewStore(), ulule.Rate{Limit: int64(a.Count), Period: a.Window})
				return ginServer(ululegin.NewMiddleware(lim))
			},
		},
		PeerHeaders: true,
	},
	{
		Name:   "echo",
		Module: "github.com/labstack/echo/v4",
		Alone:  Middleware{Name: "framework", Setup: "echo.New(), one route", New: func(Allowance) Server { return echoServer(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/echo",
			Setup:  "ratekitecho.New(core.NewLimiter(Limit{Algorithm: TokenBucket, Rate: count per window}), ratekitecho.PeerIP); X-Ratelimit-Limit, -Remaining, -Reset (Echo's limiter sets none)",
			New: func(a Allowance) Server {
				lim := core.Must(core.NewLimiter(a.ratekitLimit(core.TokenBucket)))
				return echoServer(ratekitecho.New(lim, ratekitecho.PeerIP))
			},
		},
		Extra: []Middleware{{
			Name:   "ratekit-no-headers",
			Module: "github.com/ratekit/ratekit/echo",
			Setup:  "as ratekit, with ratekitecho.WithHeaders(answer.NoHeaders): no headers, as Echo's",
			New: func(a Allowance) Server {
				lim := core.Must(core.NewLimiter(a.ratekitLimit(core.TokenBucket)))
				return echoServer(ratekitecho.New(lim, ratekitecho.PeerIP, ratekitecho.WithHeaders(answer.NoHeaders)))
			},
		}},
		Peer: Middleware{
			Name:   "echo-ratelimiter",
			Module: "github.com/labstack/echo/v4",
			Setup:  "middleware.RateLimiter(NewRateLimiterMemoryStoreWithConfig({Rate: count per window, Burst: count})), keyed by its default, c.RealIP(); a token bucket (x/time/rate); no headers",
			New: func(a Allowance) Server {
				st := middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
					Rate: rate.Limit(a.perSecond()), Burst: a.Count,
				})
				return echoServer(middleware.RateLimiter(st))
			},
		},
	},
	{
		Name:   "fiber",
		Module: "github.com/gofiber/fiber/v2",
		Alone:  Middleware{Name: "framework", Setup: "fiber.New(), one route, the response reset before each request as fasthttp does", New: func(Allowance) Server { return fiberServer(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/fiber",
			Setup:  "ratekitfiber.New(core.NewLimiter(Limit{Algorithm: FixedWindow, Rate: count per window}), ratekitfiber.PeerIP); X-Ratelimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return fiberServer(ratekitfiber.New(core.Must(core.NewLimiter(a.ratekitLimit(core.FixedWindow))), ratekitfiber.PeerIP))
			},
		},
		Peer: Middleware{
			Name:   "fiber-limiter",
			Module: "github.com/gofiber/fiber/v2",
			Setup:  "middleware/limiter.New(Config{Max: count, Expiration: window}), keyed by its default, c.IP(); a fixed window of whole seconds, memory storage; X-RateLimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return fiberServer(fiberlimiter.New(fiberlimiter.Config{Max: a.Count, Expiration: a.Window}))
			},
		},
		PeerHeaders: true,
	},
	{
		Name:   "chi",
		Module: "github.com/go-chi/chi/v5",
		Alone:  Middleware{Name: "framework", Setup: "chi.NewRouter(), one route", New: func(Allowance) Server { return chiServer(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/chi",
			Setup:  "r.Use(ratekitchi.New(core.NewLimiter(Limit{Algorithm: SlidingWindowCounter, Rate: count per window}), ratekitchi.PeerIP)); X-Ratelimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return chiServer(ratekitchi.New(core.Must(core.NewLimiter(a.ratekitLimit(core.SlidingWindowCounter))), ratekitchi.PeerIP))
			},
		},
		Peer: Middleware{
			Name:   "go-chi-httprate",
			Module: "github.com/go-chi/httprate",
			Setup:  "r.Use(httprate.LimitByIP(count, window)), keyed by r.RemoteAddr; a sliding window counter; X-RateLimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				//lint:ignore SA1019 measured as Chi's users mount it, keyed by the peer address as ratekit's PeerIP is
				return chiServer(httprate.LimitByIP(a.Count, a.Window))
			},
		},
		PeerHeaders: true,
	},
	{
		Name:   "net-http",
		Module: "net/http",
		Alone:  Middleware{Name: "framework", Setup: "http.ServeMux, one route", New: func(Allowance) Server { return muxServer(nil) }},
		Ratekit: Middleware{
			Name:   "ratekit",
			Module: "github.com/ratekit/ratekit/stdhttp",
			Setup:  "stdhttp.New(core.NewLimiter(Limit{Algorithm: SlidingWindowCounter, Rate: count per window}), keyfuncs.PeerIP)(mux); X-Ratelimit-Limit, -Remaining, -Reset",
			New: func(a Allowance) Server {
				return muxServer(stdhttp.New(core.Must(core.NewLimiter(a.ratekitLimit(core.SlidingWindowCounter))), keyfuncs.PeerIP))
			},
		},
		Peer: Middleware{
			Name:   "go-chi-httprate",
			Module: "github.com/go-chi/httprate",
			Setup:  "httprate.LimitByIP(count, window)(mux); as on Chi",
			New: func(a Allowance) Server {
				//lint:ignore SA1019 measured as on Chi
				return muxServer(httprate.LimitByIP(a.Count, a.Window))
			},
		},
		PeerHeaders: true,
	},
}

// A FrameworkRow is one benchmark of the framework comparison: a
// middleware on a framework under an allowance.
type FrameworkRow struct {
	Framework  Framework
	Middleware Middleware
	Allowance  Allowance
	// Name is the sub-benchmark name: the middleware's, with
	// "-small-counts" for ratekit under SmallCountsAllowance.
	Name string
}

// Rows returns the benchmarks of f in table order: the framework alone,
// ratekit, ratekit under SmallCountsAllowance, the extra configurations,
// and the peer.
func (f Framework) Rows() []FrameworkRow {
	rows := []FrameworkRow{
		{f, f.Alone, BenchAllowance, f.Alone.Name},
		{f, f.Ratekit, BenchAllowance, f.Ratekit.Name},
		{f, f.Ratekit, SmallCountsAllowance, f.Ratekit.Name + "-small-counts"},
	}
	for _, mw := range f.Extra {
		rows = append(rows, FrameworkRow{f, mw, BenchAllowance, mw.Name})
	}
	return append(rows, FrameworkRow{f, f.Peer, BenchAllowance, f.Peer.Name})
}

// BenchFramework serves requests to the row's server, one at a time, on
// the allowed path: it fails if a request is not answered 200.
func BenchFramework(row FrameworkRow) func(*testing.B) {
	return func(b *testing.B) {
		srv := row.Middleware.New(row.Allowance)
		if s := srv.Serve(); s != http.StatusOK {
			b.Fatalf("%s/%s: status %d", row.Framework.Name, row.Name, s)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			srv.Serve()
		}
		b.StopTimer()
		if s := srv.Serve(); s != http.StatusOK {
			b.Fatalf("%s/%s: status %d: the benchmark must stay on the allowed path", row.Framework.Name, row.Name, s)
		}
	}
}

// The servers. Every one has the route GET / answering "ok", and serves
// the same request again and again; the response writers are the least a
// writer can be, their header maps cleared before each request, so that
// the cost measured is the framework's and the middleware's.

var okBody = []byte("ok")

// clientAddr is the client of every request, an address of TEST-NET-1.
const clientAddr = "192.0.2.10:4711"

type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

// httpServer serves h: the status is 200 unless the handler writes one.
func httpServer(h http.Handler) Server {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = clientAddr
	w := &benchWriter{h: make(http.Header, 8)}
	return Server{
		Serve: func() int {
			clear(w.h)
			w.status = http.StatusOK
			h.ServeHTTP(w, req)
			return w.status
		},
		Header: func() http.Header { return w.h.Clone() },
	}
}

func okHandler(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(okBody) }

func ginServer(mw gin.HandlerFunc) Server {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if mw != nil {
		r.Use(mw)
	}
	r.GET("/", func(c *gin.Context) { _, _ = c.Writer.Write(okBody) })
	return httpServer(r)
}

func echoServer(mw echo.MiddlewareFunc) Server {
	e := echo.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/", func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMETextPlainCharsetUTF8, okBody) })
	return httpServer(e)
}

func chiServer(mw func(http.Handler) http.Handler) Server {
	r := chi.NewRouter()
	if mw != nil {
		r.Use(mw)
	}
	r.Get("/", okHandler)
	return httpServer(r)
}

func muxServer(mw func(http.Handler) http.Handler) Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", okHandler)
	if mw == nil {
		return httpServer(mux)
	}
	return httpServer(mw(mux))
}

func fiberServer(mw fiber.Handler) Server {
	app := fiber.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.Send(okBody) })
	return fasthttpServer(app.Handler())
}
