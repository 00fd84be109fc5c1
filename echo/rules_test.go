package ratekitecho_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho "github.com/ratekit/ratekit/echo"
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
	eng := newEngine(t, loginConfig())
	e := echo.New()
	e.Use(ratekitecho.Rules(eng))
	e.POST("/login", ok)
	e.GET("/", ok)
	reference := stdhttp.Rules(newEngine(t, loginConfig()))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte("ok"))
	}))

	check := func(method, path string) *httptest.ResponseRecorder {
		t.Helper()
		got, want := send(e, method, path), send(reference, method, path)
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

// TestRulesRoute: descriptor key route is the Echo route pattern, known to
// middleware on e.Use: /items/1 and /items/2 share a counter.
func TestRulesRoute(t *testing.T) {
	eng := newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", RateLimit: rate("minute", 3)},
	}})
	var keys []string
	e := echo.New()
	e.Use(ratekitecho.Rules(eng))
	e.GET("/items/:id", func(c echo.Context) error {
		_, ks, err := eng.Matches(ratekitecho.RulesRequest(c))
		require.NoError(t, err)
		keys = append(keys, ks...)
		return c.String(http.StatusOK, "item")
	})

	assert.Equal(t, "2", send(e, http.MethodGet, "/items/1").Header().Get(core.HeaderRemaining))
	assert.Equal(t, "1", send(e, http.MethodGet, "/items/2").Header().Get(core.HeaderRemaining))
	assert.Equal(t, []string{"GET /items/:id", "GET /items/:id"}, keys)
	w := send(e, http.MethodGet, "/nowhere/3")
	assert.Equal(t, http.StatusNotFound, w.Code)
	assert.Equal(t, "2", w.Header().Get(core.HeaderRemaining), "no route: the path is the route, a counter of its own")
}

// TestRulesUser: key user reads what an upstream middleware stored with
// c.Set, and falls back to the request context.
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}}
	eng := newEngine(t, cfg, rules.WithUserKey("user"))
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if u := c.Request().Header.Get("X-User"); u != "" {
				c.Set("user", u)
			}
			return next(c)
		}
	})
	e.Use(ratekitecho.Rules(eng))
	e.GET("/", ok)

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, send(e, http.MethodGet, "/", "X-User", "alice").Code, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, send(e, http.MethodGet, "/", "X-User", "bob").Code)
	w := send(e, http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, w.Code, "anonymous: no user, no rule")
	assert.Empty(t, w.Header().Get(core.HeaderLimit))

	// A key that is not a string is looked up in the request context.
	eng2 := newEngine(t, cfg, rules.WithUserKey(ctxKey{}))
	e = echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), ctxKey{}, 42)))
			return next(c)
		}
	})
	e.Use(ratekitecho.Rules(eng2))
	e.GET("/", func(c echo.Context) error {
		_, keys, err := eng2.Matches(ratekitecho.RulesRequest(c))
		require.NoError(t, err)
		return c.String(http.StatusOK, fmt.Sprint(keys))
	})
	w = send(e, http.MethodGet, "/")
	assert.Equal(t, "[42]", w.Body.String())
	assert.Equal(t, "1", w.Header().Get(core.HeaderRemaining))
}

// TestRulesReload: a new limit takes effect on the next request, with the
// counts kept.
func TestRulesReload(t *testing.T) {
	eng := newEngine(t, loginConfig())
	e := echo.New()
	e.Use(ratekitecho.Rules(eng))
	e.POST("/login", ok)
	for range 3 {
		require.Equal(t, http.StatusOK, send(e, http.MethodPost, "/login").Code)
	}
	raised := loginConfig()
	raised.Descriptors[0].RateLimit = rate("minute", 6)
	require.NoError(t, eng.Load(raised))
	w := send(e, http.MethodPost, "/login")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "6", w.Header().Get(core.HeaderLimit))
	assert.Equal(t, "2", w.Header().Get(core.HeaderRemaining), "3 of 5 used, then 6: this is the 4th")
}

