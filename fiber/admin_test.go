package ratekitfiber_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

// TestAdminMounted mounts the admin handler under Fiber's adaptor.HTTPHandler,
// behind the app's own auth group, and checks that it sees the full path: state,
// reset, grant and a wrong method all reach it and act on the limiter.
func TestAdminMounted(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0)) // stopped: the window never ends
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(slog.New(slog.DiscardHandler))))
	h, err := admin.New(map[string]*core.Limiter{"api": lim})
	require.NoError(t, err)

	app := fiber.New()
	app.Get("/hello", ratekitfiber.New(lim, ratekitfiber.Header("X-API-Key")), func(c *fiber.Ctx) error { return c.SendString("hi") })
	auth := func(c *fiber.Ctx) error {
		if c.Get("Authorization") != "Bearer ops" {
			return c.SendStatus(fiber.StatusUnauthorized)
		}
		return c.Next()
	}
	app.Group("/admin/ratekit", auth).All("/*", adaptor.HTTPHandler(h))

	do := func(method, target, body string, bearer bool) (int, string) {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("X-API-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		if bearer {
			req.Header.Set("Authorization", "Bearer ops")
		}
		res, err := app.Test(req, -1)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	hello := func(want ...int) {
		t.Helper()
		for _, code := range want {
			got, _ := do(http.MethodGet, "/hello", "", false)
			require.Equal(t, code, got)
		}
	}
	const state = "/admin/ratekit/state?limiter=api&key=k1"

	hello(200, 200, 429)
	code, _ := do(http.MethodGet, state, "", false)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, body := do(http.MethodGet, state, "", true)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"decision":{"name":"api","allowed":false,`)
	code, body = do(http.MethodPost, "/admin/ratekit/reset", `{"limiter":"api","key":"k1","reason":"test"}`, true)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"found":true`)
	hello(200, 200, 429)
	code, _ = do(http.MethodPost, "/admin/ratekit/grant", `{"limiter":"api","key":"k1","amount":1,"reason":"test"}`, true)
	assert.Equal(t, http.StatusOK, code)
	hello(200, 429)
	code, _ = do(http.MethodPut, "/admin/ratekit/reset", "", true)
	assert.Equal(t, http.StatusMethodNotAllowed, code)
}
