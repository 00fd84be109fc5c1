package stdhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

func newEngine(t *testing.T, cfg rules.Config, opts ...rules.Option) (*rules.Engine, *storetest.Clock) {
	t.Helper()
	clock := newClock()
	e, err := rules.NewEngine(append([]rules.Option{rules.WithStore(newStore(clock))}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, e.Load(cfg))
	return e, clock
}

// Rules answers as New does: headers, 429 problem body, handlers,
// skipper, cost; an unmatched request passes bare; a descriptor key's
// failure goes to the error handler.
func TestRules(t *testing.T) {
	e, clock := newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Path: "/api/*"}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "plan", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 100}},
	}}, rules.WithKey("plan", func(r rules.Request) (string, error) {
		if r.Values("X-Plan") != nil {
			return "", errors.New("plan service down")
		}
		return "", nil
	}))
	next := &okHandler{}
	h := stdhttp.Rules(e, stdhttp.WithLogger(quiet))(next)

	for i := 1; i <= 3; i++ {
		w := get(h, "/api/items", "192.0.2.1")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "3", w.Header().Get(answer.HeaderLimit))
	}
	w := get(h, "/api/items", "192.0.2.1")
	p := requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, "api/remote_address@/api/*", p.Limit)
	assert.Equal(t, "60", w.Header().Get(answer.HeaderRetryAfter))
	assert.Equal(t, int64(3), next.calls.Load())

	w = get(h, "/other", "192.0.2.1")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, w.Header().Get(answer.HeaderLimit), "no rule, no headers")

	// Handlers and skipper.
	var denied core.Decision
	var failed error
	h = stdhttp.Rules(e, stdhttp.WithLogger(quiet),
		stdhttp.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/api/health" }),
		stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			denied = d
			w.WriteHeader(http.StatusTeapot)
		}),
		stdhttp.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			failed = err
			w.WriteHeader(http.StatusServiceUnavailable)
		}),
	)(next)
	assert.Equal(t, http.StatusOK, get(h, "/api/health", "192.0.2.1").Code)
	assert.Equal(t, http.StatusTeapot, get(h, "/api/items", "192.0.2.1").Code)
	assert.Equal(t, 3, denied.Quota)
	r := httptest.NewRequest("GET", "/other", nil)
	r.Header.Set("X-Plan", "x")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorContains(t, failed, "plan service down")

	// Cost.
	clock.Advance(time.Minute)
	h = stdhttp.Rules(e, stdhttp.WithCost(func(*http.Request) int { return 2 }))(next)
	assert.Equal(t, "1", get(h, "/api/x", "192.0.2.1").Header().Get(answer.HeaderRemaining))
	assert.Equal(t, http.StatusTooManyRequests, get(h, "/api/x", "192.0.2.1").Code)

	assert.Panics(t, func() { stdhttp.Rules(nil) })
}

// A rules file's remote_address refuses a peer address without a port, as
// chi's middleware.RealIP leaves it when mounted before the limiter: each
// forged X-Real-IP would otherwise be a fresh client.
func TestRulesRemoteAddressRefusesRewrittenPeer(t *testing.T) {
	e, _ := newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
	}})
	h := stdhttp.Rules(e, stdhttp.WithLogger(quiet))(&okHandler{})
	for i := range 6 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "198.51.100." + string(rune('1'+i)) // what RealIP writes
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, http.StatusInternalServerError, w.Code, "request %d", i+1)
	}
}
