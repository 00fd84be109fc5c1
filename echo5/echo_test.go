package ratekitecho5_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
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
)

// mountOptions are the options of the middleware that s describes.
func mountOptions(s adaptertest.Setup) []ratekitecho5.Option {
	opts := []ratekitecho5.Option{ratekitecho5.WithHeaders(s.Headers), ratekitecho5.WithLogger(s.Logger)}
	if s.DecisionInContext {
		opts = append(opts, ratekitecho5.WithDecisionInContext())
	}
	return opts
}

// decisionBody is the handler of the conformance suite's GET /.
func decisionBody(c *echo.Context) error {
	return c.String(http.StatusOK, adaptertest.Body(ratekitecho5.DecisionFrom(c)))
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		key := func(c *echo.Context) (string, error) { return s.Key(c.Request().Header.Get(adaptertest.KeyHeader)) }
		e := echo.New()
		e.Use(ratekitecho5.New(s.Limiter, key, mountOptions(s)...))
		e.GET("/", decisionBody)
		return adaptertest.Handler(e)
	})
}

// TestConformanceConfig: the config form answers alike.
func TestConformanceConfig(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho5.NewWithConfig(ratekitecho5.Config{
			Limiter:           s.Limiter,
			Key:               func(c *echo.Context) (string, error) { return s.Key(c.Request().Header.Get(adaptertest.KeyHeader)) },
			Headers:           s.Headers,
			Logger:            s.Logger,
			DecisionInContext: s.DecisionInContext,
		}))
		e.GET("/", decisionBody)
		return adaptertest.Handler(e)
	})
}

var epoch = time.Unix(1_699_999_200, 0)

// newLimiter returns a limiter on a memory store whose time is clock.
func newLimiter(t testing.TB, clock *storetest.Clock, l core.Limit, opts ...core.Option) *core.Limiter {
	return adaptertest.Limiter(t, clock, l, opts...)
}

type result struct {
	status    int
	remaining string
	body      string
	header    http.Header
}

func do(t *testing.T, h http.Handler, method, path, client string) result {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return result{res.StatusCode, res.Header.Get(answer.HeaderRemaining), string(body), res.Header}
}

func ok(c *echo.Context) error { return c.String(http.StatusOK, "ok") }

// TestRouteGroups: a global token bucket on every route and a stricter
// fixed window on the /api/login group keep separate counters.
func TestRouteGroups(t *testing.T) {
	clock := storetest.NewClock(epoch)
	global := newLimiter(t, clock, core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)})
	login := newLimiter(t, clock, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	key := ratekitecho5.Header("X-Client")

	e := echo.New()
	e.Use(ratekitecho5.New(global, key))
	e.GET("/api/items", func(c *echo.Context) error { return c.String(http.StatusOK, "items") })
	e.Group("/api/login", ratekitecho5.New(login, key)).POST("", func(c *echo.Context) error {
		return c.String(http.StatusOK, "welcome")
	})

	// Exhaust the login limit: other routes still pass.
	for i := 0; i < 5; i++ {
		r := do(t, e, http.MethodPost, "/api/login", "alice")
		require.Equal(t, http.StatusOK, r.status, "login %d", i)
		assert.Equal(t, "welcome", r.body)
		assert.Equal(t, strconv.Itoa(4-i), r.remaining) // the inner, stricter limit's headers win
		assert.Equal(t, "5", r.header.Get(answer.HeaderLimit))
	}
	r := do(t, e, http.MethodPost, "/api/login", "alice")
	assert.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Contains(t, r.body, `"limit":"login"`)
	assert.Equal(t, "5", r.header.Get(answer.HeaderLimit))
	r = do(t, e, http.MethodGet, "/api/items", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "100", r.header.Get(answer.HeaderLimit))
	assert.Equal(t, "93", r.remaining, "global counted the 6 login requests and this one")

	// Exhaust the global limit: login is rejected by it, without using
	// the login counter.
	for i := 0; i < 100; i++ {
		require.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/api/items", "bob").status, "items %d", i)
	}
	r = do(t, e, http.MethodPost, "/api/login", "bob")
	assert.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Contains(t, r.body, `"limit":"global"`)
	assert.Equal(t, "100", r.header.Get(answer.HeaderLimit))
	clock.Advance(time.Minute) // the bucket refills; bob's login window is untouched
	for i := 0; i < 5; i++ {
		r := do(t, e, http.MethodPost, "/api/login", "bob")
		require.Equal(t, http.StatusOK, r.status, "login %d", i)
		assert.Equal(t, strconv.Itoa(4-i), r.remaining)
	}
}

