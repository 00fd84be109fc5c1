package readme

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The queue snippet builds its route and worker with Redis out of reach
// (NewQueue does not call Redis), and passes an order within the limit to
// the handler.
func TestQueueSnippets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the worker stops at once
	placed := 0
	place := idempotentOrder(func(string) bool { return false })
	err := queuedOrders(ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		placed++
		place(w, r)
	}), func(h http.Handler) error {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders", nil))
		if w.Code != http.StatusOK {
			t.Errorf("status %d", w.Code)
		}
		return nil
	})
	if err != nil || placed != 1 {
		t.Errorf("queuedOrders: %v, %d orders placed", err, placed)
	}
}
