package ratekitecho5_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	"github.com/ratekit/ratekit/rules"
)

// mount builds Echo's middleware as s says (see adaptertest.ScenarioMount).
// New is NewWithConfig of the Config its options build, so the scenarios
// check each Config field too.
func mount(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
	header := func(c *echo.Context, name string) string { return c.Request().Header.Get(name) }
	var key ratekitecho5.Key // a nil s.Key stays nil: New must panic
	switch s.By {
	case adaptertest.ByKey:
		if s.Key != nil {
			key = func(c *echo.Context) (string, error) { return s.Key(header(c, adaptertest.KeyHeader)) }
		}
	case adaptertest.ByPeerIP:
		key = ratekitecho5.PeerIP
	case adaptertest.ByIP:
		var err error
		key, err = ratekitecho5.IP(s.IPOptions...)
		require.NoError(t, err)
	case adaptertest.ByHeader:
		key = ratekitecho5.Header(adaptertest.KeyHeader)
	case adaptertest.ByUser:
		key = ratekitecho5.User(adaptertest.UserKey)
	}
	opts := []ratekitecho5.Option{ratekitecho5.WithHeaders(s.Headers), ratekitecho5.WithLogger(s.Logger)}
	if s.Skip != nil {
		opts = append(opts, ratekitecho5.WithSkipper(func(c *echo.Context) bool { return s.Skip(header(c, adaptertest.SkipHeader)) }))
	}
	if s.Cost != nil {
		opts = append(opts, ratekitecho5.WithCost(func(c *echo.Context) int { return s.Cost(header(c, adaptertest.CostHeader)) }))
	}
	if s.Denied != nil {
		opts = append(opts, ratekitecho5.WithDeniedHandler(func(c *echo.Context, d core.Decision) error { return c.String(s.Denied(d)) }))
	}
	if s.OnError != nil {
		opts = append(opts, ratekitecho5.WithErrorHandler(func(c *echo.Context, err error) error { return c.String(s.OnError(err)) }))
	}
	if s.Queue != nil {
		opts = append(opts, ratekitecho5.WithQueue(s.Queue))
	}
	if s.NilOptions {
		opts = append(opts, ratekitecho5.WithSkipper(nil), ratekitecho5.WithCost(nil), ratekitecho5.WithDeniedHandler(nil), ratekitecho5.WithErrorHandler(nil))
	}
	if s.DecisionInContext {
		opts = append(opts, ratekitecho5.WithDecisionInContext())
	}

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the app's middleware
		return func(c *echo.Context) error {
			if u := header(c, adaptertest.UserHeader); u != "" {
				c.Set(adaptertest.UserKey, u)
			}
			if s.Context != nil {
				c.SetRequest(c.Request().WithContext(s.Context(c.Request().Context())))
			}
			return next(c)
		}
	})
	if s.Rules {
		e.Use(ratekitecho5.Rules(s.Engine, opts...))
	} else {
		e.Use(ratekitecho5.New(s.Limiter, key, opts...))
	}
	handler := func(c *echo.Context) error {
		return c.String(http.StatusOK, adaptertest.Body(ratekitecho5.DecisionFrom(c)))
	}
	for _, rt := range adaptertest.Routes {
		e.Add(rt.Method, rt.Path, handler)
	}
	if s.Group != nil {
		e.Group(adaptertest.GroupPrefix, ratekitecho5.New(s.Group, key, opts...)).GET("/items", handler)
	}
	return adaptertest.Handler(e)
}

// TestScenarios runs the conformance table, the rules scenarios and the
// scenarios of every option and key function through Echo.
func TestScenarios(t *testing.T) {
	adaptertest.RunScenarios(t, mount)
	assert.Panics(t, func() { ratekitecho5.NewWithConfig(ratekitecho5.Config{Key: ratekitecho5.PeerIP}) }, "NewWithConfig without a limiter")
}

func ok(c *echo.Context) error { return c.String(http.StatusOK, "ok") }

