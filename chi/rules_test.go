package ratekitchi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// newEngine returns an engine on a clocked memory store with cfg loaded.
func newEngine(t testing.TB, cfg rules.Config, opts ...rules.Option) *rules.Engine {
	t.Helper()
	store, err := core.NewMemoryStore(core.WithClock(storetest.NewClock(storetest.Epoch)))
	require.NoError(t, err)
	e, err := rules.NewEngine(append([]rules.Option{rules.WithStore(store)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, e.Load(cfg))
	return e
}

func rate(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

// loginConfig: 5 login attempts per minute per client address, on POST
// /login only.
func loginConfig() rules.Config {
	return rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{{
		Key:       "remote_address",
		Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
		RateLimit: rate("minute", 5),
	}}}
}

// send serves one request from peer 192.0.2.1, with headers given as
// name and value pairs.
func send(h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "192.0.2.1:4711"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestRulesLogin: the login example. Each response is also compared with
// stdhttp.Rules' on an engine of its own: status, body and header fields.
func TestRulesLogin(t *testing.T) {
	r := chi.NewRouter()
	r.Use(ratekitchi.Rules(newEngine(t, loginConfig())))
	r.Post("/login", text("ok"))
	r.Get("/", text("ok"))
	reference := stdhttp.Rules(newEngine(t, loginConfig()))(text("ok"))

	check := func(method, path string) *httptest.ResponseRecorder {
		t.Helper()
		got, want := send(r, method, path), send(reference, method, path)
		require.Equal(t, want.Code, got.Code)
		assert.Equal(t, want.Body.String(), got.Body.String())
		for _, f := range append(adaptertest.Fields, "Content-Type") {
			assert.Equal(t, want.Header().Values(f), got.Header().Values(f), "%s %s: header %s", method, path, f)
		}
		return got
	}
	for i := range 5 {
		w := check(http.MethodPost, "/login")
		require.Equal(t, http.StatusOK, w.Code, "attempt %d", i+1)
		assert.Equal(t, "5", w.Header().Get(core.HeaderLimit))
		assert.Equal(t, strconv.Itoa(4-i), w.Header().Get(core.HeaderRemaining))
	}
	w := check(http.MethodPost, "/login")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get(core.HeaderRetryAfter))
	assert.Equal(t, core.ProblemContentType, w.Header().Get("Content-Type"))
	assert.Contains(t, w.Body.String(), `"status":429`)

	w = check(http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, w.Code, "no rule applies to GET /")
	assert.Equal(t, "ok", w.Body.String())
	assert.Empty(t, w.Header().Get(core.HeaderLimit))
	assert.Empty(t, w.Header().Get(core.HeaderRemaining))
}

// TestRulesRoute: descriptor key route is the Chi route pattern for
// middleware mounted on a route (r.With) or a group (r.Group), where
// /items/1 and /items/2 share a counter. On the router's r.Use, before
// routing, it is the path; on r.Use inside r.Route, the mount pattern.
func TestRulesRoute(t *testing.T) {
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "route", RateLimit: rate("minute", 3)}}}
	for _, tc := range []struct {
		name      string
		mount     func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc)
		prefix    string
		key1      string // the key of the first request
		remaining string // after the second request
	}{
		{"With", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.With(mw).Get("/items/{id}", h)
		}, "", "GET /items/{id}", "1"},
		{"Group", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.Group(func(r chi.Router) {
				r.Use(mw)
				r.Get("/items/{id}", h)
			})
		}, "", "GET /items/{id}", "1"},
		{"Route-With", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.Route("/api", func(r chi.Router) { r.With(mw).Get("/items/{id}", h) })
		}, "/api", "GET /api/items/{id}", "1"},
		{"Use", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.Use(mw)
			r.Get("/items/{id}", h)
		}, "", "GET /items/1", "2"},
		{"Route-Use", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.Route("/api", func(r chi.Router) {
				r.Use(mw)
				r.Get("/items/{id}", h)
			})
		}, "/api", "GET /api/*", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, cfg)
			var keys []string
			// probe asks the engine, where the middleware runs, which key
			// it used.
			probe := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, ks, err := e.Matches(rules.HTTPRequest(r))
					require.NoError(t, err)
					keys = append(keys, ks...)
					next.ServeHTTP(w, r)
				})
			}
			mw := func(next http.Handler) http.Handler { return ratekitchi.Rules(e)(probe(next)) }
			r := chi.NewRouter()
			tc.mount(r, mw, text("item"))
			assert.Equal(t, "2", send(r, http.MethodGet, tc.prefix+"/items/1").Header().Get(core.HeaderRemaining))
			assert.Equal(t, tc.remaining, send(r, http.MethodGet, tc.prefix+"/items/2").Header().Get(core.HeaderRemaining))
			require.Len(t, keys, 2)
			assert.Equal(t, tc.key1, keys[0])
		})
	}
}

// TestRulesUser: key user reads the request context, where Chi apps keep
// per-request values.
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	e := newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}},
		rules.WithUserKey(ctxKey{}))
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-User"); u != "" {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	})
	r.Use(ratekitchi.Rules(e))
	r.Get("/", text("ok"))

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, send(r, http.MethodGet, "/", "X-User", "alice").Code, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, send(r, http.MethodGet, "/", "X-User", "bob").Code)
	w := send(r, http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, w.Code, "anonymous: no user, no rule")
	assert.Empty(t, w.Header().Get(core.HeaderLimit))
}

