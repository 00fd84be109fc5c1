package ratekitfiber_test

import (
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

// TestAdminMounted: the admin handler under Fiber's adaptor.HTTPHandler,
// behind the app's own auth group, sees the full path and acts on the
// limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		app := fiber.New()
		app.Get("/hello", ratekitfiber.New(lim, ratekitfiber.Header(adaptertest.KeyHeader)), func(c *fiber.Ctx) error { return c.SendString("hi") })
		auth := func(c *fiber.Ctx) error {
			if c.Get("Authorization") != adaptertest.OperatorAuth {
				return c.SendStatus(fiber.StatusUnauthorized)
			}
			return c.Next()
		}
		app.Group("/admin/ratekit", auth).All("/*", adaptor.HTTPHandler(ops))
		return serve(t, app)
	})
}
