package ratekitchi_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
)

// TestAdminMounted: the admin handler under Chi's Mount, behind the app's
// own auth middleware, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		r := chi.NewRouter()
		r.With(ratekitchi.New(lim, ratekitchi.Header(adaptertest.KeyHeader))).
			Get("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") })
		auth := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.Header.Get("Authorization") != adaptertest.OperatorAuth {
					http.Error(w, "unauthorized", http.StatusUnauthorized)
					return
				}
				next.ServeHTTP(w, req)
			})
		}
		r.With(auth).Mount("/admin/ratekit", ops)
		return adaptertest.Handler(r)
	})
}
