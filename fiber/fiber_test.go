package ratekitfiber_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	"github.com/ratekit/ratekit/keyfuncs"
)

// serve returns the adaptertest.Serve of a Fiber app.
func serve(t *testing.T, app *fiber.App) adaptertest.Serve {
	return func(r *http.Request) *http.Response {
		res, err := app.Test(r, -1)
		require.NoError(t, err)
		return res
	}
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		opts := []ratekitfiber.Option{ratekitfiber.WithHeaders(s.Headers), ratekitfiber.WithLogger(s.Logger)}
		if s.DecisionInContext {
			opts = append(opts, ratekitfiber.WithDecisionInContext())
		}
		// The key is copied: Fiber reuses the request's memory.
		key := func(c *fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
		app := fiber.New()
		app.Use(ratekitfiber.New(s.Limiter, key, opts...))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString(adaptertest.Body(ratekitfiber.DecisionFrom(c))) })
		return serve(t, app)
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

func do(t *testing.T, app *fiber.App, method, path, client string) result {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	res, err := app.Test(r, -1)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return result{res.StatusCode, res.Header.Get(answer.HeaderRemaining), string(body), res.Header}
}

// TestRouteGroups: a global token bucket on every route and a stricter
// fixed window on /api/login keep separate counters.
func TestRouteGroups(t *testing.T) {
	clock := storetest.NewClock(epoch)
	global := newLimiter(t, clock, core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)})
	login := newLimiter(t, clock, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	key := ratekitfiber.Header("X-Client")

	app := fiber.New()
	app.Use(ratekitfiber.New(global, key))
	api := app.Group("/api")
	api.Get("/items", func(c *fiber.Ctx) error { return c.SendString("items") })
	api.Group("/login", ratekitfiber.New(login, key)).Post("/", func(c *fiber.Ctx) error { return c.SendString("welcome") })

	// Exhaust the login limit: other routes still pass.
	for i := 0; i < 5; i++ {
		r := do(t, app, http.MethodPost, "/api/login", "alice")
		require.Equal(t, http.StatusOK, r.status, "login %d", i)
		// The inner limiter's fields replace the outer one's: they
		// describe the login limit.
		assert.Equal(t, "5", r.header.Get(answer.HeaderLimit))
		assert.Equal(t, strconv.Itoa(4-i), r.remaining)
	}
	r := do(t, app, http.MethodPost, "/api/login", "alice")
	assert.Equal(t, http.StatusTooManyRequests, r.status, "the 6th login is rejected")
	assert.Contains(t, r.body, `"limit":"login"`)
	assert.Equal(t, "5", r.header.Get(answer.HeaderLimit))
	assert.Equal(t, "60", r.header.Get(answer.HeaderRetryAfter))
	r = do(t, app, http.MethodGet, "/api/items", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "100", r.header.Get(answer.HeaderLimit))
	assert.Equal(t, "93", r.remaining, "global counted the 6 login requests and this one")

	// Exhaust the global limit: login is rejected by it, without using
	// the login counter.
	for i := 0; i < 100; i++ {
		require.Equal(t, http.StatusOK, do(t, app, http.MethodGet, "/api/items", "bob").status, "items %d", i)
	}
	r = do(t, app, http.MethodPost, "/api/login", "bob")
	assert.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Contains(t, r.body, `"limit":"global"`)
	assert.Equal(t, "100", r.header.Get(answer.HeaderLimit))
	clock.Advance(time.Minute) // the bucket refills; bob's login window is untouched
	for i := 0; i < 5; i++ {
		r := do(t, app, http.MethodPost, "/api/login", "bob")
		require.Equal(t, http.StatusOK, r.status, "login %d", i)
		assert.Equal(t, strconv.Itoa(4-i), r.remaining)
	}
}

func TestSkipper(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	app := fiber.New()
	app.Use(ratekitfiber.New(lim, ratekitfiber.Header("X-Client"),
		ratekitfiber.WithSkipper(func(c *fiber.Ctx) bool { return c.Path() == "/health" })))
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendString("ok") })

	for i := 0; i < 3; i++ {
		r := do(t, app, http.MethodGet, "/health", "") // no key needed either
		assert.Equal(t, http.StatusOK, r.status)
		assert.Empty(t, r.header.Get(answer.HeaderLimit))
	}
	assert.Equal(t, http.StatusOK, do(t, app, http.MethodGet, "/", "alice").status, "skipped requests were not counted")
	assert.Equal(t, http.StatusTooManyRequests, do(t, app, http.MethodGet, "/", "alice").status)
}

func TestDeniedHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	var got core.Decision
	app := fiber.New()
	app.Use(ratekitfiber.New(lim, ratekitfiber.Header("X-Client"),
		ratekitfiber.WithDeniedHandler(func(c *fiber.Ctx, d core.Decision) error {
			got = d
			return c.Status(http.StatusTeapot).JSON(fiber.Map{"slow": "down"})
		})))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

	assert.Equal(t, http.StatusOK, do(t, app, http.MethodGet, "/", "alice").status)
	r := do(t, app, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTeapot, r.status)
	assert.JSONEq(t, `{"slow":"down"}`, r.body)
	assert.Equal(t, "0", r.remaining, "headers are set before the denied handler runs")
	assert.Equal(t, "60", r.header.Get(answer.HeaderRetryAfter))
	assert.False(t, got.Allowed)
	assert.Equal(t, "api", got.Name)
}

func TestErrorHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Rate: core.PerMinute(1)})
	errKey := errors.New("key store down")
	broken := func(*fiber.Ctx) (string, error) { return "", errKey }

	t.Run("default-missing-key", func(t *testing.T) {
		app := fiber.New()
		app.Use(ratekitfiber.New(lim, ratekitfiber.Header("X-Client")))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		r := do(t, app, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
		assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
		assert.Empty(t, r.header.Get(answer.HeaderLimit))
		assert.Contains(t, r.body, `"status":400`)
	})
	t.Run("default", func(t *testing.T) {
		// The key error, which may hold a secret, goes to the logger,
		// never to the client: the body has fixed words.
		secret := errors.New("key lookup in postgres://user:secret@db: connection refused")
		var log bytes.Buffer
		app := fiber.New()
		app.Use(ratekitfiber.New(lim, func(*fiber.Ctx) (string, error) { return "", secret },
			ratekitfiber.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		r := do(t, app, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusInternalServerError, r.status)
		assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
		assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
		assert.Empty(t, r.header.Get(answer.HeaderLimit))
		assert.Contains(t, r.body, "rate limit unavailable for this request")
		assert.NotContains(t, r.body, "postgres://user:secret@db", "the key error is not disclosed")
		assert.NotContains(t, r.body, "connection refused")
		assert.Contains(t, log.String(), "postgres://user:secret@db", "the key error is logged")
	})
	t.Run("custom", func(t *testing.T) {
		var got error
		app := fiber.New()
		app.Use(ratekitfiber.New(lim, broken, ratekitfiber.WithErrorHandler(func(c *fiber.Ctx, err error) error {
			got = err
			return c.Status(http.StatusServiceUnavailable).SendString("try later")
		})))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		r := do(t, app, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusServiceUnavailable, r.status)
		assert.Equal(t, "try later", r.body)
		assert.ErrorIs(t, got, errKey)
	})
	t.Run("fiber-error-handler", func(t *testing.T) {
		app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
			return c.Status(http.StatusBadGateway).SendString("app: " + err.Error())
		}})
		app.Use(ratekitfiber.New(lim, broken, ratekitfiber.WithErrorHandler(func(_ *fiber.Ctx, err error) error { return err })))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		r := do(t, app, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusBadGateway, r.status)
		assert.Equal(t, "app: key store down", r.body)
	})
}

func TestCost(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	app := fiber.New()
	app.Use(ratekitfiber.New(lim, ratekitfiber.Header("X-Client"), ratekitfiber.WithCost(func(c *fiber.Ctx) int {
		n, _ := strconv.Atoi(c.Query("n", "1"))
		return n
	})))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

	r := do(t, app, http.MethodGet, "/?n=3", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "2", r.remaining)
	assert.Equal(t, http.StatusTooManyRequests, do(t, app, http.MethodGet, "/?n=3", "alice").status)
	assert.Equal(t, "2", do(t, app, http.MethodGet, "/?n=0", "alice").remaining, "cost 0 reports without counting")
	r = do(t, app, http.MethodGet, "/?n=6", "alice")
	assert.Equal(t, http.StatusInternalServerError, r.status, "a cost above the capacity is a programming error")
	assert.Contains(t, r.body, "rate limit misconfigured")
}

