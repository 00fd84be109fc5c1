package ratekitecho5_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
)

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c *echo.Context) (string, error) { return s.Key(c.Request().Header.Get(adaptertest.KeyHeader)) }
		e := echo.New()
		e.Use(middleware.Recover())
		e.Use(ratekitecho5.Concurrency(s.Limiter, key))
		e.GET("/", func(c *echo.Context) error { s.Handle(); return c.String(http.StatusOK, "ok") })
		return adaptertest.Handler(e)
	})
	assert.Panics(t, func() { ratekitecho5.Concurrency(nil, ratekitecho5.PeerIP) })
}
