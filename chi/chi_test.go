package ratekitchi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// mount builds Chi's middleware as s says (see adaptertest.ScenarioMount):
// on the router's r.Use, before Chi routes, or, when with is set, on each
// route's r.With, after; the group's on its route's r.With. The app's
// middleware is net/http middleware in front of the router.
func mount(with bool) adaptertest.ScenarioMount {
	return func(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
		var key ratekitchi.Key // a nil s.Key stays nil: New must panic
		switch s.By {
		case adaptertest.ByKey:
			if s.Key != nil {
				key = func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
			}
		case adaptertest.ByPeerIP:
			key = ratekitchi.PeerIP
		case adaptertest.ByIP:
			var err error
			key, err = ratekitchi.IP(s.IPOptions...)
			require.NoError(t, err)
		case adaptertest.ByHeader:
			key = ratekitchi.Header(adaptertest.KeyHeader)
		case adaptertest.ByUser:
			key = ratekitchi.User(adaptertest.UserKey)
		}
		opts := []ratekitchi.Option{ratekitchi.WithHeaders(s.Headers), ratekitchi.WithLogger(s.Logger)}
		if s.Skip != nil {
			opts = append(opts, ratekitchi.WithSkipper(func(r *http.Request) bool { return s.Skip(r.Header.Get(adaptertest.SkipHeader)) }))
		}
		if s.Cost != nil {
			opts = append(opts, ratekitchi.WithCost(func(r *http.Request) int { return s.Cost(r.Header.Get(adaptertest.CostHeader)) }))
		}
		if s.Denied != nil {
			opts = append(opts, ratekitchi.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) { write(w)(s.Denied(d)) }))
		}
		if s.OnError != nil {
			opts = append(opts, ratekitchi.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) { write(w)(s.OnError(err)) }))
		}
		if s.Queue != nil {
			opts = append(opts, ratekitchi.WithQueue(s.Queue))
		}
		if s.NilOptions {
			opts = append(opts, ratekitchi.WithSkipper(nil), ratekitchi.WithCost(nil), ratekitchi.WithDeniedHandler(nil), ratekitchi.WithErrorHandler(nil))
		}
		if s.DecisionInContext {
			opts = append(opts, ratekitchi.WithDecisionInContext())
		}
		var limit func(http.Handler) http.Handler
		if s.Rules {
			limit = ratekitchi.Rules(s.Engine, opts...)
		} else {
			limit = ratekitchi.New(s.Limiter, key, opts...)
		}

		r := chi.NewRouter()
		routes := chi.Router(r)
		if with {
			routes = r.With(limit)
		} else {
			r.Use(limit)
		}
		handler := func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, adaptertest.Body(ratekitchi.DecisionFrom(r.Context())))
		}
		for _, rt := range adaptertest.Routes {
			routes.MethodFunc(rt.Method, rt.Path, handler)
		}
		if s.Group != nil {
			routes.With(ratekitchi.New(s.Group, key, opts...)).Get(adaptertest.GroupPrefix+"/items", handler)
		}
		return adaptertest.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { // the app's middleware
			ctx := req.Context()
			if u := req.Header.Get(adaptertest.UserHeader); u != "" {
				//lint:ignore SA1029 the scenarios' key, a string as Gin's and Echo's keys are
				ctx = context.WithValue(ctx, adaptertest.UserKey, u)
			}
			if s.Context != nil {
				ctx = s.Context(ctx)
			}
			r.ServeHTTP(w, req.WithContext(ctx))
		}))
	}
}

// write returns what writes a status and a text body to w.
func write(w http.ResponseWriter) func(status int, body string) {
	return func(status int, body string) { w.WriteHeader(status); _, _ = io.WriteString(w, body) }
}

// TestScenarios runs the conformance table, the rules scenarios and the
// scenarios of every option and key function through Chi, with the
// middleware mounted before routing (r.Use) and after (r.With).
func TestScenarios(t *testing.T) {
	t.Run("Use", func(t *testing.T) { adaptertest.RunScenarios(t, mount(false)) })
	t.Run("With", func(t *testing.T) { adaptertest.RunScenarios(t, mount(true)) })
}