// TestRulesShadowAndSoft: shadow mode never rejects; soft throttling
// flags the admissions over the limit.
func TestRulesShadowAndSoft(t *testing.T) {
	shadow := loginConfig()
	shadow.Descriptors[0].ShadowMode = true
	e := echo.New()
	e.Use(ratekitecho.Rules(newEngine(t, shadow)))
	e.POST("/login", ok)
	for i := range 8 {
		w := send(e, http.MethodPost, "/login")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i+1)
		assert.Equal(t, "5", w.Header().Get(core.HeaderLimit))
		assert.Empty(t, w.Header().Get(core.HeaderRetryAfter))
	}

	e = echo.New()
	e.Use(ratekitecho.Rules(newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 10, SoftPercent: 20}},
	}})))
	e.GET("/", ok)
	for i := range 13 {
		w := send(e, http.MethodGet, "/")
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
	eng := newEngine(t, cfg, rules.WithKey("plan", func(r rules.Request) (string, error) {
		if r.Query("plan") == "broken" {
			return "", errBackend
		}
		return r.Query("plan"), nil
	}))
	var denied core.Decision
	var gotErr error
	served := 0
	e := echo.New()
	e.Use(ratekitecho.Rules(eng,
		ratekitecho.WithSkipper(func(c echo.Context) bool { return c.Path() == "/health" }),
		ratekitecho.WithCost(func(c echo.Context) int {
			n, err := strconv.Atoi(c.QueryParam("n"))
			if err != nil {
				return 1
			}
			return n
		}),
		ratekitecho.WithDeniedHandler(func(c echo.Context, d core.Decision) error {
			denied = d
			return c.String(http.StatusTeapot, "slow down")
		}),
		ratekitecho.WithErrorHandler(func(c echo.Context, err error) error {
			gotErr = err
			return c.String(http.StatusServiceUnavailable, "later")
		})))
	e.GET("/health", ok)
	e.GET("/", func(c echo.Context) error { served++; return ok(c) })

	for range 3 {
		w := send(e, http.MethodGet, "/health")
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Get(core.HeaderLimit), "skipped: no headers")
	}
	assert.Equal(t, "1", send(e, http.MethodGet, "/?n=2").Header().Get(core.HeaderRemaining), "cost 2 of 3; skipped requests did not count")
	w := send(e, http.MethodGet, "/?n=2")
	assert.Equal(t, http.StatusTeapot, w.Code)
	assert.Equal(t, "slow down", w.Body.String())
	assert.Equal(t, "60", w.Header().Get(core.HeaderRetryAfter), "headers are set before the denied handler runs")
	assert.False(t, denied.Allowed)
	assert.Equal(t, 1, served)

	w = send(e, http.MethodGet, "/?n=0&plan=broken")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorIs(t, gotErr, errBackend)
	assert.Equal(t, 1, served)
}

func TestRulesPanicsOnNil(t *testing.T) {
	assert.Panics(t, func() { ratekitecho.Rules(nil) })
}

// TestRulesAllocs measures the allowed path of Rules with one constant
// generic_key rule (not exhausted: about a thousand requests per count, in
// one second of a stopped clock) against Echo with a no-op middleware, the
// baseline of TestAllocs. The rules.Request of an echo.Context is two
// words (an interface), so handing it to the engine costs one small
// allocation, which the test allows and logs. Under the race detector,
// sync.Pool drops pooled values at random, so the counts are only logged
// there.
func TestRulesAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	count := func(serve func() int) float64 {
		t.Helper()
		if s := serve(); s != http.StatusOK {
			t.Fatalf("status %d", s)
		}
		n := testing.AllocsPerRun(1000, func() { serve() })
		if s := serve(); s != http.StatusOK {
			t.Fatalf("status %d: the count must stay on the allowed path", s)
		}
		return n
	}
	withNoop := count(server(noop))
	withRules := count(server(ratekitecho.Rules(newEngine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
	}}))))
	t.Logf("allocs/request: echo + no-op middleware %v, +ratekit Rules (generic_key) %v", withNoop, withRules)
	if raceEnabled {
		return
	}
	if withRules > withNoop+1 {
		t.Errorf("ratekit Rules: %v allocs, echo with a no-op middleware %v", withRules, withNoop)
	}
}
