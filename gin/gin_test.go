package ratekitgin_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgin "github.com/ratekit/ratekit/gin"
)

// TestMain keeps Gin's debug output (route listings, warnings) out of the
// test output and out of the examples' checked output.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		opts := []ratekitgin.Option{ratekitgin.WithHeaders(s.Headers), ratekitgin.WithLogger(s.Logger)}
		if s.DecisionInContext {
			opts = append(opts, ratekitgin.WithDecisionInContext())
		}
		key := func(c *gin.Context) (string, error) { return s.Key(c.GetHeader(adaptertest.KeyHeader)) }
		r := gin.New()
		r.Use(ratekitgin.New(s.Limiter, key, opts...))
		r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, adaptertest.Body(ratekitgin.DecisionFrom(c))) })
		return adaptertest.Handler(r)
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

// TestRouteGroups: a global token bucket on every route and a stricter
// fixed window on the /api/login group keep separate counters.
func TestRouteGroups(t *testing.T) {
	clock := storetest.NewClock(epoch)
	global := newLimiter(t, clock, core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)})
	login := newLimiter(t, clock, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	key := ratekitgin.Header("X-Client")

	r := gin.New()
	r.Use(ratekitgin.New(global, key))
	r.GET("/api/items", func(c *gin.Context) { c.String(http.StatusOK, "items") })
	r.Group("/api/login", ratekitgin.New(login, key)).POST("", func(c *gin.Context) { c.String(http.StatusOK, "welcome") })

	// Exhaust the login limit: other routes still pass.
	for i := 0; i < 5; i++ {
		res := do(t, r, http.MethodPost, "/api/login", "alice")
		require.Equal(t, http.StatusOK, res.status, "login %d", i)
		assert.Equal(t, "welcome", res.body)
		assert.Equal(t, strconv.Itoa(4-i), res.remaining, "the group's limit, which ran last, sets the headers")
		assert.Equal(t, "5", res.header.Get(answer.HeaderLimit))
	}
	res := do(t, r, http.MethodPost, "/api/login", "alice")
	assert.Equal(t, http.StatusTooManyRequests, res.status)
	assert.Contains(t, res.body, `"limit":"login"`)
	assert.Equal(t, "5", res.header.Get(answer.HeaderLimit))
	res = do(t, r, http.MethodGet, "/api/items", "alice")
	assert.Equal(t, http.StatusOK, res.status)
	assert.Equal(t, "100", res.header.Get(answer.HeaderLimit))
	assert.Equal(t, "93", res.remaining, "global counted the 6 login requests and this one")

	// Exhaust the global limit: login is rejected by it, without using
	// the login counter.
	for i := 0; i < 100; i++ {
		require.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/api/items", "bob").status, "items %d", i)
	}
	res = do(t, r, http.MethodPost, "/api/login", "bob")
	assert.Equal(t, http.StatusTooManyRequests, res.status)
	assert.Contains(t, res.body, `"limit":"global"`)
	assert.Equal(t, "100", res.header.Get(answer.HeaderLimit))
	clock.Advance(time.Minute) // the bucket refills; bob's login window is untouched
	for i := 0; i < 5; i++ {
		res := do(t, r, http.MethodPost, "/api/login", "bob")
		require.Equal(t, http.StatusOK, res.status, "login %d", i)
		assert.Equal(t, strconv.Itoa(4-i), res.remaining)
	}
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodPost, "/api/login", "bob").status)
}

func TestSkipper(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client"),
		ratekitgin.WithSkipper(func(c *gin.Context) bool { return c.Request.URL.Path == "/health" })))
	r.GET("/health", func(c *gin.Context) { c.String(http.StatusOK, "up") })
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	for i := 0; i < 3; i++ {
		res := do(t, r, http.MethodGet, "/health", "") // no key needed either
		assert.Equal(t, http.StatusOK, res.status)
		assert.Equal(t, "up", res.body)
		assert.Empty(t, res.header.Get(answer.HeaderLimit))
	}
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status, "skipped requests were not counted")
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodGet, "/", "alice").status)
}

func TestDeniedHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	var got core.Decision
	var aborted bool
	served := 0
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client"),
		ratekitgin.WithDeniedHandler(func(c *gin.Context, d core.Decision) {
			got, aborted = d, c.IsAborted()
			c.JSON(http.StatusTeapot, gin.H{"slow": "down"})
		})))
	r.GET("/", func(c *gin.Context) { served++; c.String(http.StatusOK, "ok") })

	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	res := do(t, r, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTeapot, res.status)
	assert.JSONEq(t, `{"slow":"down"}`, res.body)
	assert.Equal(t, "0", res.remaining, "headers are set before the denied handler runs")
	assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter))
	assert.False(t, got.Allowed)
	assert.Equal(t, "api", got.Name)
	assert.True(t, aborted, "the request is aborted before the handler runs")
	assert.Equal(t, 1, served, "the rejected request did not reach the route")
}

