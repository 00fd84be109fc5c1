package ratekitfiber3_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	"github.com/ratekit/ratekit/rules"
)

func rate(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

func okHandler(c fiber.Ctx) error { return c.SendString("ok") }

// TestRulesConformance: Rules on app.Use answers the rules scenarios as
// stdhttp.Rules does, on Fiber's own context and on an app's custom one.
func TestRulesConformance(t *testing.T) {
	for name, newApp := range map[string]func() *fiber.App{
		"default-ctx": func() *fiber.App { return fiber.New() },
		"custom-ctx":  func() *fiber.App { return fiber.NewWithCustomCtx(newCustomCtx) },
	} {
		t.Run(name, func(t *testing.T) {
			adaptertest.RunRules(t, func(t *testing.T, e *rules.Engine) adaptertest.Serve {
				app := newApp()
				app.Use(ratekitfiber3.Rules(e))
				app.Get("/", okHandler)
				app.Post("/login", okHandler)
				app.Get("/api/items", okHandler)
				return serve(t, app)
			})
		})
	}
}

// customCtx is an app's own context (fiber.NewWithCustomCtx), which Rules
// sees as a fiber.Ctx rather than Fiber's *fiber.DefaultCtx.
type customCtx struct{ fiber.DefaultCtx }

func newCustomCtx(app *fiber.App) fiber.CustomCtx {
	return &customCtx{DefaultCtx: *fiber.NewDefaultCtx(app)}
}

// TestRulesPathCase: Fiber routes /LOGIN/ to /login, and so do the rules:
// the path they match is the one Fiber routes by.
func TestRulesPathCase(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{{
		Key:       "remote_address",
		Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
		RateLimit: rate("minute", 5),
	}}})
	app := fiber.New()
	app.Use(ratekitfiber3.Rules(e))
	app.Post("/login", okHandler)
	for i, path := range []string{"/LOGIN/", "/login", "/Login", "/login/", "/LOGIN"} {
		res := do(t, app, http.MethodPost, path, "")
		require.Equal(t, http.StatusOK, res.status, path)
		assert.Equal(t, strconv.Itoa(4-i), res.remaining, "%s: one counter for every spelling", path)
	}
	assert.Equal(t, http.StatusTooManyRequests, do(t, app, http.MethodPost, "/login", "").status)
	assert.Equal(t, http.StatusTooManyRequests, do(t, app, http.MethodPost, "/LOGIN/", "").status)
}

// TestRulesRoute: descriptor key route is the Fiber route pattern when
// the middleware is on the route: /items/1 and /items/2 share a counter.
// On app.Use, Fiber has not found the route yet: the route is the path.
func TestRulesRoute(t *testing.T) {
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "route", RateLimit: rate("minute", 3)}}}
	e, _ := adaptertest.Engine(t, cfg)
	var keys []string
	item := func(c fiber.Ctx) error {
		_, ks, err := e.Matches(ratekitfiber3.RulesRequest(c))
		require.NoError(t, err)
		keys = append(keys, ks...)
		return c.SendString("item")
	}
	app := fiber.New()
	app.Get("/items/:id", ratekitfiber3.Rules(e), item)
	assert.Equal(t, "2", do(t, app, http.MethodGet, "/items/1", "").remaining)
	assert.Equal(t, "1", do(t, app, http.MethodGet, "/items/2", "").remaining)
	assert.Equal(t, []string{"GET /items/:id", "GET /items/:id"}, keys)

	e, _ = adaptertest.Engine(t, cfg)
	var useKeys []string
	app = fiber.New()
	app.Use(ratekitfiber3.Rules(e))
	app.Use(func(c fiber.Ctx) error {
		_, ks, err := e.Matches(ratekitfiber3.RulesRequest(c))
		require.NoError(t, err)
		useKeys = append(useKeys, ks...)
		return c.Next()
	})
	app.Get("/items/:id", okHandler)
	assert.Equal(t, "2", do(t, app, http.MethodGet, "/items/1", "").remaining)
	assert.Equal(t, "2", do(t, app, http.MethodGet, "/items/2", "").remaining)
	assert.Equal(t, []string{"GET /items/1", "GET /items/2"}, useKeys, "never the prefix of app.Use, one counter for all routes")
}

