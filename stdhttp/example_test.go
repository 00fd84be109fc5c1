package stdhttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// send serves one request from the given peer and prints the outcome.
func send(h http.Handler, method, path, peer string) {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = peer + ":50000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Printf("%s %s: %d", method, path, w.Code)
	if limit := w.Header().Get(answer.HeaderLimit); limit != "" {
		fmt.Printf(" remaining %s/%s", w.Header().Get(answer.HeaderRemaining), limit)
	}
	if retry := w.Header().Get(answer.HeaderRetryAfter); retry != "" {
		fmt.Printf(" retry after %ss", retry)
	}
	fmt.Println()
}

func hello(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello\n") }

func ExampleNew() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", hello)

	// 3 requests per minute and client IP address, refilled continuously.
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(3)}))
	handler := stdhttp.New(lim, keyfuncs.PeerIP)(mux)

	for range 4 {
		send(handler, "GET", "/", "192.0.2.1")
	}
	send(handler, "GET", "/", "198.51.100.7") // another client
	// Output:
	// GET /: 200 remaining 2/3
	// GET /: 200 remaining 1/3
	// GET /: 200 remaining 0/3
	// GET /: 429 remaining 0/3 retry after 20s
	// GET /: 200 remaining 2/3
}

// Two route groups with their own limiters: a generous token bucket for
// the API and an exact sliding window log for logins. Their counters are
// separate, so a client that spends its login attempts can still use the
// API, and the other way round.
func Example_routeGroups() {
	// Behind a load balancer in 10.0.0.0/8, the client is taken from
	// X-Forwarded-For; from anywhere else, it is the TCP peer.
	ip, err := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	apiLimit := core.Must(core.NewLimiter(core.Limit{
		Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100),
	}))
	loginLimit := core.Must(core.NewLimiter(core.Limit{
		Name: "login", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(2),
	}))

	api := http.NewServeMux()
	api.HandleFunc("GET /api/items", hello)
	mux := http.NewServeMux()
	mux.Handle("/api/", stdhttp.New(apiLimit, ip)(api))
	mux.Handle("POST /api/login", stdhttp.New(loginLimit, ip)(http.HandlerFunc(hello)))

	for range 3 {
		send(mux, "POST", "/api/login", "192.0.2.1")
	}
	send(mux, "GET", "/api/items", "192.0.2.1")
	// Output:
	// POST /api/login: 200 remaining 1/2
	// POST /api/login: 200 remaining 0/2
	// POST /api/login: 429 remaining 0/2 retry after 60s
	// GET /api/items: 200 remaining 99/100
}

func ExampleWithSkipper() {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerSecond(10)}))
	mw := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithSkipper(func(r *http.Request) bool {
		return r.URL.Path == "/healthz"
	}))
	handler := mw(http.HandlerFunc(hello))

	send(handler, "GET", "/healthz", "192.0.2.1")
	send(handler, "GET", "/", "192.0.2.1")
	// Output:
	// GET /healthz: 200
	// GET /: 200 remaining 9/10
}

func ExampleWithDeniedHandler() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerHour(1)}))
	mw := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d core.Decision) {
		// Retry-After and the rate-limit headers are already set.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, "limit %q reached, come back in %s s\n", d.Name, w.Header().Get("Retry-After"))
	}))
	handler := mw(http.HandlerFunc(hello))

	for range 2 {
		r := httptest.NewRequest("GET", "/", nil)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 200 hello
	// 429 limit "1-per-1h0m0s" reached, come back in 3600 s
}

func ExampleWithCost() {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	// Exports cost ten times as much as other requests.
	mw := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithCost(func(r *http.Request) int {
		if r.URL.Path == "/export" {
			return 10
		}
		return 1
	}))
	handler := mw(http.HandlerFunc(hello))

	send(handler, "GET", "/export", "192.0.2.1")
	send(handler, "GET", "/", "192.0.2.1")
	// Output:
	// GET /export: 200 remaining 90/100
	// GET /: 200 remaining 89/100
}

// Rules from a config (here built in Go; see package rulesfile for YAML
// files): logins limited to 5 per minute per client, in force for POST
// /login only, counted in a sliding window log (the default is
// Envoy's fixed window).
func ExampleRules() {
	engine, err := rules.NewEngine()
	if err != nil {
		log.Fatal(err)
	}
	err = engine.Load(rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{
		{
			Key:       "remote_address",
			Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
			RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5, Algorithm: "sliding-window-log"},
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", hello)
	handler := stdhttp.Rules(engine)(mux)

	for range 6 {
		send(handler, "POST", "/login", "192.0.2.1")
	}
	send(handler, "GET", "/", "192.0.2.1") // no rule applies
	// Output:
	// POST /login: 200 remaining 4/5
	// POST /login: 200 remaining 3/5
	// POST /login: 200 remaining 2/5
	// POST /login: 200 remaining 1/5
	// POST /login: 200 remaining 0/5
	// POST /login: 429 remaining 0/5 retry after 60s
	// GET /: 200
}

// The handler reads the decision that the middleware took, to tell the
// client how much of its quota is left in its own words.
func ExampleDecisionFrom() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)}))
	handler := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithDecisionInContext())(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			if d, ok := stdhttp.DecisionFrom(r.Context()); ok {
				fmt.Fprintf(w, "%d of %d requests left\n", d.Remaining, d.Quota)
			}
		}))

	for range 2 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Print(w.Body.String())
	}
	// Output:
	// 2 of 3 requests left
	// 1 of 3 requests left
}

// The header fields of draft-ietf-httpapi-ratelimit-headers instead of
// X-Ratelimit-*. On a rejection, the RateLimit field's t is Retry-After.
func ExampleWithHeaders() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2}))
	handler := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithHeaders(answer.IETF))(http.HandlerFunc(hello))

	for range 3 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
		if retry := w.Header().Get("Retry-After"); retry != "" {
			fmt.Println("Retry-After:", retry)
		}
	}
	// Output:
	// 200 "api";q=2;w=20 "api";r=1;t=10
	// 200 "api";q=2;w=20 "api";r=0;t=20
	// 429 "api";q=2;w=20 "api";r=0;t=10
	// Retry-After: 10
}

type userKey struct{}

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
	auth := func(next http.Handler) http.Handler { // the app's auth middleware
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, ok := sessions[r.Header.Get("Authorization")]; ok {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
			}
			next.ServeHTTP(w, r)
		})
	}
	handler := auth(stdhttp.New(lim, keyfuncs.User(userKey{}))(http.HandlerFunc(hello)))

	for _, token := range []string{"Bearer alice-token", "Bearer bob-token"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", token)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(sessions[token], w.Code, "limit", w.Header().Get(answer.HeaderLimit), "remaining", w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// alice 200 limit 100 remaining 99
	// bob 200 limit 1000 remaining 999
}

// The common case in one line: each client IP may make 2 requests a
// minute; the third gets 429 Too Many Requests.
func ExampleLimitByIP() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", hello)
	handler := stdhttp.LimitByIP(2, time.Minute)(mux)

	for _, peer := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer + ":50000"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(peer, w.Code)
	}
	// Output:
	// 192.0.2.1 200
	// 192.0.2.1 200
	// 192.0.2.1 429
	// 192.0.2.2 200
}
