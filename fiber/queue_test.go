package ratekitfiber_test

import (
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
)

func TestWithQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, lim *core.Limiter, offer *queue.Offer) queuetest.Serve {
		all := func(*fiber.Ctx) (string, error) { return "all", nil }
		app := fiber.New()
		app.Use(ratekitfiber.New(lim, all, ratekitfiber.WithQueue(offer)))
		app.Post("/orders", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
		return func(r *http.Request) *http.Response {
			res, err := app.Test(r, -1)
			require.NoError(t, err)
			return res
		}
	})
}
