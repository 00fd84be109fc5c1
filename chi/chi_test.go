package ratekitchi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
)

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		opts := []ratekitchi.Option{ratekitchi.WithHeaders(s.Headers), ratekitchi.WithLogger(s.Logger)}
		if s.DecisionInContext {
			opts = append(opts, ratekitchi.WithDecisionInContext())
		}
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		r := chi.NewRouter()
		r.Use(ratekitchi.New(s.Limiter, key, opts...))
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, adaptertest.Body(ratekitchi.DecisionFrom(r.Context())))
		})
		return adaptertest.Handler(r)
	})
}

// TestConformanceWith: the middleware mounted on the route with r.With,
// after routing, answers alike.
func TestConformanceWith(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		opts := []ratekitchi.Option{ratekitchi.WithHeaders(s.Headers), ratekitchi.WithLogger(s.Logger)}
		if s.DecisionInContext {
			opts = append(opts, ratekitchi.WithDecisionInContext())
		}
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		r := chi.NewRouter()
		r.With(ratekitchi.New(s.Limiter, key, opts...)).Get("/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, adaptertest.Body(ratekitchi.DecisionFrom(r.Context())))
		})
		return adaptertest.Handler(r)
	})
}

// quiet is a logger that discards everything, for tests of errors.
var quiet = slog.New(slog.DiscardHandler)

// epoch is a whole hour: windows of a second, a minute and an hour start
// there.
var epoch = time.Unix(1_699_999_200, 0)

// newLimiter returns a limiter on a memory store whose time is clock.
func newLimiter(t testing.TB, clock *storetest.Clock, l core.Limit, opts ...core.Option) *core.Limiter {
	return adaptertest.Limiter(t, clock, l, opts...)
}

// text returns a handler that answers body.
func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }
}

type result struct {
	status    int
	limit     string
	remaining string
	body      string
	header    http.Header
}

// do serves one request from peer 192.0.2.10 with the X-Client header
// client ("" sends none).
func do(t *testing.T, h http.Handler, method, path, client string) result {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.10:4711"
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return result{w.Code, w.Header().Get(answer.HeaderLimit), w.Header().Get(answer.HeaderRemaining), w.Body.String(), w.Header()}
}

type problem struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Limit  string `json:"limit"`
}

// requireProblem checks that r is an uncacheable problem-details response
// with the given status, and returns its body.
func requireProblem(t *testing.T, r result, status int) problem {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal([]byte(r.body), &p), "body: %s", r.body)
	assert.Equal(t, status, p.Status)
	return p
}

// TestRouteGroups: a global token bucket on the router and a stricter
// fixed window on /api/login, mounted in each of Chi's ways, keep separate
// counters; the global one still counts the logins.
func TestRouteGroups(t *testing.T) {
	mounts := map[string]func(r chi.Router, login func(http.Handler) http.Handler){
		"With": func(r chi.Router, login func(http.Handler) http.Handler) {
			r.With(login).Post("/api/login", text("welcome"))
		},
		"Group": func(r chi.Router, login func(http.Handler) http.Handler) {
			r.Group(func(r chi.Router) {
				r.Use(login)
				r.Post("/api/login", text("welcome"))
			})
		},
		"Route": func(r chi.Router, login func(http.Handler) http.Handler) {
			r.Route("/api/login", func(r chi.Router) {
				r.Use(login)
				r.Post("/", text("welcome"))
			})
		},
	}
	for name, mount := range mounts {
		t.Run(name, func(t *testing.T) {
			clock := storetest.NewClock(epoch)
			global := newLimiter(t, clock, core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)})
			login := newLimiter(t, clock, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
			key := ratekitchi.Header("X-Client")

			r := chi.NewRouter()
			r.Use(ratekitchi.New(global, key))
			r.Get("/api/items", text("items"))
			mount(r, ratekitchi.New(login, key))

			// Exhaust the login limit: other routes still pass.
			for i := 0; i < 5; i++ {
				res := do(t, r, http.MethodPost, "/api/login", "alice")
				require.Equal(t, http.StatusOK, res.status, "login %d", i)
				assert.Equal(t, "welcome", res.body)
				assert.Equal(t, "5", res.limit, "the stricter limit's headers win")
				assert.Equal(t, strconv.Itoa(4-i), res.remaining)
			}
			res := do(t, r, http.MethodPost, "/api/login", "alice")
			p := requireProblem(t, res, http.StatusTooManyRequests)
			assert.Equal(t, "login", p.Limit)
			assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter))
			res = do(t, r, http.MethodGet, "/api/items", "alice")
			require.Equal(t, http.StatusOK, res.status)
			assert.Equal(t, "100", res.limit)
			assert.Equal(t, "93", res.remaining, "global counted the 6 logins and this request")

			// Exhaust the global limit: login is rejected by it, without
			// using the login counter.
			for i := 0; i < 100; i++ {
				require.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/api/items", "bob").status, "items %d", i)
			}
			res = do(t, r, http.MethodPost, "/api/login", "bob")
			p = requireProblem(t, res, http.StatusTooManyRequests)
			assert.Equal(t, "global", p.Limit)
			assert.Equal(t, "100", res.limit)
			clock.Advance(time.Minute) // the bucket refills; bob's login window is untouched
			for i := 0; i < 5; i++ {
				res := do(t, r, http.MethodPost, "/api/login", "bob")
				require.Equal(t, http.StatusOK, res.status, "login %d", i)
				assert.Equal(t, strconv.Itoa(4-i), res.remaining)
			}
		})
	}
}

