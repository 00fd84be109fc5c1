package ratekitecho_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// A global limit on every route and a stricter limit, with another
// algorithm and its own counters, on the login route.
func Example() {
	// A stopped clock keeps the output deterministic; in production, leave
	// out WithStore (each limiter gets its own memory store).
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}
	global := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}, core.WithStore(store)))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}, core.WithStore(store)))

	e := echo.New()
	e.Use(ratekitecho.New(global, ratekitecho.PeerIP))
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "welcome") }, ratekitecho.New(login, ratekitecho.PeerIP))
	e.GET("/items", func(c echo.Context) error { return c.String(http.StatusOK, "items") })

	for _, r := range []string{"POST /login", "POST /login", "POST /login", "GET /items"} {
		method, path, _ := strings.Cut(r, " ")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		fmt.Println(r, w.Code, "remaining", w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// POST /login 200 remaining 1
	// POST /login 200 remaining 0
	// POST /login 429 remaining 0
	// GET /items 200 remaining 96
}

// The common case in one line: each client IP may make 2 requests a
// minute; the third gets 429 Too Many Requests.
func ExampleLimitByIP() {
	e := echo.New()
	e.Use(ratekitecho.LimitByIP(2, time.Minute))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	for range 3 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// 200
	// 429
}

// The configuration form, in the style of Echo's own middleware: a health
// check is exempt, and a rejection is answered by the app's
// HTTPErrorHandler in its usual error format.
func ExampleNewWithConfig() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}))
	e := echo.New()
	e.Use(ratekitecho.NewWithConfig(ratekitecho.Config{
		Skipper: func(c echo.Context) bool { return c.Path() == "/health" },
		Limiter: lim,
		Key:     ratekitecho.PeerIP,
		DeniedHandler: func(echo.Context, core.Decision) error {
			return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
		},
	}))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.GET("/health", func(c echo.Context) error { return c.String(http.StatusOK, "healthy") })

	for _, path := range []string{"/", "/", "/health"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, w.Code, strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// / 200 ok
	// / 429 {"message":"slow down"}
	// /health 200 healthy
}

// A key of your own reads the request through echo.Context, here the
// route's tenant; Adapt takes any net/http key function of package
// keyfuncs, here a query parameter, and User the ID that your auth
// middleware stored with c.Set (see Example_plans).
func ExampleKey() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	byTenant := func(c echo.Context) (string, error) {
		if t := c.Param("tenant"); t != "" {
			return t, nil
		}
		return "", keyfuncs.ErrMissing // 400 problem details, never a shared "" bucket
	}
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	e := echo.New()
	e.GET("/t/:tenant/items", ok, ratekitecho.New(lim, byTenant))
	e.GET("/items", ok, ratekitecho.New(lim, ratekitecho.Adapt(keyfuncs.Query("api_key"))))

	for _, path := range []string{"/t/acme/items", "/items?api_key=k1"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /t/acme/items 200
	// /items?api_key=k1 200
}

// Behind reverse proxies: X-Forwarded-For is read only from the trusted
// ones and walked from the right, so a client's forged entries are never
// its key.
func ExampleIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}))
	byIP, err := ratekitecho.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(ratekitecho.New(lim, byIP))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	for _, forged := range []string{"1.1.1.1", "2.2.2.2"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.2:4711" // the proxy
		r.Header.Set("X-Forwarded-For", forged+", 198.51.100.4")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// 429
}

// Echo's own client address, once e.IPExtractor is set. Without it
// c.RealIP() believes any client's X-Forwarded-For, and ClientIP refuses
// the instance when the key is built, rather than be bypassed.
func ExampleClientIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	e := echo.New()
	if _, err := ratekitecho.ClientIP(e); err != nil {
		fmt.Println("refused:", errors.Is(err, keyfuncs.ErrMisconfigured))
	}
	e.IPExtractor = echo.ExtractIPDirect() // the TCP peer: this server faces the internet
	clientIP, err := ratekitecho.ClientIP(e)
	if err != nil {
		panic(err)
	}
	e.Use(ratekitecho.New(lim, clientIP))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Forwarded-For", "1.1.1.1") // ignored
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get(answer.HeaderRemaining))
	// Output:
	// refused: true
	// 200 99
}

