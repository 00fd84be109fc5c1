package ratekitgin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgin "github.com/ratekit/ratekit/gin"
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

func okHandler(c *gin.Context) { c.String(http.StatusOK, "ok") }

// TestRulesLogin: the login example. Each response is also compared with
// stdhttp.Rules' on an engine of its own: status, body and header fields.
func TestRulesLogin(t *testing.T) {
	e := newEngine(t, loginConfig())
	r := gin.New()
	r.Use(ratekitgin.Rules(e))
	r.POST("/login", okHandler)
	r.GET("/", okHandler)
	ref := newEngine(t, loginConfig())
	reference := stdhttp.Rules(ref)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	}))

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

// TestRulesRoute: descriptor key route is the Gin route pattern, known to
// middleware on r.Use: /items/1 and /items/2 share a counter.
func TestRulesRoute(t *testing.T) {
	e := newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", RateLimit: rate("minute", 3)},
	}})
	var keys []string
	r := gin.New()
	r.Use(ratekitgin.Rules(e))
	r.GET("/items/:id", func(c *gin.Context) {
		_, ks, err := e.Matches(ratekitgin.RulesRequest(c))
		require.NoError(t, err)
		keys = append(keys, ks...)
		c.String(http.StatusOK, "item")
	})

	assert.Equal(t, "2", send(r, http.MethodGet, "/items/1").Header().Get(core.HeaderRemaining))
	assert.Equal(t, "1", send(r, http.MethodGet, "/items/2").Header().Get(core.HeaderRemaining))
	assert.Equal(t, []string{"GET /items/:id", "GET /items/:id"}, keys)
	w := send(r, http.MethodGet, "/nowhere/3")
	assert.Equal(t, http.StatusNotFound, w.Code)
	assert.Equal(t, "2", w.Header().Get(core.HeaderRemaining), "no route: the path is the route, a counter of its own")
}

// TestRulesUser: key user reads what an upstream middleware stored with
// c.Set, and falls back to the request context.
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}}
	e := newEngine(t, cfg, rules.WithUserKey("user"))
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u)
		}
		c.Next()
	})
	r.Use(ratekitgin.Rules(e))
	r.GET("/", okHandler)

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, send(r, http.MethodGet, "/", "X-User", "alice").Code, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, send(r, http.MethodGet, "/", "X-User", "bob").Code)
	w := send(r, http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, w.Code, "anonymous: no user, no rule")
	assert.Empty(t, w.Header().Get(core.HeaderLimit))

	// A key that is not in c.Keys is looked up in the request context.
	e2 := newEngine(t, cfg, rules.WithUserKey(ctxKey{}))
	r = gin.New()
	r.Use(func(c *gin.Context) {
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), ctxKey{}, 42))
		c.Next()
	})
	r.Use(ratekitgin.Rules(e2))
	r.GET("/", func(c *gin.Context) {
		_, keys, err := e2.Matches(ratekitgin.RulesRequest(c))
		require.NoError(t, err)
		c.String(http.StatusOK, "%v", keys)
	})
	w = send(r, http.MethodGet, "/")
	assert.Equal(t, "[42]", w.Body.String())
	assert.Equal(t, "1", w.Header().Get(core.HeaderRemaining))
}

// TestRulesReload: a new limit takes effect on the next request, with the
// counts kept.
func TestRulesReload(t *testing.T) {
	e := newEngine(t, loginConfig())
	r := gin.New()
	r.Use(ratekitgin.Rules(e))
	r.POST("/login", okHandler)
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
	e := newEngine(t, shadow)
	r := gin.New()
	r.Use(ratekitgin.Rules(e))
	r.POST("/login", okHandler)
	for i := range 8 {
		w := send(r, http.MethodPost, "/login")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i+1)
		assert.Equal(t, "5", w.Header().Get(core.HeaderLimit))
		assert.Empty(t, w.Header().Get(core.HeaderRetryAfter))
	}

	e = newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 10, SoftPercent: 20}},
	}})
	r = gin.New()
	r.Use(ratekitgin.Rules(e))
	r.GET("/", okHandler)
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
	r := gin.New()
	r.Use(ratekitgin.Rules(e,
		ratekitgin.WithSkipper(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" }),
		ratekitgin.WithCost(func(c *gin.Context) int { n, _ := strconv.Atoi(c.DefaultQuery("n", "1")); return n }),
		ratekitgin.WithDeniedHandler(func(c *gin.Context, d core.Decision) {
			denied = d
			c.String(http.StatusTeapot, "slow down")
		}),
		ratekitgin.WithErrorHandler(func(c *gin.Context, err error) {
			gotErr = err
			c.String(http.StatusServiceUnavailable, "later")
		})))
	r.GET("/health", okHandler)
	r.GET("/", func(c *gin.Context) { served++; okHandler(c) })

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
	assert.Panics(t, func() { ratekitgin.Rules(nil) })
}

// constantRules is an engine with one generic_key rule that the
// allocation test does not exhaust (it serves about a thousand requests
// per count, in one second of a stopped clock).
func constantRules(t testing.TB) *rules.Engine {
	e := newEngine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
	}})
	return e
}

// TestRulesAllocs: on the allowed path, Rules with a constant rule
// allocates nothing either: Gin with it allocates what Gin alone does.
// (Only logged under the race detector, as for TestAllocs.)
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
	alone := count(engine(nil))
	withRules := count(engine(ratekitgin.Rules(constantRules(t))))
	t.Logf("allocs/request: gin %v, +ratekit Rules (generic_key) %v", alone, withRules)
	if raceEnabled {
		return
	}
	if withRules != alone {
		t.Errorf("ratekit Rules: %v allocs, gin alone %v", withRules, alone)
	}
}