func TestSkipper(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client"),
		ratekitchi.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/health" })))
	r.Get("/*", text("ok"))

	for i := 0; i < 3; i++ {
		res := do(t, r, http.MethodGet, "/health", "") // no key needed either
		assert.Equal(t, http.StatusOK, res.status)
		assert.Empty(t, res.limit)
	}
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status, "skipped requests were not counted")
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodGet, "/", "alice").status)
}

func TestDeniedHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	var got core.Decision
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client"),
		ratekitchi.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			got = d
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, `{"slow":"down"}`)
		})))
	r.Get("/", text("ok"))

	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	res := do(t, r, http.MethodGet, "/", "alice")
	assert.Equal(t, http.StatusTeapot, res.status)
	assert.JSONEq(t, `{"slow":"down"}`, res.body)
	assert.Equal(t, "0", res.remaining, "headers are set before the denied handler runs")
	assert.Equal(t, "60", res.header.Get(answer.HeaderRetryAfter))
	assert.False(t, got.Allowed)
	assert.Equal(t, "api", got.Name)
}

func TestErrorHandler(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Rate: core.PerMinute(1)})
	errKey := errors.New("key store down")
	broken := func(*http.Request) (string, error) { return "", errKey }

	t.Run("default-500", func(t *testing.T) {
		r := chi.NewRouter()
		r.Use(ratekitchi.New(lim, broken, ratekitchi.WithLogger(quiet)))
		r.Get("/", text("ok"))
		res := do(t, r, http.MethodGet, "/", "")
		requireProblem(t, res, http.StatusInternalServerError)
		assert.Empty(t, res.limit, "no rate-limit headers on errors")
		assert.NotContains(t, res.body, "key store down", "the key error is not disclosed")
	})
	t.Run("default-400", func(t *testing.T) {
		r := chi.NewRouter()
		r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client"), ratekitchi.WithLogger(quiet)))
		r.Get("/", text("ok"))
		res := do(t, r, http.MethodGet, "/", "")
		requireProblem(t, res, http.StatusBadRequest)
		assert.Empty(t, res.limit)
	})
	t.Run("custom", func(t *testing.T) {
		var got error
		r := chi.NewRouter()
		r.Use(ratekitchi.New(lim, broken, ratekitchi.WithLogger(quiet), ratekitchi.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "try later")
		})))
		r.Get("/", text("ok"))
		res := do(t, r, http.MethodGet, "/", "")
		assert.Equal(t, http.StatusServiceUnavailable, res.status)
		assert.Equal(t, "try later", res.body)
		assert.ErrorIs(t, got, errKey)
	})
}

func TestCost(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client"), ratekitchi.WithLogger(quiet), ratekitchi.WithCost(func(r *http.Request) int {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil {
			return 1
		}
		return n
	})))
	r.Get("/", text("ok"))

	res := do(t, r, http.MethodGet, "/?n=3", "alice")
	assert.Equal(t, http.StatusOK, res.status)
	assert.Equal(t, "2", res.remaining)
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodGet, "/?n=3", "alice").status)
	assert.Equal(t, "2", do(t, r, http.MethodGet, "/?n=0", "alice").remaining, "cost 0 reports without counting")
	res = do(t, r, http.MethodGet, "/?n=6", "alice")
	assert.Contains(t, requireProblem(t, res, http.StatusInternalServerError).Detail, "misconfigured",
		"a cost above the capacity is a programming error")
}

func TestShapingHold(t *testing.T) {
	// A shaping leaky bucket of 1000/s holds each request for at most a
	// few milliseconds, then passes it on.
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1000), Burst: 10, Shaping: true})
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client")))
	r.Get("/", text("ok"))
	for i := 0; i < 3; i++ {
		res := do(t, r, http.MethodGet, "/", "alice")
		assert.Equal(t, http.StatusOK, res.status)
		assert.Equal(t, "ok", res.body)
	}

	// A request whose context ends while it is held (the client went
	// away) is not passed on, and gets no response written.
	slow := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 10, Shaping: true})
	served := 0
	r = chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			cancel() // a client already gone
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	})
	r.Use(ratekitchi.New(slow, ratekitchi.Header("X-Client")))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { served++; _, _ = io.WriteString(w, "ok") })
	assert.Equal(t, "ok", do(t, r, http.MethodGet, "/", "alice").body, "the first request has no delay")
	res := do(t, r, http.MethodGet, "/", "alice") // its slot is a minute away
	assert.Empty(t, res.body)
	assert.Equal(t, 1, served)
}

func TestNewPanicsOnNil(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}))
	assert.Panics(t, func() { ratekitchi.New(nil, ratekitchi.PeerIP) })
	assert.Panics(t, func() { ratekitchi.New(lim, nil) })
	assert.NotPanics(t, func() { ratekitchi.New(lim, keyfuncs.PeerIP, nil...) })
}

// TestLimitByIP runs the shorthand's checks on ratekitchi.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		r := chi.NewRouter()
		r.Use(ratekitchi.LimitByIP(count, period))
		r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		return adaptertest.Handler(r)
	})
}
