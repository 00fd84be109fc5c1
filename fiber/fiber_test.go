package ratekitfiber_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// serve serves app's requests through the wire format from the peer in
// RemoteAddr, every header line kept (see adaptertest.Wire).
func serve(t *testing.T, app *fiber.App) adaptertest.Serve {
	return adaptertest.Wire(t, func(c net.Conn) error { return fasthttp.ServeConn(c, app.Handler()) })
}

// mount builds Fiber's middleware as s says (see adaptertest.ScenarioMount).
func mount(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
	key := map[adaptertest.KeyBy]ratekitfiber.Key{adaptertest.ByPeerIP: ratekitfiber.PeerIP, // nil for a nil s.Key: New must panic
		adaptertest.ByHeader: ratekitfiber.Header(adaptertest.KeyHeader), adaptertest.ByUser: ratekitfiber.ContextValue(adaptertest.UserKey)}[s.By]
	if s.By == adaptertest.ByKey && s.Key != nil { // copied: Fiber reuses the request's memory
		key = func(c *fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
	} else if s.By == adaptertest.ByIP {
		var err error
		key, err = ratekitfiber.IP(s.IPOptions...)
		require.NoError(t, err)
	}
	opts := []ratekitfiber.Option{ratekitfiber.WithHeaders(s.Headers), ratekitfiber.WithLogger(s.Logger)}
	add := func(given bool, o ...ratekitfiber.Option) {
		if given {
			opts = append(opts, o...)
		}
	}
	add(s.Skip != nil, ratekitfiber.WithSkipper(func(c *fiber.Ctx) bool { return s.Skip(c.Get(adaptertest.SkipHeader)) }))
	add(s.Cost != nil, ratekitfiber.WithCost(func(c *fiber.Ctx) int { return s.Cost(c.Get(adaptertest.CostHeader)) }))
	add(s.Denied != nil, ratekitfiber.WithDeniedHandler(func(c *fiber.Ctx, d core.Decision) error { return reply(c)(s.Denied(d)) }))
	add(s.OnError != nil, ratekitfiber.WithErrorHandler(func(c *fiber.Ctx, err error) error { return reply(c)(s.OnError(err)) }))
	add(s.Queue != nil, ratekitfiber.WithQueue(s.Queue))
	add(s.NilOptions, ratekitfiber.WithSkipper(nil), ratekitfiber.WithCost(nil), ratekitfiber.WithDeniedHandler(nil), ratekitfiber.WithErrorHandler(nil))
	add(s.DecisionInContext, ratekitfiber.WithDecisionInContext())
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error { // the app's middleware
		if u := c.Get(adaptertest.UserHeader); u != "" {
			c.Locals(adaptertest.UserKey, u) // request memory: the middleware copies it
		}
		if s.Context != nil {
			c.SetUserContext(s.Context(c.UserContext()))
		}
		return c.Next()
	})
	if s.Rules {
		app.Use(ratekitfiber.Rules(s.Engine, opts...))
	} else {
		app.Use(ratekitfiber.New(s.Limiter, key, opts...))
	}
	handler := func(c *fiber.Ctx) error { return c.SendString(adaptertest.Body(ratekitfiber.DecisionFrom(c))) }
	for _, rt := range adaptertest.Routes {
		app.Add(rt.Method, rt.Path, handler)
	}
	if s.Group != nil {
		app.Group(adaptertest.GroupPrefix, ratekitfiber.New(s.Group, key, opts...)).Get("/items", handler)
	}
	return serve(t, app)
}

// reply returns a function that answers c with a status and a text body.
func reply(c *fiber.Ctx) func(int, string) error {
	return func(status int, body string) error { return c.Status(status).SendString(body) }
}

// TestScenarios runs the conformance table, the rules scenarios and the
// scenarios of every option and key function through Fiber.
func TestScenarios(t *testing.T) { adaptertest.RunScenarios(t, mount) }

