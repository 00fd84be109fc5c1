package ratekitfiber_test

import (
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		// The key is copied: Fiber reuses the request's memory.
		key := func(c *fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
		app := fiber.New()
		app.Use(recover.New())
		app.Use(ratekitfiber.Concurrency(s.Limiter, key))
		app.Get("/", func(c *fiber.Ctx) error { s.Handle(); return c.SendString("ok") })
		return serve(t, app)
	})
	assert.Panics(t, func() { ratekitfiber.Concurrency(nil, ratekitfiber.PeerIP) })
}