// TestRouteGroupNotFound: Echo v5 registers not-found routes for a group
// with middleware, so the group's limiter also counts requests to
// unmatched paths under its prefix (404 with its headers), and none
// elsewhere.
func TestRouteGroupNotFound(t *testing.T) {
	login := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	e := echo.New()
	e.Group("/api/login", ratekitecho5.New(login, ratekitecho5.Header("X-Client"))).POST("", ok)
	e.GET("/other", ok)

	r := do(t, e, http.MethodGet, "/api/login/nowhere", "alice")
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "4", r.remaining)
	r = do(t, e, http.MethodGet, "/other", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Empty(t, r.remaining)
	r = do(t, e, http.MethodPost, "/api/login", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "3", r.remaining)
}

func TestSkipper(t *testing.T) {
	health := func(c *echo.Context) bool { return c.Path() == "/health" }
	for name, mw := range map[string]func(lim *core.Limiter) echo.MiddlewareFunc{
		"option": func(lim *core.Limiter) echo.MiddlewareFunc {
			return ratekitecho5.New(lim, ratekitecho5.Header("X-Client"), ratekitecho5.WithSkipper(health))
		},
		"config": func(lim *core.Limiter) echo.MiddlewareFunc {
			return ratekitecho5.NewWithConfig(ratekitecho5.Config{Skipper: health, Limiter: lim, Key: ratekitecho5.Header("X-Client")})
		},
	} {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
			e := echo.New()
			e.Use(mw(lim))
			e.GET("/health", ok)
			e.GET("/", ok)
			for i := 0; i < 3; i++ {
				r := do(t, e, http.MethodGet, "/health", "") // no key needed either
				assert.Equal(t, http.StatusOK, r.status)
				assert.Empty(t, r.header.Get(answer.HeaderLimit))
			}
			assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status, "skipped requests were not counted")
			assert.Equal(t, http.StatusTooManyRequests, do(t, e, http.MethodGet, "/", "alice").status)
		})
	}
	t.Run("default-skipper", func(t *testing.T) {
		lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
		e := echo.New()
		e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client"), ratekitecho5.WithSkipper(middleware.DefaultSkipper)))
		e.GET("/", ok)
		assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status)
		assert.Equal(t, http.StatusTooManyRequests, do(t, e, http.MethodGet, "/", "alice").status)
	})
}

func TestDeniedHandler(t *testing.T) {
	t.Run("custom", func(t *testing.T) {
		lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
		var got core.Decision
		e := echo.New()
		e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client"),
			ratekitecho5.WithDeniedHandler(func(c *echo.Context, d core.Decision) error {
				got = d
				return c.JSON(http.StatusTeapot, map[string]string{"slow": "down"})
			})))
		e.GET("/", ok)

		assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status)
		r := do(t, e, http.MethodGet, "/", "alice")
		assert.Equal(t, http.StatusTeapot, r.status)
		assert.JSONEq(t, `{"slow":"down"}`, r.body)
		assert.Equal(t, "0", r.remaining, "headers are set before the denied handler runs")
		assert.Equal(t, "60", r.header.Get(answer.HeaderRetryAfter))
		assert.False(t, got.Allowed)
		assert.Equal(t, "api", got.Name)
	})
	t.Run("http-error-handler", func(t *testing.T) {
		lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
		e := echo.New() // Echo's default HTTPErrorHandler answers the returned error
		e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client"),
			ratekitecho5.WithDeniedHandler(func(*echo.Context, core.Decision) error {
				return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
			})))
		e.GET("/", ok)

		assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status)
		r := do(t, e, http.MethodGet, "/", "alice")
		assert.Equal(t, http.StatusTooManyRequests, r.status)
		assert.JSONEq(t, `{"message":"slow down"}`, r.body)
		assert.Equal(t, "60", r.header.Get(answer.HeaderRetryAfter), "the rate-limit headers survive the error handler")
	})
	t.Run("fail-closed", func(t *testing.T) {
		store := failingStore{}
		lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithStore(store),
			core.WithFailClosed(), core.WithLogger(quiet))
		require.NoError(t, err)
		var got *core.Decision
		e := echo.New()
		e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client"),
			ratekitecho5.WithDeniedHandler(func(c *echo.Context, d core.Decision) error {
				got = &d
				return c.NoContent(http.StatusServiceUnavailable)
			})))
		e.GET("/", ok)
		assert.Equal(t, http.StatusServiceUnavailable, do(t, e, http.MethodGet, "/", "alice").status)
		require.NotNil(t, got)
		assert.Zero(t, got.Quota, "a store failure has Quota 0")
	})
}

func TestErrorHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Rate: core.PerMinute(1)})
	errKey := errors.New("key store down")
	broken := func(*echo.Context) (string, error) { return "", errKey }

	t.Run("default-500", func(t *testing.T) {
		// The key error, which may hold a secret, goes to the logger,
		// never to the client: the body has fixed words.
		secret := errors.New("key lookup in postgres://user:secret@db: connection refused")
		var log bytes.Buffer
		e := echo.New()
		e.Use(ratekitecho5.New(lim, func(*echo.Context) (string, error) { return "", secret },
			ratekitecho5.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
		e.GET("/", ok)
		r := do(t, e, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusInternalServerError, r.status)
		assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
		assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
		assert.Empty(t, r.header.Get(answer.HeaderLimit))
		assert.Contains(t, r.body, "rate limit unavailable for this request")
		assert.NotContains(t, r.body, "postgres://user:secret@db", "the key error is not disclosed")
		assert.NotContains(t, r.body, "connection refused")
		assert.Contains(t, log.String(), "postgres://user:secret@db", "the key error is logged")
	})
	t.Run("default-400", func(t *testing.T) {
		e := echo.New()
		e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client")))
		e.GET("/", ok)
		r := do(t, e, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
		assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
		assert.Empty(t, r.header.Get(answer.HeaderLimit))
	})
	t.Run("custom", func(t *testing.T) {
		var got error
		e := echo.New()
		e.Use(ratekitecho5.New(lim, broken, ratekitecho5.WithErrorHandler(func(c *echo.Context, err error) error {
			got = err
			return c.String(http.StatusServiceUnavailable, "try later")
		})))
		e.GET("/", ok)
		r := do(t, e, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.Equal(t, "try later", r.body)
		assert.ErrorIs(t, got, errKey)
	})
	t.Run("http-error-handler", func(t *testing.T) {
		e := echo.New()
		e.HTTPErrorHandler = func(c *echo.Context, err error) {
			_ = c.String(http.StatusBadGateway, "app: "+err.Error())
		}
		e.Use(ratekitecho5.NewWithConfig(ratekitecho5.Config{
			Limiter:      lim,
			Key:          broken,
			ErrorHandler: func(_ *echo.Context, err error) error { return err },
		}))
		e.GET("/", ok)
		r := do(t, e, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusBadGateway, r.status)
		assert.Equal(t, "app: key store down", r.body)
	})
}

func TestCost(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	e := echo.New()
	e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client"), ratekitecho5.WithCost(func(c *echo.Context) int {
		n, err := strconv.Atoi(c.QueryParam("n"))
		if err != nil {
			return 1
		}
		return n
	})))
	e.GET("/", ok)

	r := do(t, e, http.MethodGet, "/?n=3", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "2", r.remaining)
	assert.Equal(t, http.StatusTooManyRequests, do(t, e, http.MethodGet, "/?n=3", "alice").status)
	assert.Equal(t, "2", do(t, e, http.MethodGet, "/?n=0", "alice").remaining, "cost 0 reports without counting")
	r = do(t, e, http.MethodGet, "/?n=6", "alice")
	assert.Equal(t, http.StatusInternalServerError, r.status, "a cost above the capacity is a programming error")
	assert.Contains(t, r.body, "rate limit misconfigured")
	r = do(t, e, http.MethodGet, "/?n=1", "")
	assert.Equal(t, http.StatusBadRequest, r.status, "no key: the cost function is not asked")
}

