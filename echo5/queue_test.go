package ratekitecho5_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo5"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
)

func TestWithQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, lim *core.Limiter, offer *queue.Offer) queuetest.Serve {
		all := func(*echo.Context) (string, error) { return "all", nil }
		e := echo.New()
		e.Use(ratekitecho.New(lim, all, ratekitecho.WithQueue(offer)))
		e.POST("/orders", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
		return func(req *http.Request) *http.Response {
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			return w.Result()
		}
	})
}