// TestRulesReload: a new limit takes effect on the next request, with the
// counts kept.
func TestRulesReload(t *testing.T) {
	e := newEngine(t, loginConfig())
	r := chi.NewRouter()
	r.Use(ratekitchi.Rules(e))
	r.Post("/login", text("ok"))
	for range 3 {
		require.Equal(t, http.StatusOK, send(r, http.MethodPost, "/login").Code)
	}
	raised := loginConfig()
	raised.Descriptors[0].RateLimit = rate("minute", 6)
	require.NoError(t, e.Load(raised))
	w := send(r, http.MethodPost, "/login")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "6", w.Header().Get(core.HeaderLimit))
	assert.Equal(t, "2", w.Header().Get(core.HeaderRemaining), "3 of 5 used, then 6: this is the 4th")
}

// TestRulesShadowAndSoft: shadow mode never rejects; soft throttling
// flags the admissions over the limit.
func TestRulesShadowAndSoft(t *testing.T) {
	shadow := loginConfig()
	shadow.Descriptors[0].ShadowMode = true
	r := chi.NewRouter()
	r.Use(ratekitchi.Rules(newEngine(t, shadow)))
	r.Post("/login", text("ok"))
	for i := range 8 {
		w := send(r, http.MethodPost, "/login")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i+1)
		assert.Equal(t, "5", w.Header().Get(core.HeaderLimit))
		assert.Empty(t, w.Header().Get(core.HeaderRetryAfter))
	}

	r = chi.NewRouter()
	r.Use(ratekitchi.Rules(newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 10, SoftPercent: 20}},
	}})))
	r.Get("/", text("ok"))
	for i := range 13 {
		w := send(r, http.MethodGet, "/")
		switch {
		case i < 10:
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Empty(t, w.Header().Get(core.HeaderSoft), "request %d", i+1)
		case i < 12:
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, "true", w.Header().Get(core.HeaderSoft), "request %d", i+1)
		default:
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
		}
	}
}

// TestRulesOptions: the skipper, cost, denied and error handlers of New
// serve Rules alike.
func TestRulesOptions(t *testing.T) {
	errBackend := errors.New("plan backend down")
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", RateLimit: rate("minute", 3)},
		{Key: "plan", RateLimit: rate("minute", 100)},
	}}
	e := newEngine(t, cfg, rules.WithKey("plan", func(r rules.Request) (string, error) {
		if r.Query("plan") == "broken" {
			return "", errBackend
		}
		return r.Query("plan"), nil
	}))
	var denied core.Decision
	var gotErr error
	served := 0
	r := chi.NewRouter()
	r.Use(ratekitchi.Rules(e,
		ratekitchi.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/health" }),
		ratekitchi.WithCost(func(r *http.Request) int {
			n, err := strconv.Atoi(r.URL.Query().Get("n"))
			if err != nil {
				return 1
			}
			return n
		}),
		ratekitchi.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			denied = d
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte("slow down"))
		}),
		ratekitchi.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			gotErr = err
			w.WriteHeader(http.StatusServiceUnavailable)
		})))
	r.Get("/health", text("up"))
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { served++; text("ok")(w, r) })

	for range 3 {
		w := send(r, http.MethodGet, "/health")
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Get(core.HeaderLimit), "skipped: no headers")
	}
	assert.Equal(t, "1", send(r, http.MethodGet, "/?n=2").Header().Get(core.HeaderRemaining), "cost 2 of 3; skipped requests did not count")
	w := send(r, http.MethodGet, "/?n=2")
	assert.Equal(t, http.StatusTeapot, w.Code)
	assert.Equal(t, "slow down", w.Body.String())
	assert.Equal(t, "60", w.Header().Get(core.HeaderRetryAfter), "headers are set before the denied handler runs")
	assert.False(t, denied.Allowed)
	assert.Equal(t, 1, served)

	w = send(r, http.MethodGet, "/?n=0&plan=broken")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorIs(t, gotErr, errBackend)
	assert.Equal(t, 1, served)
}

func TestRulesPanicsOnNil(t *testing.T) {
	assert.Panics(t, func() { ratekitchi.Rules(nil) })
}

// TestRulesAllocs: on the allowed path, Rules with a constant generic_key
// rule (not exhausted: about a thousand requests per count, in one second
// of a stopped clock) allocates nothing: Chi with it allocates what Chi
// alone does, on r.Use and on r.With alike. Under the race detector,
// sync.Pool drops pooled values at random, so the counts are only logged
// there.
func TestRulesAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	count := func(serve func() int) float64 {
		t.Helper()
		if c := serve(); c != http.StatusOK {
			t.Fatalf("status %d", c)
		}
		n := testing.AllocsPerRun(1000, func() { serve() })
		if c := serve(); c != http.StatusOK {
			t.Fatalf("status %d: the count must stay on the allowed path", c)
		}
		return n
	}
	constant := func() func(http.Handler) http.Handler {
		return ratekitchi.Rules(newEngine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
		}}))
	}
	alone := count(router(nil, nil))
	withUse := count(router(constant(), nil))
	withWith := count(router(nil, constant()))
	t.Logf("allocs/request: chi %v, +ratekit Rules (generic_key) on r.Use %v, on r.With %v", alone, withUse, withWith)
	if raceEnabled {
		return
	}
	if withUse != alone || withWith != alone {
		t.Errorf("ratekit Rules: %v allocs on r.Use, %v on r.With, chi alone %v", withUse, withWith, alone)
	}
}
