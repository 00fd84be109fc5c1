package ratekitchi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
)

// recorder wraps a key function and keeps the last key and error it
// returned, as the middleware saw them.
type recorder struct {
	key  ratekitchi.Key
	got  string
	err  error
	runs int
}

func (k *recorder) Key(r *http.Request) (string, error) {
	k.runs++
	k.got, k.err = k.key(r)
	return k.got, k.err
}

// request returns a request from peer with the given header lines, each
// "Name: value".
func request(method, path, peer string, lines ...string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = peer
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ":")
		r.Header.Add(name, strings.TrimSpace(value))
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// lenient is a limit no test here reaches.
var lenient = core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1000)}

// TestRoute: the key is the method and Chi's route pattern, so that every
// user ID shares the counter of /users/{id}, however the middleware is
// mounted after routing.
func TestRoute(t *testing.T) {
	mounts := []struct {
		name, prefix string
		mount        func(r chi.Router, mw func(http.Handler) http.Handler)
	}{
		{"With", "", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.With(mw).Get("/users/{id}", text("user"))
			r.With(mw).Get("/posts/{id}", text("post"))
		}},
		{"Group", "", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Group(func(r chi.Router) {
				r.Use(mw)
				r.Get("/users/{id}", text("user"))
				r.Get("/posts/{id}", text("post"))
			})
		}},
		{"With-in-Route", "/api", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Route("/api", func(r chi.Router) {
				r.With(mw).Get("/users/{id}", text("user"))
				r.With(mw).Get("/posts/{id}", text("post"))
			})
		}},
	}
	for _, m := range mounts {
		t.Run(m.name, func(t *testing.T) {
			lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
			key := &recorder{key: ratekitchi.Route}
			r := chi.NewRouter()
			m.mount(r, ratekitchi.New(lim, key.Key))

			for i := 1; i <= 3; i++ {
				w := serve(r, request(http.MethodGet, m.prefix+"/users/"+strconv.Itoa(i), "192.0.2.1:1"))
				require.Equal(t, http.StatusOK, w.Code, "user %d", i)
				require.NoError(t, key.err)
				assert.Equal(t, "GET "+m.prefix+"/users/{id}", key.got)
				assert.Equal(t, strconv.Itoa(3-i), w.Header().Get(answer.HeaderRemaining), "all IDs share one counter")
			}
			w := serve(r, request(http.MethodGet, m.prefix+"/users/99", "192.0.2.1:1"))
			assert.Equal(t, http.StatusTooManyRequests, w.Code, "a new ID does not get a new counter")

			w = serve(r, request(http.MethodGet, m.prefix+"/posts/1", "192.0.2.1:1"))
			assert.Equal(t, http.StatusOK, w.Code, "another route has its own counter")
			assert.Equal(t, "GET "+m.prefix+"/posts/{id}", key.got)
		})
	}

	t.Run("Use-in-Route", func(t *testing.T) {
		// A sub-router's own middleware runs before it routes: the pattern
		// is the mount point's, one counter for the whole sub-tree.
		key := &recorder{key: ratekitchi.Route}
		r := chi.NewRouter()
		r.Route("/api", func(r chi.Router) {
			r.Use(ratekitchi.New(core.Must(core.NewLimiter(lenient)), key.Key))
			r.Get("/users/{id}", text("user"))
		})
		assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/api/users/7", "192.0.2.1:1")).Code)
		assert.Equal(t, "GET /api/*", key.got)
	})

	t.Run("top-level-Use", func(t *testing.T) {
		// Before routing there is no pattern: every request fails with a
		// configuration error rather than share one counter.
		key := &recorder{key: ratekitchi.Route}
		r := chi.NewRouter()
		r.Use(ratekitchi.New(core.Must(core.NewLimiter(lenient)), key.Key))
		r.Get("/users/{id}", text("user"))
		w := serve(r, request(http.MethodGet, "/users/7", "192.0.2.1:1"))
		assert.Equal(t, http.StatusInternalServerError, w.Code)
		assert.ErrorIs(t, key.err, keyfuncs.ErrMisconfigured)
		assert.Empty(t, key.got)
	})

	t.Run("no-chi", func(t *testing.T) {
		k, err := ratekitchi.Route(request(http.MethodGet, "/users/7", "192.0.2.1:1"))
		assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
		assert.Empty(t, k)
	})

	t.Run("keyfuncs.Route", func(t *testing.T) {
		// Chi copies the pattern into r.Pattern: keyfuncs.Route agrees
		// after routing, and before routing falls back to the path.
		after, before := &recorder{key: keyfuncs.Route()}, &recorder{key: keyfuncs.Route()}
		r := chi.NewRouter()
		r.Use(ratekitchi.New(core.Must(core.NewLimiter(lenient)), before.Key))
		r.With(ratekitchi.New(core.Must(core.NewLimiter(lenient)), after.Key)).Get("/users/{id}", text("user"))
		assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/users/7", "192.0.2.1:1")).Code)
		assert.Equal(t, "GET /users/{id}", after.got)
		assert.Equal(t, "GET /users/7", before.got)
	})

	t.Run("per-client", func(t *testing.T) {
		key := &recorder{key: keyfuncs.Join(ratekitchi.Route, ratekitchi.PeerIP)}
		r := chi.NewRouter()
		r.With(ratekitchi.New(core.Must(core.NewLimiter(lenient)), key.Key)).Post("/users/{id}", text("user"))
		assert.Equal(t, http.StatusOK, serve(r, request(http.MethodPost, "/users/7", "192.0.2.1:1")).Code)
		assert.Equal(t, "16:POST /users/{id}|9:192.0.2.1", key.got)
	})
}

