package ratekitfiber3_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/gofiber/fiber/v3/middleware/recover"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// serve serves app's requests through the wire format from the peer in
// RemoteAddr, every header line kept (see adaptertest.Wire).
func serve(t *testing.T, app *fiber.App) adaptertest.Serve {
	return adaptertest.Wire(t, func(c net.Conn) error { return fasthttp.ServeConn(c, app.Handler()) })
}

// mountOn returns the mount that builds Fiber's middleware as s says (see
// adaptertest.ScenarioMount) on an app of newApp.
func mountOn(newApp func() *fiber.App) adaptertest.ScenarioMount {
	return func(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
		app := newApp()
		key := map[adaptertest.KeyBy]ratekitfiber3.Key{adaptertest.ByPeerIP: ratekitfiber3.PeerIP, // nil for a nil s.Key: New must panic
			adaptertest.ByHeader: ratekitfiber3.Header(adaptertest.KeyHeader), adaptertest.ByUser: ratekitfiber3.ContextValue(adaptertest.UserKey)}[s.By]
		if s.By == adaptertest.ByKey && s.Key != nil { // copied: Fiber reuses the request's memory
			key = func(c fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
		} else if s.By == adaptertest.ByIP {
			var err error
			key, err = ratekitfiber3.IP(s.IPOptions...)
			require.NoError(t, err)
		}
		opts := []ratekitfiber3.Option{ratekitfiber3.WithHeaders(s.Headers), ratekitfiber3.WithLogger(s.Logger)}
		add := func(given bool, o ...ratekitfiber3.Option) {
			if given {
				opts = append(opts, o...)
			}
		}
		add(s.Skip != nil, ratekitfiber3.WithSkipper(func(c fiber.Ctx) bool { return s.Skip(c.Get(adaptertest.SkipHeader)) }))
		add(s.Cost != nil, ratekitfiber3.WithCost(func(c fiber.Ctx) int { return s.Cost(c.Get(adaptertest.CostHeader)) }))
		add(s.Denied != nil, ratekitfiber3.WithDeniedHandler(func(c fiber.Ctx, d core.Decision) error { return reply(c)(s.Denied(d)) }))
		add(s.OnError != nil, ratekitfiber3.WithErrorHandler(func(c fiber.Ctx, err error) error { return reply(c)(s.OnError(err)) }))
		add(s.Queue != nil, ratekitfiber3.WithQueue(s.Queue))
		add(s.NilOptions, ratekitfiber3.WithSkipper(nil), ratekitfiber3.WithCost(nil), ratekitfiber3.WithDeniedHandler(nil), ratekitfiber3.WithErrorHandler(nil))
		add(s.DecisionInContext, ratekitfiber3.WithDecisionInContext())
		app.Use(func(c fiber.Ctx) error { // the app's middleware
			if u := c.Get(adaptertest.UserHeader); u != "" {
				c.Locals(adaptertest.UserKey, u) // request memory: the middleware copies it
			}
			if s.Context != nil {
				c.SetContext(s.Context(c.Context()))
			}
			return c.Next()
		})
		if s.Rules {
			app.Use(ratekitfiber3.Rules(s.Engine, opts...))
		} else {
			app.Use(ratekitfiber3.New(s.Limiter, key, opts...))
		}
		handler := func(c fiber.Ctx) error { return c.SendString(adaptertest.Body(ratekitfiber3.DecisionFrom(c))) }
		for _, rt := range adaptertest.Routes {
			app.Add([]string{rt.Method}, rt.Path, handler)
		}
		if s.Group != nil {
			app.Group(adaptertest.GroupPrefix, ratekitfiber3.New(s.Group, key, opts...)).Get("/items", handler)
		}
		return serve(t, app)
	}
}

// reply returns a function that answers c with a status and a text body.
func reply(c fiber.Ctx) func(int, string) error {
	return func(status int, body string) error { return c.Status(status).SendString(body) }
}

// TestScenarios runs the conformance table, the rules scenarios and the
// scenarios of every option and key function through Fiber, on its own
// context and on an app's (fiber.NewWithCustomCtx), which the port reads
// as a fiber.Ctx rather than a *fiber.DefaultCtx.
func TestScenarios(t *testing.T) {
	custom := func(app *fiber.App) fiber.CustomCtx { return &customCtx{DefaultCtx: *fiber.NewDefaultCtx(app)} }
	for name, newApp := range map[string]func() *fiber.App{
		"default-ctx": func() *fiber.App { return fiber.New() },
		"custom-ctx":  func() *fiber.App { return fiber.NewWithCustomCtx(custom) },
	} {
		t.Run(name, func(t *testing.T) { adaptertest.RunScenarios(t, mountOn(newApp)) })
	}
}

type customCtx struct{ fiber.DefaultCtx }

// TestFiberErrors: the app's fiber.ErrorHandler gets the context's error
// of a request whose c.Context() ends while it is held, and what an error
// handler or a denied handler returns.
func TestFiberErrors(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	slow := adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	one := adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	errKey, errDenied := errors.New("key store down"), errors.New("denied")
	alice := func(fiber.Ctx) (string, error) { return "alice", nil }
	var seen error
	app := fiber.New(fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error { seen = err; return c.SendStatus(http.StatusBadGateway) }})
	gone := func(c fiber.Ctx) error { // the client went away
		ctx, cancel := context.WithCancel(c.Context())
		cancel()
		c.SetContext(ctx)
		return c.Next()
	}
	ok := func(c fiber.Ctx) error { return c.SendString("ok") }
	app.Get("/held", ratekitfiber3.New(slow, alice), ok)
	app.Get("/gone", gone, ratekitfiber3.New(slow, alice), ok)
	app.Get("/key", ratekitfiber3.New(one, func(fiber.Ctx) (string, error) { return "", errKey },
		ratekitfiber3.WithErrorHandler(func(_ fiber.Ctx, err error) error { return err })), ok)
	app.Get("/denied", ratekitfiber3.New(one, alice, ratekitfiber3.WithDeniedHandler(func(fiber.Ctx, core.Decision) error { return errDenied })), ok)
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
	ok := func(c fiber.Ctx) error { return c.SendString("ok") }
	onRoute, onUse := fiber.New(), fiber.New()
	e, _ := adaptertest.Engine(t, cfg)
	onRoute.Get("/items/:id", ratekitfiber3.Rules(e), ok)
	e, _ = adaptertest.Engine(t, cfg)
	onUse.Use(ratekitfiber3.Rules(e))
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
func keyOn(t *testing.T, app *fiber.App, key ratekitfiber3.Key, peer string, fields ...string) (k string, err error) {
	app.Use(func(c fiber.Ctx) error { k, err = key(c); return nil })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	serve(t, app)(r)
	return k, err
}

// behindProxy is behind a proxy at 10.0.0.2 that writes X-Real-IP.
var behindProxy = fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
	TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.2"}}, EnableIPValidation: true}

// TestKeys: what the scenarios do not ask of Fiber's keys (the rest are
// package fastport's). ClientIP on safe apps: the peer unless it is a
// trusted proxy, whatever a client forges in every proxy header; a 500 on
// another app than the one it checked. Where c.IP() (want) is not the
// client's (the leftmost X-Forwarded-For entry, even from a trusted proxy;
// without TrustProxy, the proxy's), no key and an error naming the setting
// to change. PeerIP ignores Fiber's ProxyHeader, IP reads its own.
func TestKeys(t *testing.T) {
	realIP, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.2"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	other, err := ratekitfiber3.ClientIP(fiber.New())
	require.NoError(t, err)
	_, err = ratekitfiber3.ClientIP(nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.ErrorContains(t, err, "nil app")
	checked := func(header string, proxies ...string) fiber.Config {
		return fiber.Config{ProxyHeader: header, TrustProxy: true, TrustProxyConfig: fiber.TrustProxyConfig{Proxies: proxies}}
	}
	private := fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true, TrustProxyConfig: fiber.TrustProxyConfig{Private: true}, EnableIPValidation: true}
	for _, tc := range []struct {
		name            string
		cfg             fiber.Config
		key             ratekitfiber3.Key // nil: ClientIP of the app
		peer, xff, want string            // xff: X-Forwarded-For, X-Real-IP and CF-Connecting-IP
		err             error             // what the key's error wraps
		refused         []string          // what ClientIP's error says
	}{
		{"ClientIP, default config", fiber.Config{}, nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"ClientIP, an IPv6 peer", fiber.Config{}, nil, "[2001:db8:1:2::7]:4711", "1.1.1.1", "2001:db8:1:2::/64", nil, nil},
		{"ClientIP, TrustProxy without ProxyHeader", checked("", "0.0.0.0/0"), nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"ClientIP behind private proxies, via one", private, nil, "10.0.0.2:4711", "198.51.100.4", "198.51.100.4", nil, nil},
		{"ClientIP behind a proxy, direct", behindProxy, nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"ClientIP behind a proxy, via it", behindProxy, nil, "10.0.0.2:4711", "198.51.100.4", "198.51.100.4", nil, nil},
		{"ClientIP of another app", fiber.Config{}, other, "203.0.113.7:4711", "", "", keyfuncs.ErrMisconfigured, nil},
		{"PeerIP, ProxyHeader trusted from all", checked(fiber.HeaderXForwardedFor, "0.0.0.0/0"), ratekitfiber3.PeerIP, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, nil},
		{"IP of X-Real-IP", fiber.Config{}, realIP, "10.0.0.2:4711", " 198.51.100.4 ", "198.51.100.4", nil, nil},
		{"refused: X-Forwarded-For", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor}, nil, "10.0.0.2:4711", "1.1.1.1", "10.0.0.2", nil,
			[]string{"leftmost", "ratekitfiber3.IP(keyfuncs.TrustedProxies"}},
		{"refused: X-Forwarded-For, checked", checked("x-forwarded-for", "10.0.0.0/8"), nil, "10.0.0.2:4711", "1.1.1.1", "1.1.1.1", nil, []string{"leftmost", "ratekitfiber3.IP"}},
		{"refused: Forwarded, checked", checked("Forwarded", "10.0.0.0/8"), nil, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, []string{"leftmost", "ratekitfiber3.IP"}},
		{"refused: X-Real-IP unchecked", fiber.Config{ProxyHeader: "X-Real-IP", TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.2"}}}, nil,
			"10.0.0.2:4711", "1.1.1.1", "10.0.0.2", nil, []string{`"X-Real-IP"`, "TrustProxy"}},
		{"refused: every IPv4 peer trusted", checked("X-Real-IP", "0.0.0.0/0"), nil, "203.0.113.7:4711", "1.1.1.1", "1.1.1.1", nil, []string{"TrustProxyConfig", "192.0.2.1", "X-Real-Ip"}},
		{"refused: every IPv6 peer trusted", checked("CF-Connecting-IP", "10.0.0.0/8", "::/0"), nil, "[2001:db8::7]:4711", "1.1.1.1", "1.1.1.1", nil,
			[]string{"TrustProxyConfig", "2001:db8::1", "Cf-Connecting-Ip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, key := fiber.New(tc.cfg), tc.key
			if key == nil {
				var err error
				if key, err = ratekitfiber3.ClientIP(app); tc.refused == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
					assert.Nil(t, key)
					for _, w := range tc.refused {
						assert.ErrorContains(t, err, w)
					}
					key = func(c fiber.Ctx) (string, error) { return strings.Clone(c.IP()), nil } // c.IP() itself
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
// careless auth middleware would.
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
	app := fiber.New(behindProxy)
	clientIP, err := ratekitfiber3.ClientIP(app)
	require.NoError(t, err)
	ip, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.2"))
	require.NoError(t, err)
	app.Use(func(c fiber.Ctx) error { c.Locals("user", c.Get("X-Client")); return c.Next() })
	for _, key := range []ratekitfiber3.Key{ratekitfiber3.Header("X-Client"), ratekitfiber3.ContextValue("user"), ip, clientIP} {
		app.Use(ratekitfiber3.New(lim, key))
	}
	app.Use(ratekitfiber3.Rules(e))
	app.All("/*", func(c fiber.Ctx) error { return c.SendString("ok") })

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
	alice := keysOf("PATCH", "alice", "198.51.100.1")
	require.Equal(t, want("PATCH", "alice", "198.51.100.1"), alice)
	assert.Equal(t, want("PATCH", "mally", "198.51.100.2"), keysOf("PATCH", "mally", "198.51.100.2"))
	assert.Equal(t, want("PATCH", "alice", "198.51.100.1"), alice, "the first request's keys, as the store kept them")
}

// inPlace adds middleware mw (if any) and a route GET / to app, and returns
// a function that serves in place, without a network or the goroutines of
// app.Test, the request it returns (GET / from 10.0.0.2, until changed),
// and returns the status.
func inPlace(app *fiber.App, mw fiber.Handler) (func() int, *fasthttp.Request) {
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	h, ctx := app.Handler(), new(fasthttp.RequestCtx)
	ctx.Init(new(fasthttp.Request), &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 4711}, nil)
	ctx.Request.SetRequestURI("/")
	return func() int { h(ctx); return ctx.Response.StatusCode() }, &ctx.Request
}

// TestAllocs: on the allowed path the middleware allocates nothing of its
// own. PeerIP costs nothing once the client is hot, where c.IP() costs
// Fiber a string; ClientIP c.IP()'s string and the key's copy; a decision
// kept for DecisionFrom two; Rules (a constant generic_key rule, about a
// thousand requests per count in one second of a stopped clock) nothing;
// Concurrency its lease. Fiber v3.1.0's counts, asserted exactly.
func TestAllocs(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 4000}},
	}})
	inFlight, err := concurrency.NewLimiter(1000)
	require.NoError(t, err)
	app := fiber.New()
	clientIP, err := ratekitfiber3.ClientIP(app)
	require.NoError(t, err)
	constant := func(fiber.Ctx) (string, error) { return "client", nil }
	with := func(mw fiber.Handler) func() int { serve, _ := inPlace(fiber.New(), mw); return serve }
	alone := adaptertest.Allocs(t, with(nil))
	withClientIP, _ := inPlace(app, ratekitfiber3.New(adaptertest.Unlimited(), clientIP))
	for _, tc := range []struct {
		name  string
		serve func() int
		added float64
	}{
		{"fiber + c.IP()", with(func(c fiber.Ctx) error { _ = c.IP(); return c.Next() }), 1},
		{"constant key", with(ratekitfiber3.New(adaptertest.Unlimited(), constant)), 0},
		{"PeerIP", with(ratekitfiber3.New(adaptertest.Unlimited(), ratekitfiber3.PeerIP)), 0},
		{"ClientIP", withClientIP, 2},
		{"decision in context", with(ratekitfiber3.New(adaptertest.Unlimited(), constant, ratekitfiber3.WithDecisionInContext())), 2},
		{"LimitByIP", with(ratekitfiber3.LimitByIP(4000, 100*time.Microsecond)), 0},
		{"Rules", with(ratekitfiber3.Rules(e)), 0},
		{"Concurrency, PeerIP: its lease", with(ratekitfiber3.Concurrency(inFlight, ratekitfiber3.PeerIP)), 1},
	} {
		if n := adaptertest.Allocs(t, tc.serve); n != alone+tc.added {
			t.Errorf("%s: %v allocs/request, want fiber's %v + %v", tc.name, n, alone, tc.added)
		}
	}
}