func TestShapingHold(t *testing.T) {
	// A shaping leaky bucket of 1000/s on a stopped clock queues request
	// i for i ms: each is held that long, then served. (Only a lower bound
	// of the real time is asserted, which a slow machine cannot break.)
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1000), Burst: 10, Shaping: true})
	app := fiber.New()
	app.Use(ratekitfiber.New(lim, ratekitfiber.Header("X-Client")))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	for i := 0; i < 3; i++ {
		start := time.Now()
		r := do(t, app, http.MethodGet, "/", "alice")
		assert.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, "ok", r.body)
		assert.GreaterOrEqual(t, time.Since(start), time.Duration(i)*time.Millisecond, "request %d was held", i)
	}

	// A request whose user context ends while it is held is not passed
	// on; the error goes to the app's error handler.
	slow := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	var served int
	app = fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		return c.Status(http.StatusGatewayTimeout).SendString(err.Error())
	}})
	app.Use(func(c *fiber.Ctx) error {
		ctx, cancel := context.WithCancel(c.UserContext())
		cancel() // a request whose deadline has passed
		c.SetUserContext(ctx)
		return c.Next()
	})
	app.Use(ratekitfiber.New(slow, ratekitfiber.Header("X-Client")))
	app.Get("/", func(c *fiber.Ctx) error { served++; return c.SendString("ok") })
	assert.Equal(t, http.StatusOK, do(t, app, http.MethodGet, "/", "alice").status, "the first request has no delay")
	r := do(t, app, http.MethodGet, "/", "alice") // its slot is a minute away
	assert.Equal(t, http.StatusGatewayTimeout, r.status)
	assert.Equal(t, context.Canceled.Error(), r.body)
	assert.Equal(t, 1, served)
}

func TestNewPanicsOnNil(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}))
	assert.Panics(t, func() { ratekitfiber.New(nil, ratekitfiber.PeerIP) })
	assert.Panics(t, func() { ratekitfiber.New(lim, nil) })
}

// retaining is a store that keeps every key it is given, as a store that
// caches keys in a map would; the keys must stay intact after the handler
// returns and Fiber reuses the request's memory.
type retaining struct {
	core.Store
	mu   sync.Mutex
	keys []string
}

type retainingCounter struct {
	core.Counter
	s *retaining
}

func (s *retaining) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.Store.Bind(limits)
	return retainingCounter{c, s}, err
}

func (c retainingCounter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	c.s.mu.Lock()
	c.s.keys = append(c.s.keys, key)
	c.s.mu.Unlock()
	return c.Counter.Take(ctx, key, cost, ds)
}

// TestKeysOutliveRequest: every key helper that reads the request hands
// the limiter a copy. Requests with distinct keys, concurrently (run under
// -race), are each counted on their own key, and the keys the store kept
// are still intact afterwards, although Fiber has reused the memory of
// their requests for others. (Without the copies the store's keys turn
// into other clients' values and this test fails.)
func TestKeysOutliveRequest(t *testing.T) {
	mem := &core.MemoryStore{Clock: storetest.NewClock(epoch).Now}
	store := &retaining{Store: mem}
	lim, err := core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)}, core.WithStore(store))
	require.NoError(t, err)

	// app.Test's peer is 0.0.0.0: trust it as the proxy, so that the IP
	// keys read the address from the X-Client header.
	ip, err := ratekitfiber.IP(keyfuncs.TrustedProxies("0.0.0.0"), keyfuncs.ProxyHeader("X-Client"))
	require.NoError(t, err)
	behindProxy := fiber.Config{ProxyHeader: "X-Client", EnableTrustedProxyCheck: true, TrustedProxies: []string{"0.0.0.0"}}
	type localKey struct{}
	fixed := func(k ratekitfiber.Key) func(*fiber.App) (ratekitfiber.Key, error) {
		return func(*fiber.App) (ratekitfiber.Key, error) { return k, nil }
	}
	tests := []struct {
		name string
		cfg  fiber.Config
		key  func(*fiber.App) (ratekitfiber.Key, error)
	}{
		{"header", fiber.Config{}, fixed(ratekitfiber.Header("X-Client"))},
		{"locals", fiber.Config{}, fixed(ratekitfiber.ContextValue(localKey{}))},
		{"ip", fiber.Config{}, fixed(ip)},
		{"fiber-ip", behindProxy, ratekitfiber.ClientIP},
	}
	for n, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store.mu.Lock()
			store.keys = nil
			store.mu.Unlock()
			app := fiber.New(tc.cfg)
			app.Use(func(c *fiber.Ctx) error {
				c.Locals(localKey{}, c.Get("X-Client")) // a value aliasing the request, as a careless auth middleware would store
				return c.Next()
			})
			key, err := tc.key(app)
			require.NoError(t, err)
			app.Use(ratekitfiber.New(lim, key))
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

			const clients, requests = 16, 5
			client := func(i int) string { return "198.51." + strconv.Itoa(n) + "." + strconv.Itoa(100+i) } // distinct per subtest
			var wg sync.WaitGroup
			passed := make([]int, clients)
			for i := 0; i < clients; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range requests {
						r := httptest.NewRequest(http.MethodGet, "/", nil)
						r.Header.Set("X-Client", client(i))
						res, err := app.Test(r, -1)
						if !assert.NoError(t, err) {
							return
						}
						_ = res.Body.Close()
						if res.StatusCode == http.StatusOK {
							passed[i]++
						}
					}
				}()
			}
			wg.Wait()
			for i, got := range passed {
				assert.Equal(t, 3, got, "client %d: each key has its own count of 3", i)
			}
			store.mu.Lock()
			defer store.mu.Unlock()
			count := map[string]int{}
			for _, k := range store.keys {
				count[k]++
			}
			require.Len(t, count, clients, "keys the store kept: %q", store.keys)
			for i := 0; i < clients; i++ {
				assert.Equal(t, requests, count[client(i)])
			}
		})
	}
}