// TestEchoErrors: what the denied and error handlers return, and the
// error of a context that ends while its request is held (the client gone,
// or Echo's ContextTimeout), reach e.HTTPErrorHandler, here Echo's default
// (an *echo.HTTPError's status and message, else 500), with the rate-limit
// fields set and the route's handler not run.
func TestEchoErrors(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	once := adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	slow := adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	slowDown, errKey := echo.NewHTTPError(http.StatusTooManyRequests, "slow down"), errors.New("key store down")
	key := func(c *echo.Context) (string, error) {
		if c.Path() == "/error" {
			return "", errKey
		}
		return c.Path(), nil
	}
	gone := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			ctx, cancel := context.WithCancel(c.Request().Context())
			cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
	var handled error
	e := echo.New()
	e.HTTPErrorHandler = func(c *echo.Context, err error) { handled = err; echo.DefaultHTTPErrorHandler(false)(c, err) }
	e.GET("/denied", ok, ratekitecho5.New(once, key, ratekitecho5.WithDeniedHandler(func(*echo.Context, core.Decision) error { return slowDown })))
	e.GET("/error", ok, ratekitecho5.New(once, key, ratekitecho5.WithErrorHandler(func(_ *echo.Context, err error) error { return err })))
	e.GET("/gone", ok, gone, ratekitecho5.New(slow, key))
	e.GET("/timeout", ok, middleware.ContextTimeout(time.Nanosecond), ratekitecho5.New(slow, key))
	for _, c := range []struct {
		path, body, retry string
		status            int
		err               error
	}{
		{"/denied", "ok", "", 200, nil},
		{"/denied", `{"message":"slow down"}`, "60", 429, slowDown},
		{"/error", `{"message":"Internal Server Error"}`, "", 500, errKey},
		{"/gone", "ok", "", 200, nil}, // the first request has no delay
		{"/gone", `{"message":"Internal Server Error"}`, "", 500, context.Canceled},
		{"/timeout", "ok", "", 200, nil},
		{"/timeout", `{"message":"Service Unavailable"}`, "", 503, context.DeadlineExceeded},
	} {
		handled = nil
		res := adaptertest.Handler(e)(httptest.NewRequest(http.MethodGet, c.path, nil))
		body, _ := io.ReadAll(res.Body)
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.body, strings.TrimSpace(string(body)), c.path)
		assert.Equal(t, c.retry, res.Header.Get(answer.HeaderRetryAfter), c.path)
		assert.ErrorIs(t, handled, c.err, c.path) // nil: none
	}
}

// TestRulesRoute: descriptor key route is the Echo route pattern, c.Path(),
// known to middleware on e.Use: /items/1 and /items/2 share its counter,
// and a rule on "GET /items/:id" applies to both. A request that matches no
// route has its path for a route, with a counter of its own.
func TestRulesRoute(t *testing.T) {
	eng, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "route", Value: "GET /items/:id", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}})
	e := echo.New()
	e.Use(ratekitecho5.Rules(eng))
	e.GET("/items/:id", ok)
	for _, c := range []struct {
		path, limit, remaining string
		status                 int
	}{{"/items/1", "2", "1", 200}, {"/items/2", "2", "0", 200}, {"/nowhere/3", "3", "2", 404}} {
		res := adaptertest.Handler(e)(httptest.NewRequest(http.MethodGet, c.path, nil))
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.limit, res.Header.Get(answer.HeaderLimit), c.path)
		assert.Equal(t, c.remaining, res.Header.Get(answer.HeaderRemaining), c.path)
	}
}

// TestRouteGroupNotFound: Echo v5 serves a group's unmatched paths by a
// not-found route behind the group's middleware, so the group's limit
// counts them (404 with its fields), and no path outside the group.
func TestRouteGroupNotFound(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	e := echo.New()
	e.Group("/login", ratekitecho5.New(lim, ratekitecho5.PeerIP)).POST("", ok)
	e.GET("/other", ok)
	for _, c := range []struct {
		method, path, remaining string
		status                  int
	}{{http.MethodGet, "/login/nowhere", "4", 404}, {http.MethodGet, "/other", "", 200}, {http.MethodPost, "/login", "3", 200}} {
		res := adaptertest.Handler(e)(httptest.NewRequest(c.method, c.path, nil))
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.remaining, res.Header.Get(answer.HeaderRemaining), c.path)
	}
}

// TestLimitByIP runs the shorthand's checks on LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho5.LimitByIP(count, period))
		e.GET("/", ok)
		return adaptertest.Handler(e)
	})
}

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c *echo.Context) (string, error) { return s.Key(c.Request().Header.Get(adaptertest.KeyHeader)) }
		e := echo.New()
		e.Use(middleware.Recover())
		e.Use(ratekitecho5.Concurrency(s.Limiter, key))
		e.GET("/", func(c *echo.Context) error { s.Handle(); return ok(c) })
		return adaptertest.Handler(e)
	})
	assert.Panics(t, func() { ratekitecho5.Concurrency(nil, ratekitecho5.PeerIP) })
}

// TestAdminMounted: the admin handler under echo.WrapHandler, behind the
// app's own auth group, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		e := echo.New()
		e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hi") },
			ratekitecho5.New(lim, ratekitecho5.Header(adaptertest.KeyHeader)))
		auth := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error {
				if c.Request().Header.Get("Authorization") != adaptertest.OperatorAuth {
					return c.NoContent(http.StatusUnauthorized)
				}
				return next(c)
			}
		}
		e.Group("/admin/ratekit", auth).Any("/*", echo.WrapHandler(ops))
		return adaptertest.Handler(e)
	})
}