// TestDecisionFrom: under two middlewares that keep the decision, the
// handler reads that of the one that ran last; one without the option
// leaves the decision before it in place.
func TestDecisionFrom(t *testing.T) {
	r := chi.NewRouter()
	r.Use(ratekitchi.New(limiter(t, 10), ratekitchi.PeerIP, ratekitchi.WithDecisionInContext()))
	quota := func(w http.ResponseWriter, r *http.Request) {
		d, _ := ratekitchi.DecisionFrom(r.Context())
		_, _ = io.WriteString(w, strconv.Itoa(d.Quota))
	}
	r.With(ratekitchi.New(limiter(t, 5), ratekitchi.PeerIP, ratekitchi.WithDecisionInContext())).Get("/login", quota)
	r.With(ratekitchi.New(limiter(t, 3), ratekitchi.PeerIP)).Get("/quiet", quota)
	assert.Equal(t, "5", get(r, "/login", "192.0.2.1:1").Body.String())
	assert.Equal(t, "10", get(r, "/quiet", "192.0.2.1:1").Body.String())
}

// TestLimitByIP runs the shorthand's checks on ratekitchi.LimitByIP.
func TestLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		r := chi.NewRouter()
		r.Use(ratekitchi.LimitByIP(count, period))
		r.Get("/", ok)
		return adaptertest.Handler(r)
	})
}

func TestConcurrencyConformance(t *testing.T) {
	adaptertest.RunConcurrency(t, func(t *testing.T, s adaptertest.ConcurrencySetup) adaptertest.Serve {
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		r := chi.NewRouter()
		r.Use(ratekitchi.Concurrency(s.Limiter, key))
		r.Get("/", func(w http.ResponseWriter, r *http.Request) { s.Handle(); ok(w, r) })
		return adaptertest.Handler(r)
	})
	assert.Panics(t, func() { ratekitchi.Concurrency(nil, ratekitchi.PeerIP) })
}

// TestAdminMounted: the admin handler under Chi's Mount, behind the app's
// own auth middleware, sees the full path and acts on the limiter.
func TestAdminMounted(t *testing.T) {
	adaptertest.RunAdmin(t, func(t *testing.T, lim *core.Limiter, ops http.Handler) adaptertest.Serve {
		r := chi.NewRouter()
		r.With(ratekitchi.New(lim, ratekitchi.Header(adaptertest.KeyHeader))).Get("/hello", ok)
		r.With(func(next http.Handler) http.Handler { // the app's auth
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.Header.Get("Authorization") != adaptertest.OperatorAuth {
					http.Error(w, "unauthorized", http.StatusUnauthorized)
					return
				}
				next.ServeHTTP(w, req)
			})
		}).Mount("/admin/ratekit", ops)
		return adaptertest.Handler(r)
	})
}

// ok answers 200 "ok".
func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// get serves through h a GET of path from peer, with the header fields
// given in name, value pairs.
func get(h http.Handler, path, peer string, fields ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// keeping returns key, which keeps in *got the key of the last request.
func keeping(key ratekitchi.Key, got *string) ratekitchi.Key {
	return func(r *http.Request) (k string, err error) { k, err = key(r); *got = k; return k, err }
}

type mws = []func(http.Handler) http.Handler

// limiter is a fixed window of n requests a minute on a stopped clock.
func limiter(t *testing.T, n int) *core.Limiter {
	return adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(n)})
}

