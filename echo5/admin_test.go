package ratekitecho5_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
)

// TestAdminMounted: the admin handler under echo.WrapHandler, behind the
// app's own auth group, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		e := echo.New()
		e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hi") },
			ratekitecho5.New(lim, ratekitecho5.Header(adaptertest.KeyHeader)))
		auth := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error {
				if c.Request().Header.Get("Authorization") != adaptertest.OperatorAuth {
					return c.NoContent(http.StatusUnauthorized)
				}
				return next(c)
			}
		}
		e.Group("/admin/ratekit", auth).Any("/*", echo.WrapHandler(ops))
		return adaptertest.Handler(e)
	})
}
