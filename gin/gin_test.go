package ratekitgin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/rules"
)

// TestMain keeps Gin's debug output (route listings, warnings) out of the
// test output and out of the examples' checked output.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// mount builds Gin's middleware as s says (see adaptertest.ScenarioMount).
func mount(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
	var key ratekitgin.Key // a nil s.Key stays nil: New must panic
	switch s.By {
	case adaptertest.ByKey:
		if s.Key != nil {
			key = func(c *gin.Context) (string, error) { return s.Key(c.GetHeader(adaptertest.KeyHeader)) }
		}
	case adaptertest.ByPeerIP:
		key = ratekitgin.PeerIP
	case adaptertest.ByIP:
		var err error
		key, err = ratekitgin.IP(s.IPOptions...)
		require.NoError(t, err)
	case adaptertest.ByHeader:
		key = ratekitgin.Header(adaptertest.KeyHeader)
	case adaptertest.ByUser:
		key = ratekitgin.User(adaptertest.UserKey)
	}
	opts := []ratekitgin.Option{ratekitgin.WithHeaders(s.Headers), ratekitgin.WithLogger(s.Logger)}
	if s.Skip != nil {
		opts = append(opts, ratekitgin.WithSkipper(func(c *gin.Context) bool { return s.Skip(c.GetHeader(adaptertest.SkipHeader)) }))
	}
	if s.Cost != nil {
		opts = append(opts, ratekitgin.WithCost(func(c *gin.Context) int { return s.Cost(c.GetHeader(adaptertest.CostHeader)) }))
	}
	if s.Denied != nil {
		opts = append(opts, ratekitgin.WithDeniedHandler(func(c *gin.Context, d core.Decision) { c.String(s.Denied(d)) }))
	}
	if s.OnError != nil {
		opts = append(opts, ratekitgin.WithErrorHandler(func(c *gin.Context, err error) { c.String(s.OnError(err)) }))
	}
	if s.Queue != nil {
		opts = append(opts, ratekitgin.WithQueue(s.Queue))
	}
	if s.NilOptions {
		opts = append(opts, ratekitgin.WithSkipper(nil), ratekitgin.WithCost(nil), ratekitgin.WithDeniedHandler(nil), ratekitgin.WithErrorHandler(nil))
	}
	if s.DecisionInContext {
		opts = append(opts, ratekitgin.WithDecisionInContext())
	}

	r := gin.New()
	r.Use(func(c *gin.Context) { // the app's middleware
		if u := c.GetHeader(adaptertest.UserHeader); u != "" {
			c.Set(adaptertest.UserKey, u)
		}
		if s.Context != nil {
			c.Request = c.Request.WithContext(s.Context(c.Request.Context()))
		}
	})
	if s.Rules {
		r.Use(ratekitgin.Rules(s.Engine, opts...))
	} else {
		r.Use(ratekitgin.New(s.Limiter, key, opts...))
	}
	handler := func(c *gin.Context) { c.String(http.StatusOK, adaptertest.Body(ratekitgin.DecisionFrom(c))) }
	for _, rt := range adaptertest.Routes {
		r.Handle(rt.Method, rt.Path, handler)
	}
	if s.Group != nil {
		r.Group(adaptertest.GroupPrefix, ratekitgin.New(s.Group, key, opts...)).GET("/items", handler)
	}
	return adaptertest.Handler(r)
}

// TestScenarios runs the conformance table, the rules scenarios and the
// scenarios of every option and key function through Gin.
func TestScenarios(t *testing.T) { adaptertest.RunScenarios(t, mount) }

// TestGinErrors: errors reach Gin's error-reporting middleware. A request
// whose context ends while it is held is aborted with the context's error
// (c.Error); an error handler that records the key's error shows it too.
func TestGinErrors(t *testing.T) {
	slow := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch),
		core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	errKey := errors.New("key store down")
	key := func(c *gin.Context) (string, error) {
		if c.Query("key") == "down" {
			return "", errKey
		}
		return "alice", nil
	}
	var seen []*gin.Error
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if c.Query("gone") != "" { // the client went away
			ctx, cancel := context.WithCancel(c.Request.Context())
			cancel()
			c.Request = c.Request.WithContext(ctx)
		}
		c.Next()
		seen = c.Errors
	})
	r.Use(ratekitgin.New(slow, key, ratekitgin.WithErrorHandler(func(c *gin.Context, err error) {
		_ = c.Error(err)
		c.Status(http.StatusServiceUnavailable)
	})))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	serve := adaptertest.Handler(r)

	assert.Equal(t, http.StatusOK, serve(httptest.NewRequest(http.MethodGet, "/", nil)).StatusCode, "the first request has no delay")
	assert.Empty(t, seen)
	serve(httptest.NewRequest(http.MethodGet, "/?gone=1", nil)) // its slot is a minute away
	if assert.Len(t, seen, 1) {
		assert.ErrorIs(t, seen[0], context.Canceled)
	}
	res := serve(httptest.NewRequest(http.MethodGet, "/?key=down", nil))
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	if assert.Len(t, seen, 1) {
		assert.ErrorIs(t, seen[0], errKey)
	}
}

// TestRulesRoute: descriptor key route is the Gin route pattern, known to
// middleware on r.Use: /items/1 and /items/2 share its counter, and a
// rule on the pattern "GET /items/:id" applies to both. A request that
// matches no route has its path for a route, with a counter of its own.
func TestRulesRoute(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "route", Value: "GET /items/:id", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}})
	r := gin.New()
	r.Use(ratekitgin.Rules(e))
	r.GET("/items/:id", func(c *gin.Context) { c.String(http.StatusOK, "item") })
	serve := adaptertest.Handler(r)
	for _, c := range []struct {
		path, limit, remaining string
		status                 int
	}{{"/items/1", "2", "1", 200}, {"/items/2", "2", "0", 200}, {"/nowhere/3", "3", "2", 404}} {
		res := serve(httptest.NewRequest(http.MethodGet, c.path, nil))
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.limit, res.Header.Get("X-Ratelimit-Limit"), c.path)
		assert.Equal(t, c.remaining, res.Header.Get("X-Ratelimit-Remaining"), c.path)
	}
}

// TestLimitByIP runs the shorthand's checks on ratekitgin.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		r := gin.New()
		r.Use(ratekitgin.LimitByIP(count, period))
		r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		return adaptertest.Handler(r)
	})
}

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c *gin.Context) (string, error) { return s.Key(c.GetHeader(adaptertest.KeyHeader)) }
		r := gin.New()
		r.Use(gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
		r.Use(ratekitgin.Concurrency(s.Limiter, key))
		r.GET("/", func(c *gin.Context) { s.Handle(); c.String(http.StatusOK, "ok") })
		return adaptertest.Handler(r)
	})
	assert.Panics(t, func() { ratekitgin.Concurrency(nil, ratekitgin.PeerIP) })
}

// TestAdminMounted: the admin handler under gin.WrapH, behind the app's
// own auth group, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		r := gin.New()
		r.GET("/hello", ratekitgin.New(lim, ratekitgin.Header(adaptertest.KeyHeader)), func(c *gin.Context) { c.String(http.StatusOK, "hi") })
		auth := func(c *gin.Context) {
			if c.GetHeader("Authorization") != adaptertest.OperatorAuth {
				c.AbortWithStatus(http.StatusUnauthorized)
			}
		}
		r.Group("/admin/ratekit", auth).Any("/*op", gin.WrapH(ops))
		return adaptertest.Handler(r)
	})
}
