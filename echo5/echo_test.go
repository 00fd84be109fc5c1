package ratekitecho5_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	"github.com/ratekit/ratekit/internal/echoport/echotest"
	"github.com/ratekit/ratekit/rules"
)

// api is the adapter under test, for the tests it shares with Echo v5's.
var api = echotest.API[*echo.Context, ratekitecho5.Key, ratekitecho5.Option]{Package: "ratekitecho5",
	PeerIP: ratekitecho5.PeerIP, IP: ratekitecho5.IP, Header: ratekitecho5.Header, User: ratekitecho5.User,
	ContextValue: ratekitecho5.ContextValue, Adapt: ratekitecho5.Adapt,
	WithSkipper: func(skip func(*echo.Context) bool) ratekitecho5.Option { return ratekitecho5.WithSkipper(skip) },
	WithCost:    ratekitecho5.WithCost, WithDeniedHandler: ratekitecho5.WithDeniedHandler,
	WithErrorHandler: ratekitecho5.WithErrorHandler, WithQueue: ratekitecho5.WithQueue, WithHeaders: ratekitecho5.WithHeaders,
	WithLogger: ratekitecho5.WithLogger, WithDecisionInContext: ratekitecho5.WithDecisionInContext, DecisionFrom: ratekitecho5.DecisionFrom,
}

// mount builds Echo's middleware as s says (see adaptertest.ScenarioMount).
// New is NewWithConfig of the Config its options build, so the scenarios
// check each Config field too.
func mount(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
	key, opts := api.Build(t, s)
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the app's middleware
		return func(c *echo.Context) error { return next(echotest.App(s, c)) }
	})
	if s.Rules {
		e.Use(ratekitecho5.Rules(s.Engine, opts...))
	} else {
		e.Use(ratekitecho5.New(s.Limiter, key, opts...))
	}
	for _, rt := range adaptertest.Routes {
		e.Add(rt.Method, rt.Path, api.Handle)
	}
	if s.Group != nil {
		e.Group(adaptertest.GroupPrefix, ratekitecho5.New(s.Group, key, opts...)).GET("/items", api.Handle)
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

// TestEchoErrors: the handlers' errors and those of a context ended in a
// shaping hold reach e.HTTPErrorHandler (see echotest.CheckErrors).
func TestEchoErrors(t *testing.T) {
	once, slow := echotest.ErrorLimiters(t)
	key, slowDown := echotest.ErrorKey[*echo.Context], echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
	gone := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error { return next(echotest.Gone(c)) }
	}
	var handled error
	e := echo.New()
	e.HTTPErrorHandler = func(c *echo.Context, err error) { handled = err; echo.DefaultHTTPErrorHandler(false)(c, err) }
	e.GET("/denied", ok, ratekitecho5.New(once, key, ratekitecho5.WithDeniedHandler(func(*echo.Context, core.Decision) error { return slowDown })))
	e.GET("/error", ok, ratekitecho5.New(once, key, ratekitecho5.WithErrorHandler(func(_ *echo.Context, err error) error { return err })))
	e.GET("/gone", ok, gone, ratekitecho5.New(slow, key))
	e.GET("/timeout", ok, middleware.ContextTimeout(time.Nanosecond), ratekitecho5.New(slow, key))
	echotest.CheckErrors(t, adaptertest.Handler(e), &handled, slowDown)
}

// TestRulesRoute: a rule's route is c.Path(), the route pattern (see
// echotest.RulesRoute).
func TestRulesRoute(t *testing.T) {
	echotest.RulesRoute(t, func(eng *rules.Engine) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho5.Rules(eng))
		e.GET("/items/:id", ok)
		return adaptertest.Handler(e)
	})
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
