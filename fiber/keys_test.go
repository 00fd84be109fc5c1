package ratekitfiber_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

// TestClientIPAfterStart: Fiber fixes its proxy settings in fiber.New
// (app.Config() is a copy, and the trusted proxies are parsed into the
// app's own tables), so what ClientIP checked holds for the app's life.
// The one part of the config that the app still shares with its caller,
// the TrustedProxies slice, overwritten with 0.0.0.0/0 after ClientIP
// checked the app, changes nothing Fiber reads: at a limit of 3, 20
// requests over a connection from a peer that is no proxy, each forging
// another address in X-Real-IP, X-Forwarded-For and CF-Connecting-IP, get
// 3 through.
func TestClientIPAfterStart(t *testing.T) {
	cfg := fiber.Config{ProxyHeader: "X-Real-IP", EnableTrustedProxyCheck: true, TrustedProxies: []string{"10.0.0.2"}, EnableIPValidation: true}
	app := fiber.New(cfg)
	key, err := ratekitfiber.ClientIP(app)
	require.NoError(t, err)
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	app.Use(ratekitfiber.New(lim, key))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

	cfg.TrustedProxies[0] = "0.0.0.0/0"
	require.Equal(t, "0.0.0.0/0", app.Config().TrustedProxies[0], "the app's config shares the slice")
	s, got := serve(t, app), map[int]int{}
	for i := range 20 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		ip := "198.51.100." + strconv.Itoa(i+1)
		for _, h := range []string{"X-Real-IP", "X-Forwarded-For", "CF-Connecting-IP"} {
			r.Header.Set(h, ip)
		}
		res := s(r)
		_ = res.Body.Close()
		got[res.StatusCode]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 17}, got)
}
