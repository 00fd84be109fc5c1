package readme

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/stdhttp"
)

// reportsAPI serves report (a slow handler) at POST /reports: 60 requests
// a minute per client IP, and at most 4 of them running at once.
func reportsAPI(report http.Handler) (http.Handler, error) {
	// snippet: concurrency
	inflight, err := concurrency.NewLimiter(4, concurrency.WithName("reports"))
	if err != nil {
		return nil, err // a max below 1, a bad name or lease TTL
	}
	rate := core.Must(core.NewLimiter(core.Limit{Name: "reports-rate", Rate: core.PerMinute(60)}))

	mux := http.NewServeMux()
	// The rate limit first: a request over its rate never takes a slot.
	mux.Handle("POST /reports", stdhttp.New(rate, keyfuncs.PeerIP)(
		stdhttp.Concurrency(inflight, keyfuncs.PeerIP)(report)))
	// end snippet
	return mux, nil
}

// sharedReports builds the concurrency limiter of the Redis example: 4
// reports per client at once across every server that uses rdb.
func sharedReports(rdb *redis.Client) (*concurrency.Limiter, error) {
	// snippet: concurrency-redis
	store, err := redisstore.New(rdb)
	if err != nil {
		return nil, err
	}
	inflight, err := concurrency.NewLimiter(4, concurrency.WithName("reports"),
		concurrency.WithStore(store.Concurrency()), // leases in Redis, shared by every server
		concurrency.WithLeaseTTL(30*time.Second),   // a crashed server's slots free within 30 s
	)
	// end snippet
	return inflight, err
}

// The one-liners of each framework, on routes served by report handlers.

func concurrencyGin(inflight *concurrency.Limiter, report gin.HandlerFunc) *gin.Engine {
	r := gin.New()
	// snippet: concurrency-frameworks
	r.POST("/reports", ratekitgin.Concurrency(inflight, ratekitgin.PeerIP), report) // Gin
	// end snippet
	return r
}

func concurrencyEcho(inflight *concurrency.Limiter, report echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	// snippet: concurrency-frameworks
	e.POST("/reports", report, ratekitecho.Concurrency(inflight, ratekitecho.PeerIP)) // Echo (echo5 alike)
	// end snippet
	return e
}

func concurrencyFiber(inflight *concurrency.Limiter, report fiber.Handler) *fiber.App {
	app := fiber.New()
	// snippet: concurrency-frameworks
	app.Post("/reports", ratekitfiber.Concurrency(inflight, ratekitfiber.PeerIP), report) // Fiber (fiber3 alike)
	// end snippet
	return app
}

func concurrencyChi(inflight *concurrency.Limiter, report http.HandlerFunc) chi.Router {
	r := chi.NewRouter()
	// snippet: concurrency-frameworks
	r.With(ratekitchi.Concurrency(inflight, ratekitchi.PeerIP)).Post("/reports", report) // Chi
	// end snippet
	return r
}

// elasticOnInFlight serves mux behind a limit of 100 requests a minute
// per client IP that doubles while this server has fewer than 200
// requests in flight.
func elasticOnInFlight(mux http.Handler) (http.Handler, error) {
	// snippet: concurrency-elastic
	// MaxSlots: count every request in flight, refuse none.
	inflight, err := concurrency.NewLimiter(concurrency.MaxSlots, concurrency.WithName("in-flight"))
	if err != nil {
		return nil, err
	}
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)},
		core.WithElastic(100, inflight.Spare(200))) // up to 200 a minute below 200 in flight
	if err != nil {
		return nil, err
	}
	handler := stdhttp.New(lim, keyfuncs.PeerIP)(stdhttp.Concurrency(inflight, keyfuncs.PeerIP)(mux))
	// end snippet
	return handler, nil
}
