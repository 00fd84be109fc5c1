package ratekitecho_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitecho "github.com/ratekit/ratekit/echo"
)

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c echo.Context) (string, error) { return s.Key(c.Request().Header.Get(adaptertest.KeyHeader)) }
		e := echo.New()
		e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true, DisableStackAll: true}))
		e.Use(ratekitecho.Concurrency(s.Limiter, key))
		e.GET("/", func(c echo.Context) error { s.Handle(); return c.String(http.StatusOK, "ok") })
		return adaptertest.Handler(e)
	})
	assert.Panics(t, func() { ratekitecho.Concurrency(nil, ratekitecho.PeerIP) })
}