func TestDefaultRejection(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	served, after := 0, 0
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client")))
	r.Use(func(c *gin.Context) { after++; c.Next() })
	r.GET("/", func(c *gin.Context) { served++; c.String(http.StatusOK, "ok") })

	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	res := do(t, r, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTooManyRequests, res.status)
	assert.Equal(t, answer.ProblemContentType, res.header.Get("Content-Type"))
	assert.Equal(t, "no-store", res.header.Get("Cache-Control"))
	assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter))
	assert.Contains(t, res.body, `"status":429`)
	assert.Equal(t, 1, served)
	assert.Equal(t, 1, after, "c.Abort stops the later middleware too")
}

func TestErrorHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Rate: core.PerMinute(1)})
	errKey := errors.New("key store down")
	broken := func(*gin.Context) (string, error) { return "", errKey }
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }

	t.Run("default-500", func(t *testing.T) {
		// The key error, which may hold a secret, goes to the logger,
		// never to the client: the body has fixed words.
		secret := errors.New("key lookup in postgres://user:secret@db: connection refused")
		var log bytes.Buffer
		r := gin.New()
		r.Use(ratekitgin.New(lim, func(*gin.Context) (string, error) { return "", secret },
			ratekitgin.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
		r.GET("/", ok)
		res := do(t, r, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusInternalServerError, res.status)
		assert.Equal(t, answer.ProblemContentType, res.header.Get("Content-Type"))
		assert.Equal(t, "no-store", res.header.Get("Cache-Control"))
		assert.Empty(t, res.header.Get(answer.HeaderLimit))
		assert.Contains(t, res.body, "rate limit unavailable for this request")
		assert.NotContains(t, res.body, "postgres://user:secret@db", "the key error is not disclosed")
		assert.NotContains(t, res.body, "connection refused")
		assert.Contains(t, log.String(), "postgres://user:secret@db", "the key error is logged")
	})
	t.Run("default-400", func(t *testing.T) {
		r := gin.New()
		r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client")))
		r.GET("/", ok)
		res := do(t, r, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusBadRequest, res.status)
		assert.Equal(t, answer.ProblemContentType, res.header.Get("Content-Type"))
		assert.Equal(t, "no-store", res.header.Get("Cache-Control"))
		assert.Empty(t, res.header.Get(answer.HeaderLimit))
	})
	t.Run("custom", func(t *testing.T) {
		var got error
		var ginErrors []*gin.Error
		served := 0
		r := gin.New()
		r.Use(func(c *gin.Context) { c.Next(); ginErrors = c.Errors })
		r.Use(ratekitgin.New(lim, broken, ratekitgin.WithErrorHandler(func(c *gin.Context, err error) {
			got = err
			_ = c.Error(err)
			c.String(http.StatusServiceUnavailable, "try later")
		})))
		r.GET("/", func(c *gin.Context) { served++ })
		res := do(t, r, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusServiceUnavailable, res.status)
		assert.Equal(t, "try later", res.body)
		assert.ErrorIs(t, got, errKey)
		require.Len(t, ginErrors, 1)
		assert.ErrorIs(t, ginErrors[0], errKey)
		assert.Zero(t, served)
	})
}

// failingStore is a store whose counters always fail.
type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Bind([]core.Limit) (core.Counter, error) { return failingStore{}, nil }

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

var discard = slog.New(slog.DiscardHandler)

func TestFailModes(t *testing.T) {
	down := func() core.Store { return failingStore{} }
	for _, tc := range []struct {
		name   string
		closed bool
		status int
	}{
		{"open", false, http.StatusOK},
		{"closed", true, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithStore(down()),
				failMode(tc.closed), core.WithLogger(discard))
			require.NoError(t, err)
			r := gin.New()
			r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client")))
			r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
			assert.Equal(t, tc.status, do(t, r, http.MethodGet, "/", "alice").status)
		})
	}
}

func TestCost(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client"), ratekitgin.WithCost(func(c *gin.Context) int {
		n, _ := strconv.Atoi(c.DefaultQuery("n", "1"))
		return n
	})))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	res := do(t, r, http.MethodGet, "/?n=3", "alice")
	assert.Equal(t, http.StatusOK, res.status)
	assert.Equal(t, "2", res.remaining)
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodGet, "/?n=3", "alice").status)
	assert.Equal(t, "2", do(t, r, http.MethodGet, "/?n=0", "alice").remaining, "cost 0 reports without counting")
	res = do(t, r, http.MethodGet, "/?n=6", "alice")
	assert.Equal(t, http.StatusInternalServerError, res.status, "a cost above the capacity is a programming error")
	assert.Contains(t, res.body, "rate limit misconfigured")
	res = do(t, r, http.MethodGet, "/?n=-1", "alice")
	assert.Equal(t, http.StatusInternalServerError, res.status, "so is a negative cost")
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/?n=2", "alice").status, "errors did not count")
}

