package ratekitgin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitgin "github.com/ratekit/ratekit/gin"
)

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c *gin.Context) (string, error) { return s.Key(c.GetHeader(adaptertest.KeyHeader)) }
		r := gin.New()
		r.Use(gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
		r.Use(ratekitgin.Concurrency(s.Limiter, key))
		r.GET("/", func(c *gin.Context) { s.Handle(); c.String(http.StatusOK, "ok") })
		return adaptertest.Handler(r)
	})
	assert.Panics(t, func() { ratekitgin.Concurrency(nil, ratekitgin.PeerIP) })
}
