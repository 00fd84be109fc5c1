package readme

import (
	"net/http"

	fiber "github.com/gofiber/fiber/v3"
	echo "github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/core"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
)

// The quick starts of the current majors of Echo and Fiber, with the
// routes of frameworks.go's.

// echo5Server is the Echo v5 quick start.
func echo5Server(lim, login *core.Limiter) *echo.Echo {
	e := echo.New()
	handleLogin := func(c *echo.Context) error { return c.String(http.StatusOK, loggedIn) }
	// snippet: echo5
	e.Use(ratekitecho5.New(lim, ratekitecho5.PeerIP, ratekitecho5.WithDecisionInContext()))
	e.POST("/api/login", handleLogin, ratekitecho5.New(login, ratekitecho5.PeerIP))
	e.GET("/api/quota", func(c *echo.Context) error {
		d, _ := ratekitecho5.DecisionFrom(c) // from c.Get
		return c.JSON(http.StatusOK, map[string]int{"remaining": d.Remaining})
	})
	// end snippet
	return e
}

// fiber3App is the Fiber v3 quick start.
func fiber3App(lim, login *core.Limiter) *fiber.App {
	app := fiber.New()
	handleLogin := func(c fiber.Ctx) error { return c.SendString(loggedIn) }
	// snippet: fiber3
	app.Use(ratekitfiber3.New(lim, ratekitfiber3.PeerIP, ratekitfiber3.WithDecisionInContext()))
	app.Post("/api/login", ratekitfiber3.New(login, ratekitfiber3.PeerIP), handleLogin)
	app.Get("/api/quota", func(c fiber.Ctx) error {
		d, _ := ratekitfiber3.DecisionFrom(c) // from c.Locals
		return c.JSON(fiber.Map{"remaining": d.Remaining})
	})
	// end snippet
	return app
}