// TestRulesUser: key user reads what an upstream middleware stored with
// c.Locals, and falls back to c.Context().
func TestRulesUser(t *testing.T) {
	type ctxKey struct{}
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: rate("minute", 2)}}}
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		if u := c.Get("X-Client"); u != "" {
			c.Locals("user", u) // request memory: Rules copies it
		}
		return c.Next()
	})
	e, _ := adaptertest.Engine(t, cfg, rules.WithUserKey("user"))
	app.Use(ratekitfiber3.Rules(e))
	app.Get("/", okHandler)

	for i, want := range []int{200, 200, 429} {
		assert.Equal(t, want, do(t, app, http.MethodGet, "/", "alice").status, "alice %d", i+1)
	}
	assert.Equal(t, http.StatusOK, do(t, app, http.MethodGet, "/", "bob").status)
	res := do(t, app, http.MethodGet, "/", "")
	assert.Equal(t, http.StatusOK, res.status, "anonymous: no user, no rule")
	assert.Empty(t, res.header.Get(answer.HeaderLimit))

	e, _ = adaptertest.Engine(t, cfg, rules.WithUserKey(ctxKey{}))
	app = fiber.New()
	app.Use(func(c fiber.Ctx) error {
		c.SetContext(context.WithValue(c.Context(), ctxKey{}, 42))
		return c.Next()
	})
	app.Use(ratekitfiber3.Rules(e))
	app.Get("/", func(c fiber.Ctx) error {
		_, keys, err := e.Matches(ratekitfiber3.RulesRequest(c))
		require.NoError(t, err)
		return c.SendString(fmt.Sprint(keys))
	})
	res = do(t, app, http.MethodGet, "/", "")
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
	app := fiber.New()
	app.Use(ratekitfiber3.Rules(e,
		ratekitfiber3.WithSkipper(func(c fiber.Ctx) bool { return c.Path() == "/health" }),
		ratekitfiber3.WithCost(func(c fiber.Ctx) int { return fiber.Query[int](c, "n", 1) }),
		ratekitfiber3.WithDeniedHandler(func(c fiber.Ctx, d core.Decision) error {
			denied = d
			return c.Status(http.StatusTeapot).SendString("slow down")
		}),
		ratekitfiber3.WithErrorHandler(func(c fiber.Ctx, err error) error {
			gotErr = err
			return c.Status(http.StatusServiceUnavailable).SendString("later")
		})))
	app.Get("/health", okHandler)
	app.Get("/", func(c fiber.Ctx) error { served++; return okHandler(c) })

	for range 3 {
		res := do(t, app, http.MethodGet, "/health", "")
		assert.Equal(t, http.StatusOK, res.status)
		assert.Empty(t, res.header.Get(answer.HeaderLimit), "skipped: no headers")
	}
	assert.Equal(t, "1", do(t, app, http.MethodGet, "/?n=2", "").remaining, "cost 2 of 3; skipped requests did not count")
	res := do(t, app, http.MethodGet, "/?n=2", "")
	assert.Equal(t, http.StatusTeapot, res.status)
	assert.Equal(t, "slow down", res.body)
	assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter), "headers are set before the denied handler runs")
	assert.False(t, denied.Allowed)
	assert.Equal(t, 1, served)

	res = do(t, app, http.MethodGet, "/?n=0&plan=broken", "")
	assert.Equal(t, http.StatusServiceUnavailable, res.status)
	assert.ErrorIs(t, gotErr, errBackend)
	assert.Equal(t, 1, served)
}

func TestRulesPanicsOnNil(t *testing.T) {
	assert.Panics(t, func() { ratekitfiber3.Rules(nil) })
}

// allSources is a rule set that keys on every value Rules reads from the
// request: header, query, path, route (the path, on app.Use), method,
// user (c.Locals), peer address.
func allSources() rules.Config {
	return rules.Config{Domain: "mem", Descriptors: []rules.Descriptor{
		{Key: "header:X-Client", RateLimit: rate("minute", 3)},
		{Key: "query:c", RateLimit: rate("minute", 3)},
		{Key: "path", RateLimit: rate("minute", 3)},
		{Key: "route", RateLimit: rate("minute", 3)},
		{Key: "method", Descriptors: []rules.Descriptor{{Key: "header:X-Client", RateLimit: rate("minute", 3)}}},
		{Key: "user", RateLimit: rate("minute", 3)},
		{Key: "remote_address", Descriptors: []rules.Descriptor{{Key: "query:c", RateLimit: rate("minute", 3)}}},
	}}
}

type userKey struct{}

// aliasUser stores the X-Client header, unsafe request memory, as the
// user: Rules must copy it.
func aliasUser(c fiber.Ctx) error {
	c.Locals(userKey{}, c.Get("X-Client"))
	return c.Next()
}