func TestShapingHold(t *testing.T) {
	// A shaping leaky bucket of 1000/s delays the later requests by 1 ms
	// each; they are held and passed on.
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1000), Burst: 10, Shaping: true})
	e := echo.New()
	e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client")))
	e.GET("/", ok)
	for i := 0; i < 3; i++ {
		assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status)
	}

	// The next slot is a minute away: a request whose context ends first
	// is not passed on, and the context's error goes to
	// e.HTTPErrorHandler.
	slowLimiter := func() *core.Limiter {
		return newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	}
	t.Run("canceled", func(t *testing.T) {
		var served int
		var handled error
		e := echo.New()
		e.HTTPErrorHandler = func(c *echo.Context, err error) {
			handled = err
			_ = c.NoContent(http.StatusGatewayTimeout)
		}
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error {
				ctx, cancel := context.WithCancel(c.Request().Context())
				cancel() // the client went away
				c.SetRequest(c.Request().WithContext(ctx))
				return next(c)
			}
		})
		e.Use(ratekitecho5.New(slowLimiter(), ratekitecho5.Header("X-Client")))
		e.GET("/", func(c *echo.Context) error { served++; return ok(c) })
		assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status, "the first request has no delay")
		assert.Equal(t, http.StatusGatewayTimeout, do(t, e, http.MethodGet, "/", "alice").status)
		assert.ErrorIs(t, handled, context.Canceled)
		assert.Equal(t, 1, served)
	})
	t.Run("context-timeout", func(t *testing.T) {
		// Echo's ContextTimeout middleware turns the deadline into 503.
		var served int
		e := echo.New()
		e.Use(middleware.ContextTimeout(time.Nanosecond))
		e.Use(ratekitecho5.New(slowLimiter(), ratekitecho5.Header("X-Client")))
		e.GET("/", func(c *echo.Context) error { served++; return ok(c) })
		assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status)
		r := do(t, e, http.MethodGet, "/", "alice")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.Equal(t, 1, served)
	})
}

func TestNewPanicsOnNil(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}))
	assert.Panics(t, func() { ratekitecho5.New(nil, ratekitecho5.PeerIP) })
	assert.Panics(t, func() { ratekitecho5.New(lim, nil) })
	assert.Panics(t, func() { ratekitecho5.NewWithConfig(ratekitecho5.Config{Key: ratekitecho5.PeerIP}) })
	assert.NotPanics(t, func() {
		ratekitecho5.New(lim, ratekitecho5.PeerIP, ratekitecho5.WithCost(nil), ratekitecho5.WithSkipper(nil))
	})
}

// TestConfigDefaultKey: a Config without Key keys by the TCP peer, never
// by a header.
func TestConfigDefaultKey(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	e := echo.New()
	e.Use(ratekitecho5.NewWithConfig(ratekitecho5.Config{Limiter: lim}))
	e.GET("/", ok)
	get := func(peer, xff string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusOK, get("203.0.113.7:1", "1.1.1.1"))
	assert.Equal(t, http.StatusTooManyRequests, get("203.0.113.7:2", "2.2.2.2"), "a forged header buys no fresh bucket")
	assert.Equal(t, http.StatusOK, get("203.0.113.8:1", "1.1.1.1"))
}

// failingStore is a store whose counters always fail.
type failingStore struct{}

func (failingStore) Bind([]core.Limit) (core.Counter, error) { return failingStore{}, nil }

var errDown = errors.New("store down")

func (failingStore) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errDown
}

func (failingStore) Peek(context.Context, string, int, []core.Decision) error { return errDown }

func (failingStore) Refund(context.Context, string, int, time.Time, []core.Decision) error {
	return errDown
}
func (failingStore) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, errDown
}
func (failingStore) Reset(context.Context, string) (bool, error)             { return false, errDown }
func (failingStore) Grant(context.Context, string, int, time.Duration) error { return errDown }

var quiet = slog.New(slog.DiscardHandler)

