package ratekitecho_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/rules"
)

func rate(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

// TestRulesConformance: Rules on e.Use answers the rules scenarios as
// stdhttp.Rules does.
func TestRulesConformance(t *testing.T) {
	adaptertest.RunRules(t, func(t *testing.T, eng *rules.Engine) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho.Rules(eng))
		e.GET("/", ok)
		e.POST("/login", ok)
		e.GET("/api/items", ok)
		return adaptertest.Handler(e)
	})
}

// TestRulesRoute: descriptor key route is the Echo route pattern, known to
// middleware on e.Use: /items/1 and /items/2 share a counter.
func TestRulesRoute(t *testing.T) {
	eng, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
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

	assert.Equal(t, "2", do(t, e, http.MethodGet, "/items/1", "").remaining)
	assert.Equal(t, "1", do(t, e, http.MethodGet, "/items/2", "").remaining)
	assert.Equal(t, []string{"GET /items/:id", "GET /items/:id"}, keys)
	res := do(t, e, http.MethodGet, "/nowhere/3", "")
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, "2", res.remaining, "no route: the path is the route, a counter of its own")
}

// TestRulesUser: key user reads what an upstream middleware stored with
// c.Set, and falls back to the request context.
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}}
	eng, _ := adaptertest.Engine(t, cfg, rules.WithUserKey("user"))
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if u := c.Request().Header.Get("X-Client"); u != "" {
				c.Set("user", u)
			}
			return next(c)
		}
	})
	e.Use(ratekitecho.Rules(eng))
	e.GET("/", ok)

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, do(t, e, http.MethodGet, "/", "alice").status, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "bob").status)
	res := do(t, e, http.MethodGet, "/", "")
	assert.Equal(t, http.StatusOK, res.status, "anonymous: no user, no rule")
	assert.Empty(t, res.header.Get(answer.HeaderLimit))

	// A key that is not a string is looked up in the request context.
	eng2, _ := adaptertest.Engine(t, cfg, rules.WithUserKey(ctxKey{}))
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
	res = do(t, e, http.MethodGet, "/", "")
	assert.Equal(t, "[42]", res.body)
	assert.Equal(t, "1", res.remaining)
}

// TestRulesOptions: the skipper, cost, denied and error handlers of New
// serve Rules alike.
func TestRulesOptions(t *testing.T) {
	errBackend := errors.New("plan backend down")
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", RateLimit: rate("minute", 3)},
		{Key: "plan", RateLimit: rate("minute", 100)},
	}}
	eng, _ := adaptertest.Engine(t, cfg, rules.WithKey("plan", func(r rules.Request) (string, error) {
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
		res := do(t, e, http.MethodGet, "/health", "")
		assert.Equal(t, http.StatusOK, res.status)
		assert.Empty(t, res.header.Get(answer.HeaderLimit), "skipped: no headers")
	}
	assert.Equal(t, "1", do(t, e, http.MethodGet, "/?n=2", "").remaining, "cost 2 of 3; skipped requests did not count")
	res := do(t, e, http.MethodGet, "/?n=2", "")
	assert.Equal(t, http.StatusTeapot, res.status)
	assert.Equal(t, "slow down", res.body)
	assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter), "headers are set before the denied handler runs")
	assert.False(t, denied.Allowed)
	assert.Equal(t, 1, served)

	res = do(t, e, http.MethodGet, "/?n=0&plan=broken", "")
	assert.Equal(t, http.StatusServiceUnavailable, res.status)
	assert.ErrorIs(t, gotErr, errBackend)
	assert.Equal(t, 1, served)
}

func TestRulesPanicsOnNil(t *testing.T) {
	assert.Panics(t, func() { ratekitecho.Rules(nil) })
}

// TestRulesAllocs measures the allowed path of Rules with one constant
// generic_key rule (not exhausted: about a thousand requests per count, in
// one second of a stopped clock) against Echo with a no-op middleware.
// Rules, like New, reuses its handler and so does not pay the closure
// that a no-op middleware costs Echo for every request (see TestAllocs);
// but the rules.Request of an echo.Context is two words (an interface),
// so handing it to the engine costs one small allocation: as many as the
// no-op middleware in all. Under the race detector, sync.Pool drops
// pooled values at random, so the test is skipped there.
func TestRulesAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	if raceEnabled {
		t.Skip("allocation counts: under the race detector, sync.Pool drops pooled values at random")
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
	eng, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
	}})
	withNoop := count(server(noop))
	withRules := count(server(ratekitecho.Rules(eng)))
	t.Logf("allocs/request: echo + no-op middleware %v, +ratekit Rules (generic_key) %v", withNoop, withRules)
	if withRules > withNoop {
		t.Errorf("ratekit Rules: %v allocs, echo with a no-op middleware %v", withRules, withNoop)
	}
}

// TestRulesDecisionInContext: Rules puts the decision of a request that
// rules matched where DecisionFrom reads it; a request that no rule
// matches has none.
func TestRulesDecisionInContext(t *testing.T) {
	eng, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "api", Match: &rules.Match{Path: "/api/*"}, RateLimit: rate("minute", 3)},
	}})
	var got []bool
	read := func(c echo.Context) error {
		d, ok := ratekitecho.DecisionFrom(c)
		got = append(got, ok)
		return c.String(http.StatusOK, strconv.Itoa(d.Remaining))
	}
	e := echo.New()
	e.Use(ratekitecho.Rules(eng, ratekitecho.WithDecisionInContext()))
	e.GET("/api/items", read)
	e.GET("/", read)

	assert.Equal(t, "2", do(t, e, http.MethodGet, "/api/items", "").body)
	assert.Equal(t, "0", do(t, e, http.MethodGet, "/", "").body)
	assert.Equal(t, []bool{true, false}, got)
}
