package ratekitgin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
)

func TestWithQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, lim *core.Limiter, offer *queue.Offer) queuetest.Serve {
		all := func(*gin.Context) (string, error) { return "all", nil }
		r := gin.New()
		r.Use(ratekitgin.New(lim, all, ratekitgin.WithQueue(offer)))
		r.POST("/orders", func(c *gin.Context) { c.Status(http.StatusOK) })
		return func(req *http.Request) *http.Response {
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			return w.Result()
		}
	})
}