// TestClientIP: the key of the address Chi's ClientIPFrom* middleware
// stored, as safe as that middleware's configuration.
func TestClientIP(t *testing.T) {
	t.Run("ClientIPFromXFF", func(t *testing.T) {
		key := &recorder{key: ratekitchi.ClientIP}
		r := chi.NewRouter()
		r.Use(middleware.ClientIPFromXFF("10.0.0.0/8"))
		r.Use(ratekitchi.New(core.Must(core.NewLimiter(lenient)), key.Key))
		r.Get("/", text("ok"))

		for _, tt := range []struct {
			name, peer string
			lines      []string
			want       string
		}{
			{"untrusted peer: header ignored", "203.0.113.9:5555", []string{"X-Forwarded-For: 1.1.1.1"}, "203.0.113.9"},
			{"trusted proxy", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},
			{"forged leftmost ignored", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
			{"ipv6 client by /64", "10.0.0.1:80", []string{"X-Forwarded-For: 2001:db8:1:2::1"}, "2001:db8:1:2::/64"},
			{"mapped client", "10.0.0.1:80", []string{"X-Forwarded-For: ::ffff:198.51.100.7"}, "198.51.100.7"},
			{"ipv6 peer by /64", "[2001:db8:9::1]:80", []string{"X-Forwarded-For: 1.1.1.1"}, "2001:db8:9::/64"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				w := serve(r, request(http.MethodGet, "/", tt.peer, tt.lines...))
				require.Equal(t, http.StatusOK, w.Code)
				require.NoError(t, key.err)
				assert.Equal(t, tt.want, key.got)
			})
		}

		// Chi fails closed on an entry it cannot parse: no address, 400.
		w := serve(r, request(http.MethodGet, "/", "10.0.0.1:80", "X-Forwarded-For: garbage"))
		assert.Equal(t, http.StatusBadRequest, w.Code)
		assert.ErrorIs(t, key.err, keyfuncs.ErrMissing)
	})

	t.Run("ClientIPFromRemoteAddr", func(t *testing.T) {
		key := &recorder{key: ratekitchi.ClientIP}
		r := chi.NewRouter()
		r.Use(middleware.ClientIPFromRemoteAddr)
		r.Use(ratekitchi.New(core.Must(core.NewLimiter(lenient)), key.Key))
		r.Get("/", text("ok"))
		for peer, want := range map[string]string{
			"192.0.2.1:80":          "192.0.2.1",
			"[::ffff:192.0.2.1]:80": "192.0.2.1",
			"[fe80::1%eth0]:80":     "fe80::/64",
			"[2001:db8:1:2::5]:80":  "2001:db8:1:2::/64",
		} {
			w := serve(r, request(http.MethodGet, "/", peer, "X-Forwarded-For: 1.1.1.1"))
			require.Equal(t, http.StatusOK, w.Code, peer)
			assert.Equal(t, want, key.got, peer)
		}
	})

	t.Run("spoofing", func(t *testing.T) {
		// A client that rotates X-Forwarded-For stays in its own counter.
		lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
		r := chi.NewRouter()
		r.Use(middleware.ClientIPFromXFF("10.0.0.0/8"))
		r.Use(ratekitchi.New(lim, ratekitchi.ClientIP))
		r.Get("/", text("ok"))
		codes := make([]int, 4)
		for i := range codes {
			codes[i] = serve(r, request(http.MethodGet, "/", "203.0.113.9:5555", "X-Forwarded-For: 198.51.100."+strconv.Itoa(i))).Code
		}
		assert.Equal(t, []int{200, 200, 429, 429}, codes)
	})

	t.Run("no-middleware", func(t *testing.T) {
		// The client gets 400 in fixed words; the log says what is
		// missing.
		var log strings.Builder
		r := chi.NewRouter()
		r.Use(ratekitchi.New(core.Must(core.NewLimiter(lenient)), ratekitchi.ClientIP,
			ratekitchi.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
		r.Get("/", text("ok"))
		w := serve(r, request(http.MethodGet, "/", "192.0.2.1:80"))
		assert.Equal(t, http.StatusBadRequest, w.Code)
		assert.Contains(t, w.Body.String(), "the request has no value to be rate limited by")
		assert.Contains(t, log.String(), "ClientIPFrom")
	})
}

// TestIPBehindProxies: X-Forwarded-For is read only from trusted proxies,
// walked from the right; an untrusted peer cannot choose its key.
func TestIPBehindProxies(t *testing.T) {
	ip, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48"))
	require.NoError(t, err)
	for _, tt := range []struct {
		name, peer string
		lines      []string
		want       string
	}{
		{"no proxy: peer", "203.0.113.9:5555", nil, "203.0.113.9"},
		{"untrusted peer: XFF ignored", "203.0.113.9:5555", []string{"X-Forwarded-For: 1.1.1.1"}, "203.0.113.9"},
		{"untrusted peer: X-Real-IP ignored", "203.0.113.9:5555", []string{"X-Real-IP: 1.1.1.1", "True-Client-IP: 1.1.1.1"}, "203.0.113.9"},
		{"trusted proxy", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},
		{"trusted proxy: forged leftmost ignored", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
		{"trusted hops skipped", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"ipv6 proxy and client", "[2001:db8:ffff::1]:80", []string{"X-Forwarded-For: 2001:db8:1:2::1"}, "2001:db8:1:2::/64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ip(request(http.MethodGet, "/", tt.peer, tt.lines...))
			require.NoError(t, err)
			assert.Equal(t, tt.want, k)
		})
	}

	t.Run("counting", func(t *testing.T) {
		lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
		r := chi.NewRouter()
		r.Use(ratekitchi.New(lim, ip))
		r.Get("/", text("ok"))
		// An attacker rotating the header from outside: one counter.
		assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/", "203.0.113.9:1", "X-Forwarded-For: 1.1.1.1")).Code)
		assert.Equal(t, http.StatusTooManyRequests, serve(r, request(http.MethodGet, "/", "203.0.113.9:2", "X-Forwarded-For: 2.2.2.2")).Code)
		// Two clients behind the proxy: two counters; a forged prefix does
		// not give a second one.
		assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/", "10.0.0.1:80", "X-Forwarded-For: 198.51.100.7")).Code)
		assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/", "10.0.0.1:80", "X-Forwarded-For: 198.51.100.8")).Code)
		assert.Equal(t, http.StatusTooManyRequests, serve(r, request(http.MethodGet, "/", "10.0.0.1:80", "X-Forwarded-For: 9.9.9.9, 198.51.100.7")).Code)
	})

	t.Run("errors", func(t *testing.T) {
		_, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/33"))
		assert.Error(t, err)
		_, err = ratekitchi.IP(keyfuncs.TrustedProxies("proxy.internal"))
		assert.Error(t, err)
	})
}

// statuses sends n requests through r, each from peer with a different
// forged X-Forwarded-For and X-Real-IP (or, from the proxy at 10.0.0.2,
// with the client's address appended to X-Forwarded-For and written over
// X-Real-IP, as a proxy does), and counts the statuses of the answers.
func statuses(r http.Handler, peer string, n int) map[int]int {
	codes := map[int]int{}
	for i := range n {
		forged := "198.51.100." + strconv.Itoa(i+1)
		lines := []string{"X-Forwarded-For: " + forged, "X-Real-IP: " + forged}
		if strings.HasPrefix(peer, "10.0.0.2:") {
			lines = []string{"X-Forwarded-For: " + forged + ", 203.0.113.50", "X-Real-IP: 203.0.113.50"}
		}
		codes[serve(r, request(http.MethodGet, "/", peer, lines...)).Code]++
	}
	return codes
}

// TestForgedHeaders: at a limit of 3, six requests of one client that
// rotates X-Forwarded-For and X-Real-IP get 3 through on every safe
// ordering. After Chi's middleware.RealIP, which rewrites r.RemoteAddr
// from those headers, every client-IP key refuses (500) rather than give
// each forged address a counter of its own.
func TestForgedHeaders(t *testing.T) {
	trusted, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	realIP := middleware.RealIP //lint:ignore SA1019 deliberately: the unsafe middleware under test
	fromXFF := middleware.ClientIPFromXFF("10.0.0.0/8")
	tests := []struct {
		name   string
		before []func(http.Handler) http.Handler // middleware mounted before the limiter
		after  []func(http.Handler) http.Handler // and after it
		key    ratekitchi.Key
		peer   string
		want   map[int]int
	}{
		{"PeerIP", nil, nil, ratekitchi.PeerIP, "203.0.113.9:5555", nil},
		{"PeerIP IPv6", nil, nil, ratekitchi.PeerIP, "[2001:db8:1:2::9]:5555", nil},
		{"IP", nil, nil, trusted, "203.0.113.9:5555", nil},
		{"IP via proxy", nil, nil, trusted, "10.0.0.2:80", nil},
		{"ClientIPFromXFF", []func(http.Handler) http.Handler{fromXFF}, nil, ratekitchi.ClientIP, "203.0.113.9:5555", nil},
		{"ClientIPFromXFF via proxy", []func(http.Handler) http.Handler{fromXFF}, nil, ratekitchi.ClientIP, "10.0.0.2:80", nil},
		{"PeerIP before RealIP", nil, []func(http.Handler) http.Handler{realIP}, ratekitchi.PeerIP, "203.0.113.9:5555", nil},
		{"IP before RealIP, via proxy", nil, []func(http.Handler) http.Handler{realIP}, trusted, "10.0.0.2:80", nil},

		{"PeerIP after RealIP", []func(http.Handler) http.Handler{realIP}, nil, ratekitchi.PeerIP, "203.0.113.9:5555", refused},
		{"IP after RealIP", []func(http.Handler) http.Handler{realIP}, nil, trusted, "203.0.113.9:5555", refused},
		{"IP after RealIP, via proxy", []func(http.Handler) http.Handler{realIP}, nil, trusted, "10.0.0.2:80", refused},
		{"ClientIP after RealIP and ClientIPFromXFF", []func(http.Handler) http.Handler{realIP, fromXFF}, nil, ratekitchi.ClientIP, "203.0.113.9:5555", refused},
		{"Join after RealIP", []func(http.Handler) http.Handler{realIP}, nil, keyfuncs.Join(keyfuncs.Route(), ratekitchi.PeerIP), "203.0.113.9:5555", refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log strings.Builder
			lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
			r := chi.NewRouter()
			r.Use(tt.before...)
			r.Use(ratekitchi.New(lim, tt.key, ratekitchi.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
			r.Use(tt.after...)
			r.Get("/", text("ok"))
			want := tt.want
			if want == nil {
				want = map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}
			}
			assert.Equal(t, want, statuses(r, tt.peer, 6))
			if tt.want != nil {
				assert.Contains(t, log.String(), "middleware.RealIP", "the log names the cause")
				assert.Contains(t, log.String(), "keyfuncs.TrustedProxies", "and the remedy")
			}
		})
	}
}

// refused is what an unsafe ordering answers to six requests: 500 each.
var refused = map[int]int{http.StatusInternalServerError: 6}

type userKey struct{}

type userID int64

func TestUser(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	auth := func(next http.Handler) http.Handler { // the app's authentication middleware
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-User"); u != "" {
				id, _ := strconv.Atoi(u)
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, userID(id)))
			}
			next.ServeHTTP(w, r)
		})
	}
	key := &recorder{key: ratekitchi.User(userKey{})}
	r := chi.NewRouter()
	r.Use(auth)
	r.Use(ratekitchi.New(lim, key.Key))
	r.Get("/", text("ok"))

	assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/", "192.0.2.1:1", "X-User: 42")).Code)
	assert.Equal(t, "42", key.got)
	assert.Equal(t, http.StatusTooManyRequests, serve(r, request(http.MethodGet, "/", "192.0.2.2:1", "X-User: 42")).Code,
		"the user's counter, whatever the address")
	assert.Equal(t, http.StatusOK, serve(r, request(http.MethodGet, "/", "192.0.2.1:1", "X-User: 7")).Code)

	w := serve(r, request(http.MethodGet, "/", "192.0.2.1:1"))
	assert.Equal(t, http.StatusBadRequest, w.Code, "no user: 400")
	assert.ErrorIs(t, key.err, keyfuncs.ErrMissing)
	assert.Equal(t, answer.ProblemContentType, w.Header().Get("Content-Type"))

	// Anonymous requests fall back to the peer address.
	k, err := keyfuncs.First(ratekitchi.User(userKey{}), ratekitchi.PeerIP)(request(http.MethodGet, "/", "192.0.2.1:1"))
	require.NoError(t, err)
	assert.Equal(t, "1:192.0.2.1", k)
}

