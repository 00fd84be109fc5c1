package ratekitecho_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/internal/echoport/echotest"
	"github.com/ratekit/ratekit/rules"
)

// api is the adapter under test, for the tests it shares with Echo v5's.
var api = echotest.API[echo.Context, ratekitecho.Key, ratekitecho.Option]{Package: "ratekitecho",
	PeerIP: ratekitecho.PeerIP, IP: ratekitecho.IP, Header: ratekitecho.Header, User: ratekitecho.User,
	ContextValue: ratekitecho.ContextValue, Adapt: ratekitecho.Adapt,
	WithSkipper: func(skip func(echo.Context) bool) ratekitecho.Option { return ratekitecho.WithSkipper(skip) },
	WithCost:    ratekitecho.WithCost, WithDeniedHandler: ratekitecho.WithDeniedHandler,
	WithErrorHandler: ratekitecho.WithErrorHandler, WithQueue: ratekitecho.WithQueue, WithHeaders: ratekitecho.WithHeaders,
	WithLogger: ratekitecho.WithLogger, WithDecisionInContext: ratekitecho.WithDecisionInContext, DecisionFrom: ratekitecho.DecisionFrom,
}

// mount builds Echo's middleware as s says (see adaptertest.ScenarioMount).
// New is NewWithConfig of the Config its options build, so the scenarios
// check each Config field too.
func mount(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
	key, opts := api.Build(t, s)
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the app's middleware
		return func(c echo.Context) error { return next(echotest.App(s, c)) }
	})
	if s.Rules {
		e.Use(ratekitecho.Rules(s.Engine, opts...))
	} else {
		e.Use(ratekitecho.New(s.Limiter, key, opts...))
	}
	for _, rt := range adaptertest.Routes {
		e.Add(rt.Method, rt.Path, api.Handle)
	}
	if s.Group != nil {
		e.Group(adaptertest.GroupPrefix, ratekitecho.New(s.Group, key, opts...)).GET("/items", api.Handle)
	}
	return adaptertest.Handler(e)
}

// TestScenarios runs the conformance table, the rules scenarios and the
// scenarios of every option and key function through Echo.
func TestScenarios(t *testing.T) {
	adaptertest.RunScenarios(t, mount)
	assert.Panics(t, func() { ratekitecho.NewWithConfig(ratekitecho.Config{Key: ratekitecho.PeerIP}) }, "NewWithConfig without a limiter")
}

func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

// TestEchoErrors: the handlers' errors and those of a context ended in a
// shaping hold reach e.HTTPErrorHandler (see echotest.CheckErrors).
func TestEchoErrors(t *testing.T) {
	once, slow := echotest.ErrorLimiters(t)
	key, slowDown := echotest.ErrorKey[echo.Context], echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
	gone := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(echotest.Gone(c)) }
	}
	var handled error
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) { handled = err; e.DefaultHTTPErrorHandler(err, c) }
	e.GET("/denied", ok, ratekitecho.New(once, key, ratekitecho.WithDeniedHandler(func(echo.Context, core.Decision) error { return slowDown })))
	e.GET("/error", ok, ratekitecho.New(once, key, ratekitecho.WithErrorHandler(func(_ echo.Context, err error) error { return err })))
	e.GET("/gone", ok, gone, ratekitecho.New(slow, key))
	e.GET("/timeout", ok, middleware.ContextTimeout(time.Nanosecond), ratekitecho.New(slow, key))
	echotest.CheckErrors(t, adaptertest.Handler(e), &handled, slowDown)
}

// TestRulesRoute: a rule's route is c.Path(), the route pattern (see
// echotest.RulesRoute).
func TestRulesRoute(t *testing.T) {
	echotest.RulesRoute(t, func(eng *rules.Engine) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho.Rules(eng))
		e.GET("/items/:id", ok)
		return adaptertest.Handler(e)
	})
}

// TestLimitByIP runs the shorthand's checks on LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho.LimitByIP(count, period))
		e.GET("/", ok)
		return adaptertest.Handler(e)
	})
}

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c echo.Context) (string, error) { return s.Key(c.Request().Header.Get(adaptertest.KeyHeader)) }
		e := echo.New()
		e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true, DisableStackAll: true}))
		e.Use(ratekitecho.Concurrency(s.Limiter, key))
		e.GET("/", func(c echo.Context) error { s.Handle(); return ok(c) })
		return adaptertest.Handler(e)
	})
	assert.Panics(t, func() { ratekitecho.Concurrency(nil, ratekitecho.PeerIP) })
}

// TestAdminMounted: the admin handler under echo.WrapHandler, behind the
// app's own auth group, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		e := echo.New()
		e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hi") },
			ratekitecho.New(lim, ratekitecho.Header(adaptertest.KeyHeader)))
		auth := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
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