// Rules from a config (here built in Go; see package rulesfile for YAML
// files, which can be reloaded while the server runs): logins limited to 2
// per minute per client address, on POST /login only, and one shared
// counter per route of the items API.
func ExampleRules() {
	// A stopped clock keeps the output deterministic; in production, leave
	// out WithStore (the engine gets a memory store of its own).
	engine, err := rules.NewEngine(rules.WithStore(&core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}))
	if err != nil {
		panic(err)
	}
	err = engine.Load(rules.Config{Domain: "app", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"},
			RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
		{Key: "route", Match: &rules.Match{Path: "/items/*"}, // "GET /items/:id": every item shares it
			RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 100}},
	}})
	if err != nil {
		panic(err)
	}
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	e := echo.New()
	e.Use(ratekitecho.Rules(engine))
	e.POST("/login", ok)
	e.GET("/items/:id", ok)
	e.GET("/", ok)

	for _, r := range []string{"POST /login", "POST /login", "POST /login", "GET /items/1", "GET /items/2", "GET /"} {
		method, path, _ := strings.Cut(r, " ")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		fmt.Printf("%s %d remaining %q\n", r, w.Code, w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// POST /login 200 remaining "1"
	// POST /login 200 remaining "0"
	// POST /login 429 remaining "0"
	// GET /items/1 200 remaining "99"
	// GET /items/2 200 remaining "98"
	// GET / 200 remaining ""
}

// The handler reads the decision that let its request through, here to
// tell the client how many requests it has left; the responses carry the
// IETF fields instead of X-Ratelimit-*.
func ExampleDecisionFrom() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}))) // a stopped clock
	e := echo.New()
	e.Use(ratekitecho.New(lim, ratekitecho.PeerIP, ratekitecho.WithDecisionInContext(), ratekitecho.WithHeaders(answer.IETF)))
	e.GET("/", func(c echo.Context) error {
		d, _ := ratekitecho.DecisionFrom(c)
		return c.String(http.StatusOK, fmt.Sprintf("%d left", d.Remaining))
	})

	for range 3 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusOK {
			fmt.Println(w.Code, "retry after", w.Header().Get(answer.HeaderRetryAfter), "|", w.Header().Get(answer.HeaderRateLimit))
			continue
		}
		fmt.Println(w.Code, w.Body.String(), "|", w.Header().Get(answer.HeaderRateLimit))
	}
	// Output:
	// 200 1 left | "api";r=1;t=30
	// 200 0 left | "api";r=0;t=60
	// 429 retry after 30 | "api";r=0;t=30
}

// Free and paid users: one limiter whose limit is the plan of the user
// that the app's authentication middleware stored with c.Set, keyed by
// User. The rate-limit header fields describe each user's plan.
func Example_plans() {
	lim := core.Must(core.NewPlanLimiter(func(_ context.Context, user string) (core.Limit, error) {
		if user == "bob" { // a paying user, by your accounts
			return core.Limit{Name: "api", Rate: core.PerMinute(1000)}, nil
		}
		return core.Limit{Name: "api", Rate: core.PerMinute(100)}, nil
	})) // instead of core.NewLimiter(limit)

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the app's auth middleware
		return func(c echo.Context) error {
			c.Set("user", strings.TrimPrefix(c.Request().Header.Get("Authorization"), "Bearer "))
			return next(c)
		}
	})
	e.Use(ratekitecho.New(lim, ratekitecho.User("user")))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	for _, user := range []string{"alice", "bob"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+user)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Println(user, w.Code, "limit", w.Header().Get(answer.HeaderLimit), "remaining", w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// alice 200 limit 100 remaining 99
	// bob 200 limit 1000 remaining 999
}
