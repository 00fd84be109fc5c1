package ratekitchi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/admin"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// TestAdminMounted mounts the admin handler with Chi's Mount, behind the
// app's own auth middleware, and checks that it sees the full path: state,
// reset, grant and a wrong method all reach it and act on the limiter.
func TestAdminMounted(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0)) // stopped: the window never ends
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(slog.New(slog.DiscardHandler))))
	h, err := admin.New(map[string]*core.Limiter{"api": lim})
	require.NoError(t, err)

	r := chi.NewRouter()
	r.With(ratekitchi.New(lim, ratekitchi.Header("X-API-Key"))).
		Get("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") })
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Header.Get("Authorization") != "Bearer ops" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, req)
		})
	}
	r.With(auth).Mount("/admin/ratekit", h)

	do := func(method, target, body string, bearer bool) (int, string) {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("X-API-Key", "k1")
		req.Header.Set("Content-Type", "application/json")
		if bearer {
			req.Header.Set("Authorization", "Bearer ops")
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
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
