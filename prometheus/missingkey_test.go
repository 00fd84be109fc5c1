package ratekitprom_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestMissingKeyScraped: requests answered 400 for a missing key, over
// HTTP through the net/http middleware, are counted, and read back by a
// scrape of the registry's /metrics endpoint: ratekit_missing_key_total
// of the limiter's first limit, for a key function that found no header
// (absent or blank); of limit "" for a plan limiter, whose plan function
// found no plan (an error wrapping core.ErrMissingKey) or whose key
// function found nothing. They are not requests decided: the requests
// total holds only the requests a limit decided.
func TestMissingKeyScraped(t *testing.T) {
	m, err := ratekitprom.New()
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	quiet := slog.New(slog.DiscardHandler)

	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithLimit(core.Limit{Name: "api-daily", Algorithm: core.FixedWindow, Rate: core.PerHour(100)}),
		core.WithObserver(m.Observe), core.WithLogger(quiet))
	require.NoError(t, err)
	plans, err := core.NewPlanLimiter(func(_ context.Context, tenant string) (core.Limit, error) {
		if tenant == "nobody" {
			return core.Limit{}, fmt.Errorf("no plan for the tenant: %w", core.ErrMissingKey)
		}
		return core.Limit{Name: "free", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}, nil
	}, core.WithObserver(m.Observe), core.WithLogger(quiet))
	require.NoError(t, err)

	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/api", stdhttp.New(lim, keyfuncs.Header("X-Api-Key"), stdhttp.WithLogger(quiet))(ok))
	mux.Handle("/plan", stdhttp.New(plans, keyfuncs.Header("X-Tenant"), stdhttp.WithLogger(quiet))(ok))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, want, res.StatusCode, "%s %s=%q", path, name, value)
	}
	for range 3 {
		send("/api", "", "", http.StatusBadRequest) // no header
	}
	send("/api", "X-Api-Key", "   ", http.StatusBadRequest) // blank
	send("/api", "X-Api-Key", "k1", http.StatusOK)
	send("/plan", "X-Tenant", "nobody", http.StatusBadRequest) // no plan
	send("/plan", "X-Tenant", "nobody", http.StatusBadRequest)
	send("/plan", "", "", http.StatusBadRequest) // no header
	send("/plan", "X-Tenant", "acme", http.StatusOK)

	res, err := srv.Client().Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	scrape := string(body)
	for _, line := range []string{
		`ratekit_missing_key_total{limit="api"} 4`,
		`ratekit_missing_key_total{limit=""} 3`,
		`ratekit_missing_key_total{limit="api-daily"} 0`, // its series from its first event, at zero
		`ratekit_requests_total{decision="allowed",limit="api"} 1`,
		`ratekit_requests_total{decision="allowed",limit="free"} 1`,
		`ratekit_decisions_total{decision="allowed",limit="api"} 1`,
	} {
		assert.Contains(t, scrape, line+"\n")
	}
	assert.Contains(t, scrape, "# TYPE ratekit_missing_key_total counter")
	total := 0.0
	for _, line := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(line, "ratekit_requests_total{") {
			var v float64
			_, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			require.NoError(t, err)
			total += v
		}
	}
	assert.Equal(t, 2.0, total, "requests decided: the two admitted, not the 400s")
}