// TestFiberErrors: the app's fiber.ErrorHandler gets the context's error
// of a request whose user context ends while it is held, and what an error
// handler or a denied handler returns.
func TestFiberErrors(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	slow := adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	one := adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	errKey, errDenied := errors.New("key store down"), errors.New("denied")
	alice := func(*fiber.Ctx) (string, error) { return "alice", nil }
	var seen error
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error { seen = err; return c.SendStatus(http.StatusBadGateway) }})
	gone := func(c *fiber.Ctx) error { // the client went away
		ctx, cancel := context.WithCancel(c.UserContext())
		cancel()
		c.SetUserContext(ctx)
		return c.Next()
	}
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	app.Get("/held", ratekitfiber.New(slow, alice), ok)
	app.Get("/gone", gone, ratekitfiber.New(slow, alice), ok)
	app.Get("/key", ratekitfiber.New(one, func(*fiber.Ctx) (string, error) { return "", errKey },
		ratekitfiber.WithErrorHandler(func(_ *fiber.Ctx, err error) error { return err })), ok)
	app.Get("/denied", ratekitfiber.New(one, alice, ratekitfiber.WithDeniedHandler(func(*fiber.Ctx, core.Decision) error { return errDenied })), ok)
	for _, c := range []struct {
		target string
		status int
		err    error
	}{
		{"/held", 200, nil}, {"/denied", 200, nil}, // without delay; alice's one request of the minute
		{"/gone", 502, context.Canceled}, {"/key", 502, errKey}, {"/denied", 502, errDenied},
	} {
		seen = nil
		assert.Equal(t, c.status, serve(t, app)(httptest.NewRequest(http.MethodGet, c.target, nil)).StatusCode, c.target)
		assert.ErrorIs(t, seen, c.err, c.target)
	}
}

// TestRulesRouting: the rules see a request as Fiber routes it: /LOGIN/ is
// /login. Descriptor key route is the route pattern for middleware on the
// route (/items/1 and /items/2 share "GET /items/:id"); on app.Use, before
// Fiber has found the route, the path (never the prefix of app.Use).
func TestRulesRouting(t *testing.T) {
	rate := func(n int) *rules.RateLimit { return &rules.RateLimit{Unit: "minute", RequestsPerUnit: n} }
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: rate(3)},
		{Key: "route", Match: &rules.Match{Path: "/items/*"}, RateLimit: rate(3)},
		{Key: "route", Value: "GET /items/:id", RateLimit: rate(2)},
	}}
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	onRoute, onUse := fiber.New(), fiber.New()
	e, _ := adaptertest.Engine(t, cfg)
	onRoute.Get("/items/:id", ratekitfiber.Rules(e), ok)
	e, _ = adaptertest.Engine(t, cfg)
	onUse.Use(ratekitfiber.Rules(e))
	onUse.Get("/items/:id", ok)
	onUse.Post("/login", ok)
	for _, c := range []struct {
		app                            *fiber.App
		method, path, limit, remaining string
		status                         int
	}{
		{onUse, "POST", "/LOGIN/", "3", "2", 200}, {onUse, "POST", "/Login", "3", "1", 200},
		{onUse, "POST", "/login/", "3", "0", 200}, {onUse, "POST", "/login", "3", "0", 429},
		{onRoute, "GET", "/items/1", "2", "1", 200}, {onRoute, "GET", "/items/2", "2", "0", 200},
		{onUse, "GET", "/items/1", "3", "2", 200}, {onUse, "GET", "/items/2", "3", "2", 200},
	} {
		res := serve(t, c.app)(httptest.NewRequest(c.method, c.path, nil))
		assert.Equal(t, c.status, res.StatusCode, c.path)
		assert.Equal(t, c.limit, res.Header.Get("X-Ratelimit-Limit"), c.path)
		assert.Equal(t, c.remaining, res.Header.Get("X-Ratelimit-Remaining"), c.path)
	}
}

