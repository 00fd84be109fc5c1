package readme

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
)

// The framework quick starts: each function builds the framework's server
// with the README's routes. lim limits every route, login (also) POST
// /api/login, and GET /api/quota answers the requests left.

// limiters returns the limiters of the framework quick starts: 100 a minute
// for everything, 5 a minute for the login.
func limiters() (*core.Limiter, *core.Limiter) {
	// snippet: limiters
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
	// end snippet
	return lim, login
}

// loggedIn is the body of the login handlers.
const loggedIn = "logged in\n"

// ginServer is the Gin quick start.
func ginServer(lim, login *core.Limiter) *gin.Engine {
	r := gin.New()
	handleLogin := func(c *gin.Context) { c.String(http.StatusOK, loggedIn) }
	// snippet: gin
	r.Use(ratekitgin.New(lim, ratekitgin.PeerIP, ratekitgin.WithDecisionInContext()))
	r.POST("/api/login", ratekitgin.New(login, ratekitgin.PeerIP), handleLogin)
	r.GET("/api/quota", func(c *gin.Context) {
		d, _ := ratekitgin.DecisionFrom(c) // from c.Get
		c.JSON(http.StatusOK, gin.H{"remaining": d.Remaining})
	})
	// end snippet
	return r
}

// echoServer is the Echo quick start.
func echoServer(lim, login *core.Limiter) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	handleLogin := func(c echo.Context) error { return c.String(http.StatusOK, loggedIn) }
	// snippet: echo
	e.Use(ratekitecho.New(lim, ratekitecho.PeerIP, ratekitecho.WithDecisionInContext()))
	e.POST("/api/login", handleLogin, ratekitecho.New(login, ratekitecho.PeerIP))
	e.GET("/api/quota", func(c echo.Context) error {
		d, _ := ratekitecho.DecisionFrom(c) // from c.Get
		return c.JSON(http.StatusOK, map[string]int{"remaining": d.Remaining})
	})
	// end snippet
	return e
}

// fiberApp is the Fiber quick start.
func fiberApp(lim, login *core.Limiter) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	handleLogin := func(c *fiber.Ctx) error { return c.SendString(loggedIn) }
	// snippet: fiber
	app.Use(ratekitfiber.New(lim, ratekitfiber.PeerIP, ratekitfiber.WithDecisionInContext()))
	app.Post("/api/login", ratekitfiber.New(login, ratekitfiber.PeerIP), handleLogin)
	app.Get("/api/quota", func(c *fiber.Ctx) error {
		d, _ := ratekitfiber.DecisionFrom(c) // from c.Locals
		return c.JSON(fiber.Map{"remaining": d.Remaining})
	})
	// end snippet
	return app
}

// chiRouter is the Chi quick start.
func chiRouter(lim, login *core.Limiter) chi.Router {
	r := chi.NewRouter()
	handleLogin := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, loggedIn) }
	// snippet: chi
	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP, ratekitchi.WithDecisionInContext()))
	r.With(ratekitchi.New(login, ratekitchi.PeerIP)).Post("/api/login", handleLogin)
	r.Get("/api/quota", func(w http.ResponseWriter, r *http.Request) {
		d, _ := ratekitchi.DecisionFrom(r.Context())
		fmt.Fprintf(w, "%d\n", d.Remaining)
	})
	// end snippet
	return r
}

// ginTenants limits the requests of each tenant, the :tenant parameter of
// the routes /tenants/:tenant/..., by lim; a request to another route has no
// tenant and is answered 400.
func ginTenants(lim *core.Limiter) *gin.Engine {
	r := gin.New()
	// snippet: gin-tenant
	tenant := func(c *gin.Context) (string, error) {
		if t := c.Param("tenant"); t != "" {
			return t, nil
		}
		return "", keyfuncs.ErrMissing // answered 400
	}
	r.Use(ratekitgin.New(lim, tenant))
	// end snippet
	r.GET("/tenants/:tenant/items", func(c *gin.Context) { c.String(http.StatusOK, "items of %s\n", c.Param("tenant")) })
	r.GET("/health", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	return r
}
