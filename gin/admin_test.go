package ratekitgin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	ratekitgin "github.com/ratekit/ratekit/gin"
)

// TestAdminMounted: the admin handler under gin.WrapH, behind the app's
// own auth group, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		r := gin.New()
		r.GET("/hello", ratekitgin.New(lim, ratekitgin.Header(adaptertest.KeyHeader)), func(c *gin.Context) { c.String(http.StatusOK, "hi") })
		auth := func(c *gin.Context) {
			if c.GetHeader("Authorization") != adaptertest.OperatorAuth {
				c.AbortWithStatus(http.StatusUnauthorized)
			}
		}
		r.Group("/admin/ratekit", auth).Any("/*op", gin.WrapH(ops))
		return adaptertest.Handler(r)
	})
}