// keyOn returns what key says of a request to app from peer with the
// header fields given in name, value pairs.
func keyOn(t *testing.T, app *fiber.App, key ratekitfiber.Key, peer string, fields ...string) (k string, err error) {
	app.Use(func(c *fiber.Ctx) error { k, err = key(c); return nil })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	serve(t, app)(r)
	return k, err
}

// behindProxy is behind a proxy at 10.0.0.2 that writes X-Real-IP.
var behindProxy = fiber.Config{ProxyHeader: "X-Real-IP", EnableTrustedProxyCheck: true,
	TrustedProxies: []string{"10.0.0.2"}, EnableIPValidation: true}

// TestKeys: what the scenarios do not ask of Fiber's keys (the rest are
// package fastport's). ClientIP on safe apps: the peer unless it is a
// trusted proxy, whatever a client forges in every proxy header; a 500 on
// another app than the one it checked. On an app where a client chooses
// c.IP() (want: what c.IP() is there), no key and an error naming the
// setting to change. PeerIP ignores Fiber's ProxyHeader, IP reads its own.
func TestKeys(t *testing.T) {
	realIP, err := ratekitfiber.IP(keyfuncs.TrustedProxies("10.0.0.2"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	other, err := ratekitfiber.ClientIP(fiber.New())
	require.NoError(t, err)
	_, err = ratekitfiber.ClientIP(nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.ErrorContains(t, err, "nil app")
	checked := func(header string, proxies ...string) fiber.Config {
		return fiber.Config{ProxyHeader: header, EnableTrustedProxyCheck: true, TrustedProxies: proxies}
	}
	for _, tc := range []struct {
		name            string
		cfg             fiber.Config
		key             ratekitfiber.Key // nil: ClientIP of the app
		peer, xff, want string           // xff: X-Forwarded-For, X-Real-IP and CF-Connecting-IP
		err             error            // what the key's error wraps
		refused         []string         // what ClientIP's error says
	}{
		{"ClientIP, default config", fiber.Config{}, nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"ClientIP, an IPv6 peer", fiber.Config{}, nil, "[2001:db8:1:2::7]:4711", "1.1.1.1", "2001:db8:1:2::/64", nil, nil},
		{"ClientIP behind a proxy, direct", behindProxy, nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"ClientIP behind a proxy, via it", behindProxy, nil, "10.0.0.2:4711", "198.51.100.4", "198.51.100.4", nil, nil},
		{"ClientIP of another app", fiber.Config{}, other, "203.0.113.7:4711", "", "", keyfuncs.ErrMisconfigured, nil},
		{"PeerIP, ProxyHeader set", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor}, ratekitfiber.PeerIP, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"IP of X-Real-IP", fiber.Config{}, realIP, "10.0.0.2:4711", " 198.51.100.4 ", "198.51.100.4", nil, nil},
		{"refused: X-Forwarded-For", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor}, nil, "203.0.113.7:4711", "1.1.1.1", "1.1.1.1", nil,
			[]string{"leftmost", "ratekitfiber.IP(keyfuncs.TrustedProxies"}},
		{"refused: X-Forwarded-For, checked", checked("x-forwarded-for", "10.0.0.0/8"), nil, "10.0.0.2:4711", "1.1.1.1", "1.1.1.1", nil, []string{"leftmost", "ratekitfiber.IP"}},
		{"refused: Forwarded, checked", checked("Forwarded", "10.0.0.0/8"), nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, []string{"leftmost", "ratekitfiber.IP"}},
		{"refused: X-Real-IP unchecked", fiber.Config{ProxyHeader: "X-Real-IP", TrustedProxies: []string{"10.0.0.2"}}, nil, "203.0.113.7:4711", "1.1.1.1", "1.1.1.1", nil,
			[]string{`"X-Real-IP"`, "EnableTrustedProxyCheck"}},
		{"refused: every IPv4 peer trusted", checked("X-Real-IP", "0.0.0.0/0"), nil, "203.0.113.7:4711", "1.1.1.1", "1.1.1.1", nil, []string{"TrustedProxies", "192.0.2.1", "X-Real-Ip"}},
		{"refused: every IPv6 peer trusted", checked("CF-Connecting-IP", "10.0.0.0/8", "::/0"), nil, "[2001:db8::7]:4711", "1.1.1.1", "1.1.1.1", nil,
			[]string{"TrustedProxies", "2001:db8::1", "Cf-Connecting-Ip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, key := fiber.New(tc.cfg), tc.key
			if key == nil {
				var err error
				if key, err = ratekitfiber.ClientIP(app); tc.refused == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
					assert.Nil(t, key)
					for _, w := range tc.refused {
						assert.ErrorContains(t, err, w)
					}
					key = func(c *fiber.Ctx) (string, error) { return strings.Clone(c.IP()), nil } // c.IP() itself
				}
			}
			k, err := keyOn(t, app, key, tc.peer, "X-Forwarded-For", tc.xff, "X-Real-IP", tc.xff, "CF-Connecting-IP", tc.xff)
			assert.Equal(t, tc.want, k)
			assert.ErrorIs(t, err, tc.err)
		})
	}
}

