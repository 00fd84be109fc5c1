package ratekitfiber3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// A global limit on every route and a stricter limit, with another
// algorithm and its own counters, on the login group.
func ExampleNew() {
	// A stopped clock keeps the output deterministic; in production, leave
	// out WithStore (each limiter gets its own memory store).
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}
	global := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}, core.WithStore(store)))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}, core.WithStore(store)))

	app := fiber.New()
	app.Use(ratekitfiber3.New(global, ratekitfiber3.PeerIP))
	app.Group("/api/login", ratekitfiber3.New(login, ratekitfiber3.PeerIP)).Post("/", func(c fiber.Ctx) error {
		return c.SendString("welcome")
	})
	app.Get("/api/items", func(c fiber.Ctx) error { return c.SendString("items") })

	for _, target := range []string{"POST /api/login", "POST /api/login", "POST /api/login",
		"POST /api/login", "POST /api/login", "POST /api/login", "GET /api/items"} {
		method, path, _ := strings.Cut(target, " ")
		res, _ := app.Test(httptest.NewRequest(method, path, nil), fiber.TestConfig{})
		fmt.Println(target, res.StatusCode, "remaining", res.Header.Get(answer.HeaderRemaining))
	}
	// Output:
	// POST /api/login 200 remaining 4
	// POST /api/login 200 remaining 3
	// POST /api/login 200 remaining 2
	// POST /api/login 200 remaining 1
	// POST /api/login 200 remaining 0
	// POST /api/login 429 remaining 0
	// GET /api/items 200 remaining 93
}

// One line: each client IP (the TCP peer, never a header) gets 2 requests
// a minute, counted by a sliding window in a memory store of its own.
// With limits from flags or configuration, use core.NewLimiter, which
// returns an error for an invalid limit, and New.
func ExampleLimitByIP() {
	app := fiber.New()
	app.Use(ratekitfiber3.LimitByIP(2, time.Minute))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })

	for range 3 {
		res, _ := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), fiber.TestConfig{})
		fmt.Println(res.StatusCode, "limit", res.Header.Get(answer.HeaderLimit))
	}
	// Output:
	// 200 limit 2
	// 200 limit 2
	// 429 limit 2
}

// Behind reverse proxies, key by the client address they report in
// X-Forwarded-For: the header is read only when the TCP peer is one of the
// trusted proxies, and walked from the right, so that clients cannot pick
// their own bucket. Here the peer (app.Test's, 0.0.0.0) is no proxy: the
// addresses it forges leave it in one bucket.
func ExampleIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	byIP, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		panic(err) // a malformed CIDR
	}
	app := fiber.New()
	app.Use(ratekitfiber3.New(lim, byIP))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })

	for _, forged := range []string{"198.51.100.1", "198.51.100.2"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Forwarded-For", forged)
		res, _ := app.Test(r, fiber.TestConfig{})
		fmt.Println(forged, res.StatusCode, "remaining", res.Header.Get(answer.HeaderRemaining))
	}
	// Output:
	// 198.51.100.1 200 remaining 99
	// 198.51.100.2 200 remaining 98
}

// Fiber's own client address, c.IP(), behind proxies at 10.0.0.0/8 that
// overwrite X-Real-IP. ClientIP checks the app when the key is built, and
// refuses one whose c.IP() a client could choose, such as one that takes
// the leftmost X-Forwarded-For entry.
func ExampleClientIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	app := fiber.New(fiber.Config{
		ProxyHeader:        "X-Real-IP", // one your proxies overwrite; never X-Forwarded-For
		TrustProxy:         true,
		TrustProxyConfig:   fiber.TrustProxyConfig{Proxies: []string{"10.0.0.0/8"}},
		EnableIPValidation: true,
	})
	clientIP, err := ratekitfiber3.ClientIP(app)
	if err != nil {
		panic(err)
	}
	app.Use(ratekitfiber3.New(lim, clientIP))

	_, err = ratekitfiber3.ClientIP(fiber.New(fiber.Config{
		ProxyHeader:      fiber.HeaderXForwardedFor,
		TrustProxy:       true,
		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.0/8"}},
	}))
	fmt.Println(errors.Is(err, keyfuncs.ErrMisconfigured))
	// Output: true
}