func TestShapingHold(t *testing.T) {
	// A shaping leaky bucket of 1000/s delays the second request by 1 ms
	// and the third by 2 ms: they are held, then served.
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1000), Burst: 10, Shaping: true})
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client")))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for i := 0; i < 3; i++ {
		res := do(t, r, http.MethodGet, "/", "alice")
		assert.Equal(t, http.StatusOK, res.status)
		assert.Equal(t, "ok", res.body)
	}

	// A request whose context ends while it is held is aborted, not
	// served, and the context's error is recorded in c.Errors.
	slow := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	var served int
	var ginErrors []*gin.Error
	var aborted bool
	r = gin.New()
	r.Use(func(c *gin.Context) {
		ctx, cancel := context.WithCancel(c.Request.Context())
		cancel() // a request whose client has gone
		c.Request = c.Request.WithContext(ctx)
		c.Next()
		ginErrors, aborted = c.Errors, c.IsAborted()
	})
	r.Use(ratekitgin.New(slow, ratekitgin.Header("X-Client")))
	r.GET("/", func(c *gin.Context) { served++; c.String(http.StatusOK, "ok") })
	assert.Equal(t, "ok", do(t, r, http.MethodGet, "/", "alice").body, "the first request has no delay")
	assert.Empty(t, ginErrors)
	res := do(t, r, http.MethodGet, "/", "alice") // its slot is a minute away
	assert.Empty(t, res.body)
	assert.Equal(t, 1, served)
	assert.True(t, aborted)
	require.Len(t, ginErrors, 1)
	assert.ErrorIs(t, ginErrors[0], context.Canceled)
}

func TestNewPanicsOnNil(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}))
	assert.Panics(t, func() { ratekitgin.New(nil, ratekitgin.PeerIP) })
	assert.Panics(t, func() { ratekitgin.New(lim, nil) })
	assert.NotPanics(t, func() { ratekitgin.New(lim, ratekitgin.PeerIP, ratekitgin.WithSkipper(nil), ratekitgin.WithCost(nil)) })
}

// TestNilOptionsKeepDefaults: an option given a nil function leaves the
// default in place.
func TestNilOptionsKeepDefaults(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client"), ratekitgin.WithSkipper(nil), ratekitgin.WithCost(nil),
		ratekitgin.WithDeniedHandler(nil), ratekitgin.WithErrorHandler(nil)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodGet, "/", "alice").status)
	assert.Equal(t, http.StatusBadRequest, do(t, r, http.MethodGet, "/", "").status)
}

// TestDecisionInContext: with WithDecisionInContext, the handlers after
// the middleware read the decision with DecisionFrom; without it, or on a
// request that was not passed on, there is none.
func TestDecisionInContext(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	var got []core.Decision
	read := func(c *gin.Context) {
		if d, ok := ratekitgin.DecisionFrom(c); ok {
			got = append(got, d)
		}
		c.String(http.StatusOK, "ok")
	}
	r := gin.New()
	r.GET("/on", ratekitgin.New(lim, ratekitgin.Header("X-Client"), ratekitgin.WithDecisionInContext()), read)
	r.GET("/off", ratekitgin.New(lim, ratekitgin.Header("X-Client")), read)

	adaptertest.DecisionTrace(t, func(path, client string) int { return do(t, r, http.MethodGet, path, client).status },
		func() []core.Decision { return got }, "/on")

	_, ok := ratekitgin.DecisionFrom(gin.CreateTestContextOnly(httptest.NewRecorder(), r))
	assert.False(t, ok)
}

// TestIETFHeaders: under WithHeaders(answer.IETF), a 429's RateLimit
// field has t equal to Retry-After (the time until a retry is admitted,
// not until the bucket is full), and no X-Ratelimit fields are sent.
func TestIETFHeaders(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2})
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.Header("X-Client"), ratekitgin.WithHeaders(answer.IETF)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	res := do(t, r, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusOK, res.status)
	assert.Equal(t, `"api";q=2;w=20`, res.header.Get(answer.HeaderRateLimitPolicy))
	assert.Equal(t, `"api";r=1;t=10`, res.header.Get(answer.HeaderRateLimit))
	assert.Empty(t, res.header.Get(answer.HeaderLimit))
	do(t, r, http.MethodGet, "/", "alice")
	res = do(t, r, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTooManyRequests, res.status)
	assert.Equal(t, "10", res.header.Get(answer.HeaderRetryAfter))
	assert.Equal(t, `"api";r=0;t=10`, res.header.Get(answer.HeaderRateLimit), "t is Retry-After, not the 20 s until the bucket is full")
	assert.Empty(t, res.header.Get(answer.HeaderXRetryAfter))
	assert.Empty(t, res.header.Get(answer.HeaderLimit))
}

// failMode is the option of a fail mode: WithFailClosed, or none (open).
func failMode(closed bool) core.Option {
	if closed {
		return core.WithFailClosed()
	}
	return func(*core.Limiter) error { return nil }
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
