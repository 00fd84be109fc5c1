package ratekitecho_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho "github.com/ratekit/ratekit/echo"
)

// TestAdminMounted mounts the admin handler under echo.WrapHandler, behind
// the app's own auth group, and checks that it sees the full path: state,
// reset, grant and a wrong method all reach it and act on the limiter.
func TestAdminMounted(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0)) // stopped: the window never ends
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(slog.New(slog.DiscardHandler))))
	h, err := admin.New(map[string]*core.Limiter{"api": lim})
	require.NoError(t, err)

	e := echo.New()
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hi") },
		ratekitecho.New(lim, ratekitecho.Header("X-API-Key")))
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Header.Get("Authorization") != "Bearer ops" {
				return c.NoContent(http.StatusUnauthorized)
			}
			return next(c)
		}
	}
	g := e.Group("/admin/ratekit", auth)
	g.Any("/*", echo.WrapHandler(h))

	do := func(method, target, body string, bearer bool) (int, string) {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("X-API-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		if bearer {
			req.Header.Set("Authorization", "Bearer ops")
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code, w.Body.String()
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