// Rules from a config (here built in Go; see package rulesfile for YAML
// files, which can be reloaded while the server runs): logins limited to 5
// per minute per client address, on POST /login only, and one shared
// counter per route of the items API. Only middleware on the route itself
// knows the route pattern, so the middleware is given to each route.
func ExampleRules() {
	// A stopped clock keeps the output deterministic; in production, leave
	// out WithStore (the engine gets a memory store of its own).
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}
	engine, err := rules.NewEngine(rules.WithStore(store))
	if err != nil {
		panic(err)
	}
	err = engine.Load(rules.Config{Domain: "app", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"},
			RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5}},
		{Key: "route", Match: &rules.Match{Path: "/items/*"}, // "GET /items/:id": every item shares it
			RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 100}},
	}})
	if err != nil {
		panic(err)
	}

	limit := ratekitfiber3.Rules(engine) // on each route, not app.Use: see Rules
	app := fiber.New()
	app.Post("/login", limit, func(c fiber.Ctx) error { return c.SendString("welcome") })
	app.Get("/items/:id", limit, func(c fiber.Ctx) error { return c.SendString("item") })
	app.Get("/", limit, func(c fiber.Ctx) error { return c.SendString("home") })

	for _, target := range []string{"POST /login", "POST /login", "POST /login", "POST /login", "POST /login",
		"POST /login", "GET /items/1", "GET /items/2", "GET /"} {
		method, path, _ := strings.Cut(target, " ")
		res, _ := app.Test(httptest.NewRequest(method, path, nil), fiber.TestConfig{})
		if remaining := res.Header.Get(answer.HeaderRemaining); remaining != "" {
			fmt.Println(target, res.StatusCode, "remaining", remaining)
		} else {
			fmt.Println(target, res.StatusCode, "no rule applies")
		}
	}
	// Output:
	// POST /login 200 remaining 4
	// POST /login 200 remaining 3
	// POST /login 200 remaining 2
	// POST /login 200 remaining 1
	// POST /login 200 remaining 0
	// POST /login 429 remaining 0
	// GET /items/1 200 remaining 99
	// GET /items/2 200 remaining 98
	// GET / 200 no rule applies
}

// The handler reads the decision that let its request through, here to
// tell the client how many requests it has left; the responses carry the
// IETF fields instead of X-Ratelimit-*.
func ExampleDecisionFrom() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}))) // a stopped clock
	app := fiber.New()
	app.Use(ratekitfiber3.New(lim, ratekitfiber3.PeerIP, ratekitfiber3.WithDecisionInContext(), ratekitfiber3.WithHeaders(answer.IETF)))
	app.Get("/", func(c fiber.Ctx) error {
		d, _ := ratekitfiber3.DecisionFrom(c)
		return c.SendString(fmt.Sprintf("%d left", d.Remaining))
	})

	for range 3 {
		res, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), fiber.TestConfig{})
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			fmt.Println(res.StatusCode, "retry after", res.Header.Get(answer.HeaderRetryAfter), "|", res.Header.Get(answer.HeaderRateLimit))
			continue
		}
		fmt.Println(res.StatusCode, string(body), "|", res.Header.Get(answer.HeaderRateLimit))
	}
	// Output:
	// 200 1 left | "api";r=1;t=30
	// 200 0 left | "api";r=0;t=60
	// 429 retry after 30 | "api";r=0;t=30
}

// Free and paid users: ContextValue keys each request by the user ID that
// the app's authentication middleware stored with c.Locals (a request
// without one is answered 400), and one limiter gives each user the limit
// of their plan, which the rate-limit header fields describe.
func Example_plans() {
	free := core.Limit{Name: "api", Rate: core.PerMinute(100)}
	paid := core.Limit{Name: "api", Rate: core.PerMinute(1000)}
	plans := map[string]core.Limit{"bob": paid} // user ID → plan (your accounts); others are free
	plan := func(_ context.Context, user string) (core.Limit, error) {
		if l, ok := plans[user]; ok {
			return l, nil
		}
		return free, nil
	}
	lim := core.Must(core.NewPlanLimiter(plan)) // or core.NewLimiter(limit): the same for every user

	sessions := map[string]string{"Bearer alice-token": "alice", "Bearer bob-token": "bob"}
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error { // the app's authentication middleware
		if user, ok := sessions[c.Get("Authorization")]; ok {
			c.Locals("user", user)
		}
		return c.Next()
	})
	app.Use(ratekitfiber3.New(lim, ratekitfiber3.ContextValue("user")))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })

	for _, user := range []string{"alice", "alice", "bob", ""} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if user != "" {
			r.Header.Set("Authorization", "Bearer "+user+"-token")
		}
		res, _ := app.Test(r, fiber.TestConfig{})
		fmt.Printf("user %q: %d, limit %q, remaining %q\n", user, res.StatusCode,
			res.Header.Get(answer.HeaderLimit), res.Header.Get(answer.HeaderRemaining))
	}
	// Output:
	// user "alice": 200, limit "100", remaining "99"
	// user "alice": 200, limit "100", remaining "98"
	// user "bob": 200, limit "1000", remaining "999"
	// user "": 400, limit "", remaining ""
}