// TestRoute: where Chi has matched the route (r.With, r.Group, r.With in
// r.Route), the route is the method and Chi's pattern, in Route's key,
// keyfuncs.Route's (r.Pattern, which Chi sets) and rules' descriptor key
// route: every ID of /users/{id} shares a counter. On r.Use in r.Route it
// is the mount's pattern; on the router's r.Use, before routing, Route
// refuses (500) rather than put every route in one counter, and the
// others take the path.
func TestRoute(t *testing.T) {
	type mw = func(http.Handler) http.Handler
	for _, m := range []struct {
		name, prefix   string
		mount          func(r chi.Router, limit mw) chi.Router // where the routes go
		route, pattern string                                  // Route's key of GET prefix/users/99 ("" for its refusal), keyfuncs.Route's
		codes          string                                  // of GET posts/1, users/1, 2, 3 and 99 at 3 a minute, by pattern
	}{
		{"With", "", func(r chi.Router, limit mw) chi.Router { return r.With(limit) },
			"GET /users/{id}", "GET /users/{id}", "200 200 200 200 429"},
		{"Group", "", func(r chi.Router, limit mw) chi.Router { return r.Group(func(g chi.Router) { g.Use(limit) }) },
			"GET /users/{id}", "GET /users/{id}", "200 200 200 200 429"},
		{"Route-With", "/api", func(r chi.Router, limit mw) chi.Router { return r.Route("/api", func(chi.Router) {}).With(limit) },
			"GET /api/users/{id}", "GET /api/users/{id}", "200 200 200 200 429"},
		{"Route-Use", "/api", func(r chi.Router, limit mw) chi.Router { return r.Route("/api", func(s chi.Router) { s.Use(limit) }) },
			"GET /api/*", "GET /api/*", "200 200 200 429 429"},
		{"Use", "", func(r chi.Router, limit mw) chi.Router { r.Use(limit); return r },
			"", "GET /users/99", "200 200 200 200 200"},
	} {
		t.Run(m.name, func(t *testing.T) {
			e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
				{Key: "route", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
			}})
			var route, pattern string
			for name, limit := range map[string]mw{
				"Route":          ratekitchi.New(limiter(t, 3), keeping(ratekitchi.Route, &route), ratekitchi.WithLogger(slog.New(slog.DiscardHandler))),
				"keyfuncs.Route": ratekitchi.New(limiter(t, 3), keeping(keyfuncs.Route(), &pattern)),
				"Rules":          ratekitchi.Rules(e),
			} {
				r := chi.NewRouter()
				routes := m.mount(r, limit)
				routes.Get("/users/{id}", ok)
				routes.Get("/posts/{id}", ok)
				var got []string
				for _, p := range []string{"/posts/1", "/users/1", "/users/2", "/users/3", "/users/99"} {
					got = append(got, strconv.Itoa(get(r, m.prefix+p, "192.0.2.1:1").Code))
				}
				want := m.codes
				if name == "Route" && m.route == "" {
					want = "500 500 500 500 500"
				}
				assert.Equal(t, want, strings.Join(got, " "), name)
			}
			assert.Equal(t, m.route, route)
			assert.Equal(t, m.pattern, pattern)
		})
	}
	_, err := ratekitchi.Route(httptest.NewRequest(http.MethodGet, "/users/7", nil)) // outside Chi
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