// TestLimitByIP runs the shorthand's checks on ratekitfiber3.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		app := fiber.New()
		app.Use(ratekitfiber3.LimitByIP(count, period))
		app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
		return serve(t, app)
	})
}

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(c fiber.Ctx) (string, error) { return s.Key(strings.Clone(c.Get(adaptertest.KeyHeader))) }
		app := fiber.New()
		app.Use(recover.New())
		app.Use(ratekitfiber3.Concurrency(s.Limiter, key))
		app.Get("/", func(c fiber.Ctx) error { s.Handle(); return c.SendString("ok") })
		return serve(t, app)
	})
	assert.Panics(t, func() { ratekitfiber3.Concurrency(nil, ratekitfiber3.PeerIP) })
}

// TestAdminMounted: the admin handler behind the app's own auth group,
// under Fiber's adaptor.HTTPHandler or as it is (Fiber v3 adapts an
// http.Handler itself), sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	for name, wrap := range map[string]func(http.Handler) any{
		"adaptor":      func(h http.Handler) any { return adaptor.HTTPHandler(h) },
		"http.Handler": func(h http.Handler) any { return h },
	} {
		t.Run(name, func(t *testing.T) {
			adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
				app := fiber.New()
				app.Get("/hello", ratekitfiber3.New(lim, ratekitfiber3.Header(adaptertest.KeyHeader)), func(c fiber.Ctx) error { return c.SendString("hi") })
				auth := func(c fiber.Ctx) error {
					if c.Get("Authorization") != adaptertest.OperatorAuth {
						return c.SendStatus(fiber.StatusUnauthorized)
					}
					return c.Next()
				}
				app.Group("/admin/ratekit", auth).All("/*", wrap(ops))
				return serve(t, app)
			})
		})
	}
}