// TestDecisionInContext: with WithDecisionInContext, the handlers after
// the middleware read the decision with DecisionFrom; without it, or on a
// request that was not passed on, there is none.
func TestDecisionInContext(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	var got []core.Decision
	read := func(c *fiber.Ctx) error {
		if d, ok := ratekitfiber.DecisionFrom(c); ok {
			got = append(got, d)
		}
		return c.SendString("ok")
	}
	app := fiber.New()
	app.Get("/on", ratekitfiber.New(lim, ratekitfiber.Header("X-Client"), ratekitfiber.WithDecisionInContext()), read)
	app.Get("/off", ratekitfiber.New(lim, ratekitfiber.Header("X-Client")), read)

	adaptertest.DecisionTrace(t, func(path, client string) int { return do(t, app, http.MethodGet, path, client).status },
		func() []core.Decision { return got }, "/on")
}

// TestIETFHeaders: under WithHeaders(answer.IETF), a 429's RateLimit
// field has t equal to Retry-After (the time until a retry is admitted,
// not until the bucket is full), and no X-Ratelimit fields are sent.
func TestIETFHeaders(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2})
	app := fiber.New()
	app.Use(ratekitfiber.New(lim, ratekitfiber.Header("X-Client"), ratekitfiber.WithHeaders(answer.IETF)))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

	r := do(t, app, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, `"api";q=2;w=20`, r.header.Get(answer.HeaderRateLimitPolicy))
	assert.Equal(t, `"api";r=1;t=10`, r.header.Get(answer.HeaderRateLimit))
	assert.Empty(t, r.header.Get(answer.HeaderLimit))
	do(t, app, http.MethodGet, "/", "alice")
	r = do(t, app, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "10", r.header.Get(answer.HeaderRetryAfter))
	assert.Equal(t, `"api";r=0;t=10`, r.header.Get(answer.HeaderRateLimit), "t is Retry-After, not the 20 s until the bucket is full")
	assert.Empty(t, r.header.Get(answer.HeaderXRetryAfter))
	assert.Empty(t, r.header.Get(answer.HeaderLimit))
}

// TestLimitByIP runs the shorthand's checks on ratekitfiber.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		app := fiber.New()
		app.Use(ratekitfiber.LimitByIP(count, period))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		return servePeer(t, app)
	})
}

// servePeer returns the adaptertest.Serve of a Fiber app that serves each
// request from the peer in its RemoteAddr (app.Test's peer is always
// 0.0.0.0).
func servePeer(t *testing.T, app *fiber.App) adaptertest.Serve {
	return func(r *http.Request) *http.Response {
		var req fasthttp.Request
		req.Header.SetMethod(r.Method)
		req.SetRequestURI(r.URL.RequestURI())
		for name, values := range r.Header {
			for _, v := range values {
				req.Header.Add(name, v)
			}
		}
		addr, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
		require.NoError(t, err)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, addr, nil)
		app.Handler()(&ctx)
		res := &http.Response{StatusCode: ctx.Response.StatusCode(), Header: http.Header{}}
		//lint:ignore SA1019 the module requires a fasthttp without All; the workspace builds it with a newer one
		ctx.Response.Header.VisitAll(func(k, v []byte) { res.Header.Add(string(k), string(v)) })
		return res
	}
}
