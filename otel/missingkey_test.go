package ratekitotel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	ratekitotel "github.com/ratekit/ratekit/otel"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestMissingKey: requests answered 400 for a missing key, over HTTP
// through the net/http middleware, are recorded in ratekit.missing_key
// under the limiter's first limit, or "" for a plan limiter, and in no
// other instrument: no limit decided them.
func TestMissingKey(t *testing.T) {
	h := newHarness(t)
	m, err := ratekitotel.New(h.mp)
	require.NoError(t, err)
	quiet := slog.New(slog.DiscardHandler)
	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithObserver(m.Observe), core.WithLogger(quiet))
	require.NoError(t, err)
	plans, err := core.NewPlanLimiter(func(_ context.Context, tenant string) (core.Limit, error) {
		if tenant == "nobody" {
			return core.Limit{}, fmt.Errorf("no plan: %w", core.ErrMissingKey)
		}
		return core.Limit{Name: "free", Rate: core.PerMinute(10)}, nil
	}, core.WithObserver(m.Observe), core.WithLogger(quiet))
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/api", stdhttp.New(lim, keyfuncs.Header("X-Api-Key"), stdhttp.WithLogger(quiet))(ok))
	mux.Handle("/plan", stdhttp.New(plans, keyfuncs.Header("X-Tenant"), stdhttp.WithLogger(quiet))(ok))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	send := func(path, name, value string, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if name != "" {
			req.Header.Set(name, value)
		}
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, want, res.StatusCode, "%s %s=%q", path, name, value)
	}
	for range 3 {
		send("/api", "", "", http.StatusBadRequest)
	}
	send("/api", "X-Api-Key", "k1", http.StatusOK)
	send("/plan", "X-Tenant", "nobody", http.StatusBadRequest)
	send("/plan", "", "", http.StatusBadRequest)

	ms := h.collect()
	assert.Equal(t, int64(3), sum(t, ms, "ratekit.missing_key", attrs("limit", "api")))
	assert.Equal(t, int64(2), sum(t, ms, "ratekit.missing_key", attrs("limit", "")))
	assert.Equal(t, int64(1), total(t, ms, "ratekit.requests"), "the requests decided: only the admitted one")
	assert.Equal(t, int64(1), total(t, ms, "ratekit.decisions"))
}
