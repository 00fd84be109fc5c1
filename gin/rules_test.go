package ratekitgin_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/rules"
)

func rate(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

func okHandler(c *gin.Context) { c.String(http.StatusOK, "ok") }

// TestRulesConformance: Rules on r.Use answers the rules scenarios as
// stdhttp.Rules does.
func TestRulesConformance(t *testing.T) {
	adaptertest.RunRules(t, func(t *testing.T, e *rules.Engine) adaptertest.Serve {
		r := gin.New()
		r.Use(ratekitgin.Rules(e))
		r.GET("/", okHandler)
		r.POST("/login", okHandler)
		r.GET("/api/items", okHandler)
		return adaptertest.Handler(r)
	})
}

// TestRulesRoute: descriptor key route is the Gin route pattern, known to
// middleware on r.Use: /items/1 and /items/2 share a counter.
func TestRulesRoute(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
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

	assert.Equal(t, "2", do(t, r, http.MethodGet, "/items/1", "").remaining)
	assert.Equal(t, "1", do(t, r, http.MethodGet, "/items/2", "").remaining)
	assert.Equal(t, []string{"GET /items/:id", "GET /items/:id"}, keys)
	res := do(t, r, http.MethodGet, "/nowhere/3", "")
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, "2", res.remaining, "no route: the path is the route, a counter of its own")
}

// TestRulesUser: key user reads what an upstream middleware stored with
// c.Set, and falls back to the request context.
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}}
	e, _ := adaptertest.Engine(t, cfg, rules.WithUserKey("user"))
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-Client"); u != "" {
			c.Set("user", u)
		}
		c.Next()
	})
	r.Use(ratekitgin.Rules(e))
	r.GET("/", okHandler)

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, do(t, r, http.MethodGet, "/", "alice").status, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "bob").status)
	res := do(t, r, http.MethodGet, "/", "")
	assert.Equal(t, http.StatusOK, res.status, "anonymous: no user, no rule")
	assert.Empty(t, res.header.Get(answer.HeaderLimit))

	// A key that is not in c.Keys is looked up in the request context.
	e2, _ := adaptertest.Engine(t, cfg, rules.WithUserKey(ctxKey{}))
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
	res = do(t, r, http.MethodGet, "/", "")
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
	e, _ := adaptertest.Engine(t, cfg, rules.WithKey("plan", func(r rules.Request) (string, error) {
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
	assert.Panics(t, func() { ratekitgin.Rules(nil) })
}

// TestRulesAllocs: on the allowed path, Rules with a constant generic_key
// rule (not exhausted: about a thousand requests per count, in one second
// of a stopped clock) allocates nothing either: Gin with it allocates what
// Gin alone does. (Skipped under the race detector, as TestAllocs is.)
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
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
	}})
	alone := count(engine(nil))
	withRules := count(engine(ratekitgin.Rules(e)))
	t.Logf("allocs/request: gin %v, +ratekit Rules (generic_key) %v", alone, withRules)
	if withRules != alone {
		t.Errorf("ratekit Rules: %v allocs, gin alone %v", withRules, alone)
	}
}

// TestRulesDecisionInContext: Rules puts the decision of a request that
// rules matched where DecisionFrom reads it; a request that no rule
// matches has none.
func TestRulesDecisionInContext(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "api", Match: &rules.Match{Path: "/api/*"}, RateLimit: rate("minute", 3)},
	}})
	var got []bool
	read := func(c *gin.Context) {
		d, ok := ratekitgin.DecisionFrom(c)
		got = append(got, ok)
		c.String(http.StatusOK, "%d", d.Remaining)
	}
	r := gin.New()
	r.Use(ratekitgin.Rules(e, ratekitgin.WithDecisionInContext()))
	r.GET("/api/items", read)
	r.GET("/", read)

	assert.Equal(t, "2", do(t, r, http.MethodGet, "/api/items", "").body)
	assert.Equal(t, "0", do(t, r, http.MethodGet, "/", "").body)
	assert.Equal(t, []bool{true, false}, got)
}