// TestRulesKeysOutliveRequest: the keys the engine hands the store, and
// those Matches returns, are copies. Requests with distinct values,
// concurrently (run under -race), are each counted on their own keys, and
// the keys the store kept are still intact afterwards, although Fiber has
// reused the memory of their requests for others.
func TestRulesKeysOutliveRequest(t *testing.T) {
	mem := &core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch).Now}
	store := &retaining{Store: mem}
	e, err := rules.NewEngine(rules.WithStore(store), rules.WithUserKey(userKey{}))
	require.NoError(t, err)
	require.NoError(t, e.Load(allSources()))
	app := fiber.New()
	app.Use(aliasUser)
	app.Use(ratekitfiber3.Rules(e))
	app.Get("/*", okHandler)

	const clients, requests = 16, 5
	client := func(i int) string { return "client-" + strconv.Itoa(100+i) }
	var wg sync.WaitGroup
	passed := make([]int, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range requests {
				r := httptest.NewRequest(http.MethodGet, "/p/"+client(i)+"?c="+client(i), nil)
				r.Header.Set("X-Client", client(i))
				res, err := app.Test(r, noTimeout)
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
	want := map[string]int{}
	for i := 0; i < clients; i++ {
		c := client(i)
		n := strconv.Itoa(len(c))
		want[c] = 3*3 + 2             // header, query and user, for each request admitted; the first check (header) for the 2 rejected too
		want["/p/"+c] = 3             // path
		want["GET /p/"+c] = 3         // route: on app.Use, the path
		want["3:GET"+n+":"+c] = 3     // method, then header
		want["7:0.0.0.0"+n+":"+c] = 3 // remote_address, then query
	}
	assert.Equal(t, want, count, "keys the store kept")
}

// TestRulesKeysCopied: a request served in place, whose memory the next
// one overwrites (same lengths, so fasthttp reuses every buffer): the keys
// of the first stay intact, in the store and as Matches returned them.
func TestRulesKeysCopied(t *testing.T) {
	mem := &core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch).Now}
	store := &retaining{Store: mem}
	e, err := rules.NewEngine(rules.WithStore(store), rules.WithUserKey(userKey{}))
	require.NoError(t, err)
	require.NoError(t, e.Load(allSources()))
	var matched [][]string
	app := fiber.New()
	app.Use(aliasUser)
	app.Use(ratekitfiber3.Rules(e))
	app.Use(func(c fiber.Ctx) error {
		_, keys, err := e.Matches(ratekitfiber3.RulesRequest(c))
		require.NoError(t, err)
		matched = append(matched, keys)
		return c.Next()
	})
	app.All("/*", okHandler)

	h := app.Handler()
	var req fasthttp.Request
	ctx := new(fasthttp.RequestCtx)
	serve := func(method, who string) {
		req.Header.SetMethod(method)
		req.SetRequestURI("/p/" + who + "?c=" + who)
		req.Header.Set("X-Client", who)
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 4711}, nil)
		h(ctx)
		require.Equal(t, http.StatusOK, ctx.Response.StatusCode())
	}
	serve("PATCH", "alice")
	first := append([]string(nil), store.keys...)
	want := []string{"alice", "alice", "/p/alice", "PATCH /p/alice", "5:PATCH5:alice", "alice", "10:192.0.2.105:alice"}
	require.Equal(t, want, first)
	require.Equal(t, [][]string{want}, matched)

	serve("PATCH", "mally")
	assert.Equal(t, want, store.keys[:len(want)], "the first request's keys, kept by the store")
	assert.Equal(t, want, matched[0], "the first request's keys, as Matches returned them")
	assert.Equal(t, []string{"mally", "mally", "/p/mally", "PATCH /p/mally", "5:PATCH5:mally", "mally", "10:192.0.2.105:mally"}, store.keys[len(want):])
}

// TestRulesAllocs measures the allowed path of Rules with one constant
// generic_key rule (not exhausted: about a thousand requests per count, in
// one second of a stopped clock) against Fiber alone: it allocates nothing
// either. Under the race detector, sync.Pool drops pooled values at
// random, so the test is skipped there.
func TestRulesAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	if raceEnabled {
		t.Skip("allocation counts: under the race detector, sync.Pool drops pooled values at random")
	}
	count := func(serve func() *fasthttp.RequestCtx) float64 {
		t.Helper()
		if c := serve().Response.StatusCode(); c != http.StatusOK {
			t.Fatalf("status %d", c)
		}
		n := testing.AllocsPerRun(1000, func() { serve() })
		if c := serve().Response.StatusCode(); c != http.StatusOK {
			t.Fatalf("status %d: the count must stay on the allowed path", c)
		}
		return n
	}
	alone := count(app(nil))
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "bench", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: rate("second", 4000)},
	}})
	withRules := count(app(ratekitfiber3.Rules(e)))
	t.Logf("allocs/request: fiber %v, +ratekit Rules (generic_key) %v", alone, withRules)
	if withRules != alone {
		t.Errorf("ratekit Rules: %v allocs, fiber alone %v", withRules, alone)
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
	read := func(c fiber.Ctx) error {
		d, ok := ratekitfiber3.DecisionFrom(c)
		got = append(got, ok)
		return c.SendString(strconv.Itoa(d.Remaining))
	}
	app := fiber.New()
	app.Use(ratekitfiber3.Rules(e, ratekitfiber3.WithDecisionInContext()))
	app.Get("/api/items", read)
	app.Get("/", read)

	assert.Equal(t, "2", do(t, app, http.MethodGet, "/api/items", "").body)
	assert.Equal(t, "0", do(t, app, http.MethodGet, "/", "").body)
	assert.Equal(t, []bool{true, false}, got)
}
