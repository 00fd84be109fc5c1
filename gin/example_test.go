package ratekitgin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// A global limit on every route and a stricter limit, with another
// algorithm and its own counters, on the login group.
func Example() {
	// A stopped clock keeps the output deterministic; in production, leave
	// out WithStore (each limiter gets its own memory store).
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}
	global := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}, core.WithStore(store)))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}, core.WithStore(store)))

	r := gin.New()
	r.Use(ratekitgin.New(global, ratekitgin.PeerIP))
	r.Group("/api/login", ratekitgin.New(login, ratekitgin.PeerIP)).POST("", func(c *gin.Context) {
		c.String(http.StatusOK, "welcome")
	})
	r.GET("/api/items", func(c *gin.Context) { c.String(http.StatusOK, "items") })

	for _, req := range []struct{ method, path string }{
		{"POST", "/api/login"}, {"POST", "/api/login"}, {"POST", "/api/login"},
		{"POST", "/api/login"}, {"POST", "/api/login"}, {"POST", "/api/login"},
		{"GET", "/api/items"},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(req.method, req.path, nil))
		fmt.Println(req.method, req.path, w.Code, "remaining", w.Header().Get(answer.HeaderRemaining))
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

// Keys of your own read the request through *gin.Context, here a limit per
// tenant of the route.
func ExampleKey() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	byTenant := func(c *gin.Context) (string, error) {
		t := c.Param("tenant")
		if t == "" {
			return "", keyfuncs.ErrMissing // 400 problem details, never a shared "" bucket
		}
		return t, nil
	}
	r := gin.New()
	r.GET("/t/:tenant/items", ratekitgin.New(lim, byTenant), func(c *gin.Context) { c.String(http.StatusOK, "items") })

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/t/acme/items", nil))
	fmt.Println(w.Code, w.Header().Get(answer.HeaderRemaining))
	// Output: 200 99
}

// A limit per user that the app's authentication middleware stored with
// c.Set.
func ExampleUser() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}))
	r := gin.New()
	r.Use(func(c *gin.Context) { // the app's auth middleware
		if token := c.GetHeader("Authorization"); token == "Bearer alice-token" {
			c.Set("user", "alice")
		}
		c.Next()
	})
	r.Use(ratekitgin.New(lim, ratekitgin.User("user")))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	for _, token := range []string{"Bearer alice-token", "Bearer alice-token", "Bearer alice-token", ""} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// 200
	// 429
	// 400
}

// Behind reverse proxies in 10.0.0.0/8: X-Forwarded-For is read only when
// they send it, walked from the right, so a client cannot pick its key.
func ExampleIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	byIP, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		panic(err)
	}
	r := gin.New()
	r.Use(ratekitgin.New(lim, byIP))
	r.GET("/", func(c *gin.Context) {
		key, _ := byIP(c) // what the limiter counted this request under
		c.String(http.StatusOK, key)
	})

	for _, peer := range []string{"10.0.0.2:4711", "203.0.113.7:4711"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", "1.1.1.1, 198.51.100.4") // 1.1.1.1 may be forged
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println("peer", peer, "is keyed as", w.Body.String())
	}
	// Output:
	// peer 10.0.0.2:4711 is keyed as 198.51.100.4
	// peer 203.0.113.7:4711 is keyed as 203.0.113.7
}

// Rules from a config (here built in Go; see package rulesfile for YAML
// files, which can be reloaded while the server runs): logins limited to 5
// per minute per client address, on POST /login only, and one shared
// counter per route of the items API.
func ExampleRules() {
	// A stopped clock keeps the output deterministic; in production, leave
	// out WithStore (the engine gets a memory store of its own).
	store := &core.MemoryStore{Clock: storetest.NewClock(time.Unix(1_700_000_000, 0)).Now}
	engine, err := rules.NewEngine(rules.WithStore(store))
	if err != nil {
		panic(err)
	}
	err = engine.Load(rules.Config{Domain: "app", Descriptors: []rules.Descriptor{
		{
			Key:       "remote_address",
			Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
			RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5},
		},
		{
			Key:       "route", // "GET /items/:id": every item shares it
			Match:     &rules.Match{Path: "/items/*"},
			RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 100},
		},
	}})
	if err != nil {
		panic(err)
	}

	r := gin.New()
	r.Use(ratekitgin.Rules(engine))
	r.POST("/login", func(c *gin.Context) { c.String(http.StatusOK, "welcome") })
	r.GET("/items/:id", func(c *gin.Context) { c.String(http.StatusOK, "item") })
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "home") })

	for _, req := range []struct{ method, path string }{
		{"POST", "/login"}, {"POST", "/login"}, {"POST", "/login"},
		{"POST", "/login"}, {"POST", "/login"}, {"POST", "/login"},
		{"GET", "/items/1"}, {"GET", "/items/2"}, {"GET", "/"},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(req.method, req.path, nil))
		if remaining := w.Header().Get(answer.HeaderRemaining); remaining != "" {
			fmt.Println(req.method, req.path, w.Code, "remaining", remaining)
		} else {
			fmt.Println(req.method, req.path, w.Code, "no rule applies")
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
	r := gin.New()
	r.Use(ratekitgin.New(lim, ratekitgin.PeerIP, ratekitgin.WithDecisionInContext(), ratekitgin.WithHeaders(answer.IETF)))
	r.GET("/", func(c *gin.Context) {
		d, _ := ratekitgin.DecisionFrom(c)
		c.String(http.StatusOK, "%d left", d.Remaining)
	})

	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
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
// that the app's authentication middleware stored with c.Set. The
// rate-limit header fields describe each user's plan.
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
	lim := core.Must(core.NewPlanLimiter(plan)) // instead of core.NewLimiter(limit)

	sessions := map[string]string{"Bearer alice-token": "alice", "Bearer bob-token": "bob"}
	r := gin.New()
	r.Use(func(c *gin.Context) { // the app's auth middleware
		if user, ok := sessions[c.GetHeader("Authorization")]; ok {
			c.Set("user", user)
		}
		c.Next()
	})
	r.Use(ratekitgin.New(lim, ratekitgin.User("user")))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	for _, token := range []string{"Bearer alice-token", "Bearer bob-token"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", token)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(sessions[token], w.Code, "limit", w.Header().Get(answer.HeaderLimit), "remaining", w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// alice 200 limit 100 remaining 99
	// bob 200 limit 1000 remaining 999
}

// The common case in one line: each client IP may make 2 requests a
// minute; the third gets 429 Too Many Requests.
func ExampleLimitByIP() {
	r := gin.New()
	r.Use(ratekitgin.LimitByIP(2, time.Minute))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// 200
	// 429
}
