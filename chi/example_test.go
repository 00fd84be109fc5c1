package ratekitchi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ratekit/ratekit/answer"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
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
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}, core.WithStore(store)))

	r := chi.NewRouter()
	r.Use(ratekitchi.New(global, ratekitchi.PeerIP))
	r.With(ratekitchi.New(login, ratekitchi.PeerIP)).Post("/api/login", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "welcome") })
	r.Get("/api/items", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "items") })

	for _, rq := range []struct{ method, path string }{
		{"POST", "/api/login"}, {"POST", "/api/login"}, {"POST", "/api/login"},
		{"POST", "/api/login"}, {"POST", "/api/login"}, {"POST", "/api/login"},
		{"GET", "/api/items"},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(rq.method, rq.path, nil))
		fmt.Println(rq.method, rq.path, w.Code, "limit", w.Header().Get(answer.HeaderLimit), "remaining", w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// POST /api/login 200 limit 5 remaining 4
	// POST /api/login 200 limit 5 remaining 3
	// POST /api/login 200 limit 5 remaining 2
	// POST /api/login 200 limit 5 remaining 1
	// POST /api/login 200 limit 5 remaining 0
	// POST /api/login 429 limit 5 remaining 0
	// GET /api/items 200 limit 100 remaining 93
}

// One counter per route and client: every ID of /users/{id} shares it.
// The middleware is mounted with r.With, after Chi has matched the route.
func ExampleRoute() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)}))
	key := keyfuncs.Join(ratekitchi.Route, ratekitchi.PeerIP)

	r := chi.NewRouter()
	r.With(ratekitchi.New(lim, key)).Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "user "+chi.URLParam(r, "id")) })

	for _, path := range []string{"/users/1", "/users/2", "/users/3"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /users/1 200
	// /users/2 200
	// /users/3 429
}

// Behind reverse proxies: the client address from X-Forwarded-For, read
// only when the peer is one of the proxies. Either ratekit's IP, or Chi's
// ClientIPFromXFF with ClientIP; never a key after middleware.RealIP.
func ExampleIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	ip, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ip)) // or Chi's middleware.ClientIPFromXFF("10.0.0.0/8") and ClientIP: ExampleClientIP

	for _, peer := range []string{"10.0.0.1:80", "203.0.113.9:5555"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7")
		k, _ := ip(req)
		fmt.Println(peer, "->", k)
	}
	// Output:
	// 10.0.0.1:80 -> 198.51.100.7
	// 203.0.113.9:5555 -> 203.0.113.9
}

// ClientIP keys the address that Chi's ClientIPFrom* middleware resolved.
func ExampleClientIP() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	r := chi.NewRouter()
	r.Use(middleware.ClientIPFromXFF("10.0.0.0/8"))
	r.Use(ratekitchi.New(lim, ratekitchi.ClientIP))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.0.0.1:80"
	req.Header.Set("X-Forwarded-For", "2001:db8:1:2::1")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get(answer.HeaderRemaining))
	// Output: 200 99
}

type ctxUser struct{}

// A limit per user that the app's authentication middleware stored in the
// request context, falling back to the client address for anonymous
// requests.
func ExampleUser() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	key := keyfuncs.First(ratekitchi.User(ctxUser{}), ratekitchi.PeerIP)

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	k, _ := key(req)
	fmt.Println(k)
	k, _ = key(req.WithContext(context.WithValue(req.Context(), ctxUser{}, "alice")))
	fmt.Println(k)

	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, key))
	// Output:
	// 1:192.0.2.1
	// 0:alice
}

// Rules from a config (here built in Go; see package rulesfile for YAML
// files, which can be reloaded while the server runs): logins limited to 5
// per minute per client address, on POST /login only, and one shared
// counter per route of the items API. The middleware is used inside
// r.Group, where Chi has matched the route and the route key is its
// pattern.
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
		{Key: "route", Match: &rules.Match{Path: "/items/*"}, // "GET /items/{id}": every item shares it
			RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 100}},
	}})
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(ratekitchi.Rules(engine))
		r.Post("/login", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "welcome") })
		r.Get("/items/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "item") })
		r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "home") })
	})

	for _, rq := range []struct{ method, path string }{
		{"POST", "/login"}, {"POST", "/login"}, {"POST", "/login"},
		{"POST", "/login"}, {"POST", "/login"}, {"POST", "/login"},
		{"GET", "/items/1"}, {"GET", "/items/2"}, {"GET", "/"},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(rq.method, rq.path, nil))
		if remaining := w.Header().Get(answer.HeaderRemaining); remaining != "" {
			fmt.Println(rq.method, rq.path, w.Code, "remaining", remaining)
		} else {
			fmt.Println(rq.method, rq.path, w.Code, "no rule applies")
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

// The handler reads the decision of the middleware, which runs
// WithDecisionInContext.
func ExampleDecisionFrom() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)}))
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP, ratekitchi.WithDecisionInContext()))
	r.Get("/quota", func(w http.ResponseWriter, r *http.Request) {
		if d, ok := ratekitchi.DecisionFrom(r.Context()); ok {
			fmt.Fprintf(w, "%d of %d requests left\n", d.Remaining, d.Quota)
		}
	})

	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/quota", nil))
		fmt.Print(w.Body.String())
	}
	// Output:
	// 2 of 3 requests left
	// 1 of 3 requests left
}

// The header fields of draft-ietf-httpapi-ratelimit-headers instead of
// X-Ratelimit-*.
func ExampleWithHeaders() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}))
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP, ratekitchi.WithHeaders(answer.IETF)))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	// Output: RateLimit-Policy: "api";q=100;w=60
}

// Free and paid users: one limiter whose limit is the plan of the user
// that the app's authentication middleware stored in the request context.
// The rate-limit header fields describe each user's plan.
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
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler { // the app's auth middleware
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, ok := sessions[r.Header.Get("Authorization")]; ok {
				r = r.WithContext(context.WithValue(r.Context(), ctxUser{}, user))
			}
			next.ServeHTTP(w, r)
		})
	})
	r.Use(ratekitchi.New(lim, ratekitchi.User(ctxUser{})))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

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
	r := chi.NewRouter()
	r.Use(ratekitchi.LimitByIP(2, time.Minute))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })

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
