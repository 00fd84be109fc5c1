package ratekitchi_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

func rate(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

// TestRulesConformance: Rules answers the rules scenarios as
// stdhttp.Rules does, on the router's r.Use (before routing) and on each
// route's r.With (after).
func TestRulesConformance(t *testing.T) {
	t.Run("Use", func(t *testing.T) {
		adaptertest.RunRules(t, func(t *testing.T, e *rules.Engine) adaptertest.Serve {
			r := chi.NewRouter()
			r.Use(ratekitchi.Rules(e))
			r.Get("/", text("ok"))
			r.Post("/login", text("ok"))
			r.Get("/api/items", text("ok"))
			return adaptertest.Handler(r)
		})
	})
	t.Run("With", func(t *testing.T) {
		adaptertest.RunRules(t, func(t *testing.T, e *rules.Engine) adaptertest.Serve {
			r := chi.NewRouter()
			mw := ratekitchi.Rules(e)
			r.With(mw).Get("/", text("ok"))
			r.With(mw).Post("/login", text("ok"))
			r.With(mw).Get("/api/items", text("ok"))
			return adaptertest.Handler(r)
		})
	})
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
			e, _ := adaptertest.Engine(t, cfg)
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
			assert.Equal(t, "2", do(t, r, http.MethodGet, tc.prefix+"/items/1", "").remaining)
			assert.Equal(t, tc.remaining, do(t, r, http.MethodGet, tc.prefix+"/items/2", "").remaining)
			require.Len(t, keys, 2)
			assert.Equal(t, tc.key1, keys[0])
		})
	}
}

// TestRulesUser: key user reads the request context, where Chi apps keep
// per-request values.
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}},
		rules.WithUserKey(ctxKey{}))
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-Client"); u != "" {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	})
	r.Use(ratekitchi.Rules(e))
	r.Get("/", text("ok"))

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, do(t, r, http.MethodGet, "/", "alice").status, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "bob").status)
	res := do(t, r, http.MethodGet, "/", "")
	assert.Equal(t, http.StatusOK, res.status, "anonymous: no user, no rule")
	assert.Empty(t, res.header.Get(answer.HeaderLimit))
}

// TestRulesOptions: the skipper, cost, denied and error handlers of New
// serve Rules alike.
func TestRulesOptions(t *testing.T) {
	errBackend := errors.New("plan backend down")
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", RateLimit: rate("minute", 3)},
		{Key: "plan", RateLimit: rate("minute", 100)},
	}}
	e, _ := adaptertest.Engine(t, cfg, rules.WithKey("plan", func(r rules.Request) (string, error) {
		if r.Query("plan") == "broken" {
			return "", errBackend
		}
		return r.Query("plan"), nil
	}))
	var denied core.Decision
	var gotErr error
	served := 0
	r := chi.NewRouter()
	r.Use(ratekitchi.Rules(e, ratekitchi.WithLogger(quiet),
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
		res := do(t, r, http.MethodGet, "/health", "")
		assert.Equal(t, http.StatusOK, res.status)
		assert.Empty(t, res.header.Get(answer.HeaderLimit), "skipped: no headers")
	}
	assert.Equal(t, "1", do(t, r, http.MethodGet, "/?n=2", "").remaining, "cost 2 of 3; skipped requests did not count")
	res := do(t, r, http.MethodGet, "/?n=2", "")
	assert.Equal(t, http.StatusTeapot, res.status)
	assert.Equal(t, "slow down", res.body)
	assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter), "headers are set before the denied handler runs")
	assert.False(t, denied.Allowed)
	assert.Equal(t, 1, served)

	res = do(t, r, http.MethodGet, "/?n=0&plan=broken", "")
	assert.Equal(t, http.StatusServiceUnavailable, res.status)
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
		e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
		}})
		return ratekitchi.Rules(e)
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