// TestDecisionInContext: with WithDecisionInContext (or
// Config.DecisionInContext), the handlers after the middleware read the
// decision with DecisionFrom; without it, or on a request that was not
// passed on, there is none.
func TestDecisionInContext(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	var got []core.Decision
	read := func(c *echo.Context) error {
		if d, ok := ratekitecho5.DecisionFrom(c); ok {
			got = append(got, d)
		}
		return c.String(http.StatusOK, "ok")
	}
	e := echo.New()
	e.GET("/on", read, ratekitecho5.New(lim, ratekitecho5.Header("X-Client"), ratekitecho5.WithDecisionInContext()))
	e.GET("/config", read, ratekitecho5.NewWithConfig(ratekitecho5.Config{Limiter: lim, Key: ratekitecho5.Header("X-Client"), DecisionInContext: true}))
	e.GET("/off", read, ratekitecho5.New(lim, ratekitecho5.Header("X-Client")))

	adaptertest.DecisionTrace(t, func(path, client string) int { return do(t, e, http.MethodGet, path, client).status },
		func() []core.Decision { return got }, "/config")

	_, ok := ratekitecho5.DecisionFrom(e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder()))
	assert.False(t, ok)
}

// TestIETFHeaders: under WithHeaders(answer.IETF), a 429's RateLimit
// field has t equal to Retry-After (the time until a retry is admitted,
// not until the bucket is full), and no X-Ratelimit fields are sent.
func TestIETFHeaders(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2})
	e := echo.New()
	e.Use(ratekitecho5.New(lim, ratekitecho5.Header("X-Client"), ratekitecho5.WithHeaders(answer.IETF)))
	e.GET("/", ok)

	r := do(t, e, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, `"api";q=2;w=20`, r.header.Get(answer.HeaderRateLimitPolicy))
	assert.Equal(t, `"api";r=1;t=10`, r.header.Get(answer.HeaderRateLimit))
	assert.Empty(t, r.header.Get(answer.HeaderLimit))
	do(t, e, http.MethodGet, "/", "alice")
	r = do(t, e, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "10", r.header.Get(answer.HeaderRetryAfter))
	assert.Equal(t, `"api";r=0;t=10`, r.header.Get(answer.HeaderRateLimit), "t is Retry-After, not the 20 s until the bucket is full")
	assert.Empty(t, r.header.Get(answer.HeaderXRetryAfter))
	assert.Empty(t, r.header.Get(answer.HeaderLimit))
}

// TestLimitByIP runs the shared checks of the shorthand on
// ratekitecho5.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		e := echo.New()
		e.Use(ratekitecho5.LimitByIP(count, period))
		e.GET("/", ok)
		return adaptertest.Handler(e)
	})
}

// TestLimitByIPPeers: a limit of 2 per minute admits two requests of one
// peer and rejects its third with 429, while a second peer is still
// admitted; New's options apply; a bad limit panics with an error wrapping
// core.ErrInvalidLimit.
func TestLimitByIPPeers(t *testing.T) {
	e := echo.New()
	e.Use(ratekitecho5.LimitByIP(2, time.Minute, ratekitecho5.WithHeaders(answer.IETF)))
	e.GET("/", ok)
	get := func(peer string) *http.Response {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", "198.51.100.9") // never read
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Result()
	}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		res := get("203.0.113.7:4711")
		assert.Equal(t, want, res.StatusCode, "request %d of the first peer", i+1)
		assert.NotEmpty(t, res.Header.Get(answer.HeaderRateLimit), "the options reach New")
		assert.Empty(t, res.Header.Get(answer.HeaderLimit))
		if want == http.StatusTooManyRequests {
			assert.NotEmpty(t, res.Header.Get(answer.HeaderRetryAfter))
		}
	}
	assert.Equal(t, http.StatusOK, get("203.0.113.8:4711").StatusCode, "a second peer has a budget of its own")

	for _, bad := range []struct {
		count  int
		period time.Duration
	}{{-1, time.Minute}, {2, 0}} {
		func() {
			defer func() {
				err, _ := recover().(error)
				assert.ErrorIs(t, err, core.ErrInvalidLimit, "LimitByIP(%d, %v)", bad.count, bad.period)
			}()
			ratekitecho5.LimitByIP(bad.count, bad.period)
		}()
	}
}
