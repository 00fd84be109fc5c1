package ratekitfiber3_test

import (
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
)

// TestAdminMounted: the admin handler behind the app's own auth group,
// under Fiber's adaptor.HTTPHandler or given to the route as it is (Fiber
// v3 adapts an http.Handler itself), sees the full path and acts on the
// limiter.
func TestAdminMounted(t *testing.T) {
	for name, wrap := range map[string]func(http.Handler) any{
		"adaptor":      func(h http.Handler) any { return adaptor.HTTPHandler(h) },
		"http.Handler": func(h http.Handler) any { return h },
	} {
		t.Run(name, func(t *testing.T) {
			adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
				app := fiber.New()
				app.Get("/hello", ratekitfiber3.New(lim, ratekitfiber3.Header(adaptertest.KeyHeader)), func(c fiber.Ctx) error { return c.SendString("hi") })
				auth := func(c fiber.Ctx) error {
					if c.Get("Authorization") != adaptertest.OperatorAuth {
						return c.SendStatus(fiber.StatusUnauthorized)
					}
					return c.Next()
				}
				app.Group("/admin/ratekit", auth).All("/*", wrap(ops))
				return serve(t, app)
			})
		})
	}
}