func TestPeerIPAndIPAndHeader(t *testing.T) {
	for peer, want := range map[string]string{
		"192.0.2.1:80":          "192.0.2.1",
		"[2001:db8:1:2::5]:443": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.1]:80": "192.0.2.1",
	} {
		k, err := ratekitchi.PeerIP(request(http.MethodGet, "/", peer, "X-Forwarded-For: 1.1.1.1", "X-Real-IP: 1.1.1.1"))
		require.NoError(t, err)
		assert.Equal(t, want, k, peer)
	}
	_, err := ratekitchi.PeerIP(request(http.MethodGet, "/", "@"))
	assert.ErrorIs(t, err, keyfuncs.ErrMissing, "a unix-socket peer has no address")

	ip, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.1"), keyfuncs.ProxyHeader("X-Real-IP"), keyfuncs.IPv6Prefix(56))
	require.NoError(t, err)
	k, err := ip(request(http.MethodGet, "/", "10.0.0.1:80", "X-Real-IP: 2001:db8:1:2ff::1", "X-Forwarded-For: 6.6.6.6"))
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:200::/56", k)
	k, err = ip(request(http.MethodGet, "/", "203.0.113.9:80", "X-Real-IP: 1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", k)
	_, err = ratekitchi.IP(keyfuncs.IPv6Prefix(0))
	assert.Error(t, err)

	h := ratekitchi.Header("x-api-key")
	k, err = h(request(http.MethodGet, "/", "192.0.2.1:1", "X-Api-Key:  k1 "))
	require.NoError(t, err)
	assert.Equal(t, "k1", k)
	_, err = h(request(http.MethodGet, "/", "192.0.2.1:1", "X-Api-Key:  "))
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
}
