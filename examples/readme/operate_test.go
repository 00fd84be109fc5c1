package readme

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
)

// The plans snippet: a paying user's headers say 1000, a free user's 100.
func TestPlansSnippet(t *testing.T) {
	r, _ := plansServer(accounts{"alice": true})
	for user, limit := range map[string]string{"alice": "1000", "bob": "100"} {
		req := httptest.NewRequest(http.MethodGet, "/api/items", nil)
		req.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, limit, w.Header().Get("X-Ratelimit-Limit"), user)
	}
}

// The admin snippet: behind the bearer token, a reset unblocks a client.
func TestAdminSnippet(t *testing.T) {
	ctx := context.Background()
	api := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerHour(1)}))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Rate: core.PerMinute(5)}))
	mux, err := adminMux(api, login, "s3cret")
	require.NoError(t, err)
	_, err = api.Take(ctx, "203.0.113.7", 1)
	require.NoError(t, err)

	post := func(auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/admin/ratekit/reset",
			strings.NewReader(`{"limiter":"api","key":"203.0.113.7","reason":"ticket 4711"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w
	}
	require.Equal(t, http.StatusUnauthorized, post("Bearer wrong").Code)
	w := post("Bearer s3cret")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"found":true`)
	d, err := api.Take(ctx, "203.0.113.7", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}
