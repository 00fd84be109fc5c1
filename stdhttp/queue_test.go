package stdhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
	"github.com/ratekit/ratekit/stdhttp"
)

func TestWithQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, lim *core.Limiter, offer *queue.Offer) queuetest.Serve {
		all := func(*http.Request) (string, error) { return "all", nil }
		mux := http.NewServeMux()
		mux.HandleFunc("POST /orders", func(http.ResponseWriter, *http.Request) {})
		h := stdhttp.New(lim, all, stdhttp.WithQueue(offer))(mux)
		return func(r *http.Request) *http.Response {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Result()
		}
	})
}