// retaining is a store that keeps every key it is given, as a store that
// caches keys in a map would.
type retaining struct {
	core.Store
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
	c.s.keys = append(c.s.keys, key)
	return c.Counter.Take(ctx, key, cost, ds)
}

// TestKeysCopied: the keys that the key functions and the rules hand the
// store are copies. Of two requests served in place, the second of the
// same lengths (fasthttp overwrites every buffer of the first), the first's
// keys stay intact. The app stores request memory in c.Locals, as a
// careless auth middleware would; Fiber v2 reads a custom method from it.
func TestKeysCopied(t *testing.T) {
	store := &retaining{Store: &core.MemoryStore{}}
	lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(100)}, core.WithStore(store))
	require.NoError(t, err)
	e, err := rules.NewEngine(rules.WithStore(store), rules.WithUserKey("user"))
	require.NoError(t, err)
	rate := &rules.RateLimit{Unit: "minute", RequestsPerUnit: 100}
	require.NoError(t, e.Load(rules.Config{Domain: "mem", Descriptors: []rules.Descriptor{
		{Key: "header:X-Client", RateLimit: rate}, {Key: "query:c", RateLimit: rate}, {Key: "path", RateLimit: rate},
		{Key: "route", RateLimit: rate}, {Key: "user", RateLimit: rate}, {Key: "method", RateLimit: rate},
	}}))
	cfg := behindProxy
	cfg.RequestMethods = append([]string{"PURGE", "MERGE"}, fiber.DefaultMethods...)
	app := fiber.New(cfg)
	clientIP, err := ratekitfiber.ClientIP(app)
	require.NoError(t, err)
	ip, err := ratekitfiber.IP(keyfuncs.TrustedProxies("10.0.0.2"))
	require.NoError(t, err)
	app.Use(func(c *fiber.Ctx) error { c.Locals("user", c.Get("X-Client")); return c.Next() })
	for _, key := range []ratekitfiber.Key{ratekitfiber.Header("X-Client"), ratekitfiber.ContextValue("user"), ip, clientIP} {
		app.Use(ratekitfiber.New(lim, key))
	}
	app.Use(ratekitfiber.Rules(e))
	app.All("/*", func(c *fiber.Ctx) error { return c.SendString("ok") })

	serve, req := inPlace(app, nil)
	keysOf := func(method, who, addr string) []string {
		n := len(store.keys)
		req.Header.SetMethod(method)
		req.SetRequestURI("/p/" + who + "?c=" + who)
		req.Header.Set("X-Client", who)
		req.Header.Set("X-Forwarded-For", addr)
		req.Header.Set("X-Real-IP", addr)
		require.Equal(t, http.StatusOK, serve())
		return append([]string(nil), store.keys[n:]...)
	}
	want := func(method, who, addr string) []string {
		return []string{who, who, addr, addr, // New: Header, ContextValue, IP, ClientIP
			who, who, "/p/" + who, method + " /p/" + who, who, method} // Rules
	}
	alice := keysOf("PURGE", "alice", "198.51.100.1")
	require.Equal(t, want("PURGE", "alice", "198.51.100.1"), alice)
	assert.Equal(t, want("MERGE", "mally", "198.51.100.2"), keysOf("MERGE", "mally", "198.51.100.2"))
	assert.Equal(t, want("PURGE", "alice", "198.51.100.1"), alice, "the first request's keys, as the store kept them")
}

