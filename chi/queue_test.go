package ratekitchi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
)

func TestWithQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, lim *core.Limiter, offer *queue.Offer) queuetest.Serve {
		all := func(*http.Request) (string, error) { return "all", nil }
		r := chi.NewRouter()
		r.Use(ratekitchi.New(lim, all, ratekitchi.WithQueue(offer)))
		r.Post("/orders", func(http.ResponseWriter, *http.Request) {})
		return func(req *http.Request) *http.Response {
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			return w.Result()
		}
	})
}
