package ratekitfiber3_test

import (
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
)

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		// The key is copied: Fiber reuses the request's memory.
		key := func(c fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
		app := fiber.New()
		app.Use(recover.New())
		app.Use(ratekitfiber3.Concurrency(s.Limiter, key))
		app.Get("/", func(c fiber.Ctx) error { s.Handle(); return c.SendString("ok") })
		return serve(t, app)
	})
	assert.Panics(t, func() { ratekitfiber3.Concurrency(nil, ratekitfiber3.PeerIP) })
}