// TestForgedHeaders: six requests of one client, at a limit of 3, with
// forged X-Forwarded-For and X-Real-IP, or from the proxy at 10.0.0.2,
// which appends the client to the first and writes it in the second.
// ClientIP keys what Chi's ClientIPFrom* middleware stored, IPv6 by /64,
// and answers 400 (logging what is missing) without it. PeerIP and IP
// before middleware.RealIP get 3 through; after it, which rewrites
// r.RemoteAddr from those fields, every client-IP key refuses (500, the
// log naming cause and remedy) rather than count forged addresses.
func TestForgedHeaders(t *testing.T) {
	trusted, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	realIP := middleware.RealIP //lint:ignore SA1019 deliberately: the unsafe middleware under test
	fromXFF, fromPeer := middleware.ClientIPFromXFF("10.0.0.0/8"), middleware.ClientIPFromRemoteAddr
	for _, tt := range []struct {
		name          string
		before, after mws // middleware mounted before the limiter, and after it
		key           ratekitchi.Key
		peer, client  string // the client, as the proxy at 10.0.0.2 appends it
		want          string // the key, or the status of every request
	}{
		{"ClientIPFromXFF", mws{fromXFF}, nil, ratekitchi.ClientIP, "203.0.113.9:5555", "", "203.0.113.9"},
		{"ClientIPFromXFF via proxy", mws{fromXFF}, nil, ratekitchi.ClientIP, "10.0.0.2:80", "203.0.113.50", "203.0.113.50"},
		{"ClientIPFromXFF via proxy, IPv6", mws{fromXFF}, nil, ratekitchi.ClientIP, "10.0.0.2:80", "2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"ClientIPFromXFF via proxy, IPv4-mapped", mws{fromXFF}, nil, ratekitchi.ClientIP, "10.0.0.2:80", "::ffff:198.51.100.7", "198.51.100.7"},
		{"ClientIPFromXFF via proxy, garbage", mws{fromXFF}, nil, ratekitchi.ClientIP, "10.0.0.2:80", "garbage", "400"},
		{"ClientIPFromRemoteAddr, IPv4-mapped", mws{fromPeer}, nil, ratekitchi.ClientIP, "[::ffff:192.0.2.1]:80", "", "192.0.2.1"},
		{"ClientIPFromRemoteAddr, zone", mws{fromPeer}, nil, ratekitchi.ClientIP, "[fe80::1%eth0]:80", "", "fe80::/64"},
		{"ClientIP without ClientIPFrom*", nil, nil, ratekitchi.ClientIP, "203.0.113.9:5555", "", "400"},
		{"PeerIP before RealIP", nil, mws{realIP}, ratekitchi.PeerIP, "203.0.113.9:5555", "", "203.0.113.9"},
		{"IP before RealIP, via proxy", nil, mws{realIP}, trusted, "10.0.0.2:80", "203.0.113.50", "203.0.113.50"},
		{"PeerIP after RealIP", mws{realIP}, nil, ratekitchi.PeerIP, "203.0.113.9:5555", "", "500"},
		{"IP after RealIP", mws{realIP}, nil, trusted, "203.0.113.9:5555", "", "500"},
		{"IP after RealIP, via proxy", mws{realIP}, nil, trusted, "10.0.0.2:80", "203.0.113.50", "500"},
		{"ClientIP after RealIP and ClientIPFromXFF", mws{realIP, fromXFF}, nil, ratekitchi.ClientIP, "203.0.113.9:5555", "", "500"},
		{"Join after RealIP", mws{realIP}, nil, keyfuncs.Join(keyfuncs.Route(), ratekitchi.PeerIP), "203.0.113.9:5555", "", "500"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log strings.Builder
			var key string
			r := chi.NewRouter()
			r.Use(tt.before...)
			r.Use(ratekitchi.New(limiter(t, 3), keeping(tt.key, &key), ratekitchi.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
			r.Use(tt.after...)
			r.Get("/", ok)
			codes := map[int]int{}
			for i := range 6 {
				forged := "198.51.100." + strconv.Itoa(i+1)
				fields := []string{"X-Forwarded-For", forged, "X-Real-IP", forged}
				if tt.client != "" {
					fields = []string{"X-Forwarded-For", forged + ", " + tt.client, "X-Real-IP", tt.client}
				}
				codes[get(r, "/", tt.peer, fields...).Code]++
			}
			switch status, _ := strconv.Atoi(tt.want); status {
			case 0:
				assert.Equal(t, map[int]int{200: 3, 429: 3}, codes)
				assert.Equal(t, tt.want, key)
			case 400:
				assert.Equal(t, map[int]int{400: 6}, codes)
				assert.Contains(t, log.String(), "ClientIPFrom", "the log names what is missing")
			default:
				assert.Equal(t, map[int]int{500: 6}, codes)
				assert.Contains(t, log.String(), "middleware.RealIP", "the log names the cause")
				assert.Contains(t, log.String(), "keyfuncs.TrustedProxies", "and the remedy")
			}
		})
	}
}