// inPlace adds middleware mw (if any) and a route GET / to app, and returns
// a function that serves in place, without a network or the goroutines of
// app.Test, the request it returns (GET / from 10.0.0.2, until changed),
// and returns the status.
func inPlace(app *fiber.App, mw fiber.Handler) (func() int, *fasthttp.Request) {
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	h, ctx := app.Handler(), new(fasthttp.RequestCtx)
	ctx.Init(new(fasthttp.Request), &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 4711}, nil)
	ctx.Request.SetRequestURI("/")
	return func() int { h(ctx); return ctx.Response.StatusCode() }, &ctx.Request
}

// TestAllocs: on the allowed path the middleware allocates nothing of its
// own: with a constant key, with PeerIP once the client is hot (where
// c.IP() costs Fiber a string), under Rules with a constant generic_key
// rule (about a thousand requests per count in one second of a stopped
// clock). Concurrency allocates the request's lease, nothing for its key.
func TestAllocs(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
	}})
	inFlight, err := concurrency.NewLimiter(1000)
	require.NoError(t, err)
	constant := func(*fiber.Ctx) (string, error) { return "client", nil }
	with := func(mw fiber.Handler) func() int { serve, _ := inPlace(fiber.New(), mw); return serve }
	alone := adaptertest.Allocs(t, with(nil))
	for _, tc := range []struct {
		name  string
		mw    fiber.Handler
		added float64
	}{
		{"constant key", ratekitfiber.New(adaptertest.Unlimited(), constant), 0},
		{"PeerIP", ratekitfiber.New(adaptertest.Unlimited(), ratekitfiber.PeerIP), 0},
		{"Rules", ratekitfiber.Rules(e), 0},
		{"Concurrency, PeerIP: its lease", ratekitfiber.Concurrency(inFlight, ratekitfiber.PeerIP), 1},
	} {
		if n := adaptertest.Allocs(t, with(tc.mw)); n != alone+tc.added {
			t.Errorf("%s: %v allocs/request, want fiber's %v + %v", tc.name, n, alone, tc.added)
		}
	}
}

// TestLimitByIP runs the shorthand's checks on ratekitfiber.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		app := fiber.New()
		app.Use(ratekitfiber.LimitByIP(count, period))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		return serve(t, app)
	})
}

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c *fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
		app := fiber.New()
		app.Use(recover.New())
		app.Use(ratekitfiber.Concurrency(s.Limiter, key))
		app.Get("/", func(c *fiber.Ctx) error { s.Handle(); return c.SendString("ok") })
		return serve(t, app)
	})
	assert.Panics(t, func() { ratekitfiber.Concurrency(nil, ratekitfiber.PeerIP) })
}

// TestAdminMounted: the admin handler under Fiber's adaptor.HTTPHandler,
// behind the app's own auth group, sees the full path and acts on the
// limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		app := fiber.New()
		app.Get("/hello", ratekitfiber.New(lim, ratekitfiber.Header(adaptertest.KeyHeader)), func(c *fiber.Ctx) error { return c.SendString("hi") })
		auth := func(c *fiber.Ctx) error {
			if c.Get("Authorization") != adaptertest.OperatorAuth {
				return c.SendStatus(fiber.StatusUnauthorized)
			}
			return c.Next()
		}
		app.Group("/admin/ratekit", auth).All("/*", adaptor.HTTPHandler(ops))
		return serve(t, app)
	})
}
