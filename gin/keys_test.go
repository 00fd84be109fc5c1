package ratekitgin_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
)

// keyOf runs key on a request from the peer remote, with the given header
// lines, in a context of engine (nil: a new gin.New(), which trusts every
// proxy, as Gin does by default).
func keyOf(t *testing.T, engine *gin.Engine, key ratekitgin.Key, remote string, header ...[2]string) (string, error) {
	t.Helper()
	if engine == nil {
		engine = gin.New()
	}
	r := httptest.NewRequest(http.MethodGet, "/?api_key=q-1", nil)
	r.RemoteAddr = remote
	for _, h := range header {
		r.Header.Add(h[0], h[1])
	}
	c := gin.CreateTestContextOnly(httptest.NewRecorder(), engine)
	c.Request = r
	return key(c)
}

func xff(v string) [2]string { return [2]string{"X-Forwarded-For", v} }

func TestPeerIP(t *testing.T) {
	k, err := keyOf(t, nil, ratekitgin.PeerIP, "203.0.113.7:4711", xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "forwarding headers of any peer are ignored, even under Gin's trust-all default")

	k, err = keyOf(t, nil, ratekitgin.PeerIP, "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "IPv6 clients are grouped by /64")

	k, err = keyOf(t, nil, ratekitgin.PeerIP, "[::ffff:192.0.2.9]:4711")
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.9", k, "IPv4-mapped addresses are IPv4 clients")

	_, err = keyOf(t, nil, ratekitgin.PeerIP, "@unix")
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
}

func TestIP(t *testing.T) {
	ip, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)

	k, err := keyOf(t, nil, ip, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "a spoofed X-Forwarded-For from an untrusted peer is ignored")

	k, err = keyOf(t, nil, ip, "10.0.0.2:4711", xff("1.1.1.1, 198.51.100.4"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "from a trusted proxy, the entry it appended is used, not the forged one to its left")

	k, err = keyOf(t, nil, ip, "10.0.0.2:4711", xff("1.1.1.1, 10.0.0.9"), xff("198.51.100.4, 10.0.0.3"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "walked from the right across header lines, skipping trusted proxies")

	k, err = keyOf(t, nil, ip, "10.0.0.2:4711")
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.2", k, "no header: the proxy itself")

	real, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.2"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	k, err = keyOf(t, nil, real, "10.0.0.2:4711", [2]string{"x-real-ip", " 198.51.100.4 "})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)
	k, err = keyOf(t, nil, real, "203.0.113.7:4711", [2]string{"X-Real-IP", "198.51.100.4"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)

	_, err = ratekitgin.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
}

// ginClientIP builds GinClientIP for engine, which must be accepted.
func ginClientIP(t *testing.T, engine *gin.Engine) ratekitgin.Key {
	t.Helper()
	key, err := ratekitgin.GinClientIP(engine)
	require.NoError(t, err)
	return key
}

func TestGinClientIP(t *testing.T) {
	// SetTrustedProxies(nil): the peer, whatever the headers.
	none := gin.New()
	require.NoError(t, none.SetTrustedProxies(nil))
	k, err := keyOf(t, none, ginClientIP(t, none), "203.0.113.7:4711", xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
	k, err = keyOf(t, none, ginClientIP(t, none), "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "keyed like PeerIP")
	_, err = keyOf(t, none, ginClientIP(t, none), "@unix")
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	_, err = keyOf(t, none, ginClientIP(t, none), "198.51.100.7")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured, "a RemoteAddr rewritten from a header")
	assert.Contains(t, err.Error(), "without a port")

	// Your proxies: headers are read only from them, from the right.
	proxies := gin.New()
	require.NoError(t, proxies.SetTrustedProxies([]string{"10.0.0.0/8"}))
	key := ginClientIP(t, proxies)
	k, err = keyOf(t, proxies, key, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "untrusted peer")
	k, err = keyOf(t, proxies, key, "10.0.0.2:4711", xff("1.1.1.1, 198.51.100.4, 10.0.0.9"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "trusted proxy")
	k, err = keyOf(t, proxies, key, "10.0.0.2:4711", xff("2001:db8:1:2::77"))
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)

	// Headers off altogether: safe even while every peer is "trusted".
	off := gin.New()
	off.ForwardedByClientIP = false
	k, err = keyOf(t, off, ginClientIP(t, off), "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
}

// TestGinClientIPRefusesUnsafeEngines: on an engine that would take the
// client address from a header any client sends, GinClientIP returns an
// error naming the setting to change, and no key.
func TestGinClientIPRefusesUnsafeEngines(t *testing.T) {
	engine := func(configure func(*gin.Engine)) *gin.Engine {
		r := gin.New()
		configure(r)
		return r
	}
	trust := func(cidrs ...string) func(*gin.Engine) {
		return func(r *gin.Engine) { require.NoError(t, r.SetTrustedProxies(cidrs)) }
	}
	tests := []struct {
		name   string
		engine *gin.Engine
		want   []string
	}{
		{"gin.Default", gin.Default(), []string{"SetTrustedProxies", "ForwardedByClientIP", "192.0.2.1", "X-Forwarded-For"}},
		{"gin.New", gin.New(), []string{"SetTrustedProxies", "X-Forwarded-For"}},
		{"X-Real-IP only", engine(func(r *gin.Engine) { r.RemoteIPHeaders = []string{"X-Real-IP"} }), []string{"SetTrustedProxies", "X-Real-Ip"}},
		{"custom header", engine(func(r *gin.Engine) { r.RemoteIPHeaders = []string{"X-Client-Addr"} }), []string{"X-Client-Addr"}},
		{"all IPv4", engine(trust("0.0.0.0/0")), []string{"SetTrustedProxies", "192.0.2.1"}},
		{"all IPv6", engine(trust("10.0.0.0/8", "::/0")), []string{"SetTrustedProxies", "2001:db8::1"}},
		{"platform", engine(func(r *gin.Engine) {
			require.NoError(t, r.SetTrustedProxies(nil))
			r.TrustedPlatform = gin.PlatformCloudflare
		}), []string{"TrustedPlatform", `"CF-Connecting-IP"`, "ratekitgin.IP"}},
		{"app engine", engine(func(r *gin.Engine) {
			require.NoError(t, r.SetTrustedProxies(nil))
			r.AppEngine = true
		}), []string{"AppEngine"}},
		{"nil", nil, []string{"nil engine"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ratekitgin.GinClientIP(tt.engine)
			require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
			assert.Nil(t, key)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// admitted sends n requests through a real engine to a handler behind
// the middleware keyed by key, at a limit of limit per minute, each from
// peer with a different forged X-Forwarded-For and X-Real-IP (and
// forwarded by proxy, if it is set, as the entry it appends), and returns
// the status of each answer.
func admitted(t *testing.T, r *gin.Engine, wrap func(http.Handler) http.Handler, key ratekitgin.Key, peer string, n, limit int) map[int]int {
	t.Helper()
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(limit)})
	r.Use(ratekitgin.New(lim, key, ratekitgin.WithLogger(slog.New(slog.DiscardHandler))))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	var h http.Handler = r
	if wrap != nil {
		h = wrap(r)
	}
	codes := map[int]int{}
	for i := range n {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = peer
		forged := "198.51.100." + strconv.Itoa(i+1)
		req.Header.Set("X-Forwarded-For", forged)
		if strings.HasPrefix(peer, "10.") { // through the proxy, which appends the real client
			req.Header.Set("X-Forwarded-For", forged+", 203.0.113.50")
		}
		req.Header.Set("X-Real-IP", forged)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		codes[w.Code]++
	}
	return codes
}

// TestForgedHeaders: at a limit of 3, six requests of one client that
// rotates its X-Forwarded-For get 3 through on every safe stack, and none
// on an unsafe one (its key refuses to be built, or answers 500).
func TestForgedHeaders(t *testing.T) {
	ip, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	trusting := func(cidrs ...string) *gin.Engine {
		r := gin.New()
		require.NoError(t, r.SetTrustedProxies(cidrs))
		return r
	}
	held := map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}
	safe := []struct {
		name   string
		engine *gin.Engine
		key    func(*gin.Engine) ratekitgin.Key
		peer   string
	}{
		{"PeerIP on gin.Default", gin.Default(), func(*gin.Engine) ratekitgin.Key { return ratekitgin.PeerIP }, "203.0.113.7:4711"},
		{"IP on gin.Default", gin.Default(), func(*gin.Engine) ratekitgin.Key { return ip }, "203.0.113.7:4711"},
		{"IP via proxy", gin.Default(), func(*gin.Engine) ratekitgin.Key { return ip }, "10.0.0.2:4711"},
		{"GinClientIP, no proxies", trusting(), func(r *gin.Engine) ratekitgin.Key { return ginClientIP(t, r) }, "203.0.113.7:4711"},
		{"GinClientIP, own proxies", trusting("10.0.0.0/8"), func(r *gin.Engine) ratekitgin.Key { return ginClientIP(t, r) }, "203.0.113.7:4711"},
		{"GinClientIP via proxy", trusting("10.0.0.0/8"), func(r *gin.Engine) ratekitgin.Key { return ginClientIP(t, r) }, "10.0.0.2:4711"},
		{"GinClientIP IPv6 peer", trusting("10.0.0.0/8"), func(r *gin.Engine) ratekitgin.Key { return ginClientIP(t, r) }, "[2001:db8:1:2::7]:4711"},
	}
	for _, tt := range safe {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, held, admitted(t, tt.engine, nil, tt.key(tt.engine), tt.peer, 6, 3))
		})
	}

	t.Run("GinClientIP on gin.Default", func(t *testing.T) {
		_, err := ratekitgin.GinClientIP(gin.Default())
		assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured, "refused where it would admit 6 of 6")
	})

	// A handler in front of the engine that rewrites RemoteAddr from the
	// header, as gorilla's handlers.ProxyHeaders does.
	proxyHeaders := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get("X-Real-IP"); v != "" {
				r.RemoteAddr = v
			}
			next.ServeHTTP(w, r)
		})
	}
	t.Run("PeerIP behind a RemoteAddr rewrite", func(t *testing.T) {
		codes := admitted(t, gin.New(), proxyHeaders, ratekitgin.PeerIP, "203.0.113.7:4711", 6, 3)
		assert.Equal(t, map[int]int{http.StatusInternalServerError: 6}, codes)
	})
	t.Run("GinClientIP behind a RemoteAddr rewrite", func(t *testing.T) {
		r := gin.New()
		require.NoError(t, r.SetTrustedProxies(nil))
		codes := admitted(t, r, proxyHeaders, ginClientIP(t, r), "203.0.113.7:4711", 6, 3)
		assert.Equal(t, map[int]int{http.StatusInternalServerError: 6}, codes)
	})
	t.Run("IP behind a RemoteAddr rewrite", func(t *testing.T) {
		codes := admitted(t, gin.New(), proxyHeaders, ip, "203.0.113.7:4711", 6, 3)
		assert.Equal(t, map[int]int{http.StatusInternalServerError: 6}, codes)
	})
}

func TestHeader(t *testing.T) {
	key := ratekitgin.Header("x-api-key")
	k, err := keyOf(t, nil, key, "203.0.113.7:1", [2]string{"X-Api-Key", "  secret "})
	require.NoError(t, err)
	assert.Equal(t, "secret", k)

	for _, h := range [][][2]string{nil, {{"X-Api-Key", "  "}}} {
		_, err = keyOf(t, nil, key, "203.0.113.7:1", h...)
		assert.ErrorIs(t, err, keyfuncs.ErrMissing)
		assert.EqualError(t, err, `keyfuncs: header "X-Api-Key": ratekit: request has no rate-limit key`, "as keyfuncs.Header")
	}

	_, err = keyOf(t, nil, ratekitgin.Header(""), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

func TestAdapt(t *testing.T) {
	k, err := keyOf(t, nil, ratekitgin.Adapt(keyfuncs.Query("api_key")), "203.0.113.7:1")
	require.NoError(t, err)
	assert.Equal(t, "q-1", k)

	k, err = keyOf(t, nil, ratekitgin.Adapt(keyfuncs.PeerIP), "203.0.113.7:1", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)

	_, err = keyOf(t, nil, ratekitgin.Adapt(keyfuncs.Query("other")), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)

	_, err = keyOf(t, nil, ratekitgin.Adapt(nil), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.NotErrorIs(t, err, keyfuncs.ErrMissing)
}

type userID struct{ id string }

func (u *userID) String() string { return u.id }

type tenant string

type account int16

func TestUser(t *testing.T) {
	var nilUser *userID
	tests := []struct {
		name    string
		set     bool
		value   any
		want    string
		missing bool
	}{
		{name: "string", set: true, value: "alice", want: "alice"},
		{name: "int", set: true, value: 42, want: "42"},
		{name: "int64", set: true, value: int64(-7), want: "-7"},
		{name: "uint64", set: true, value: uint64(7), want: "7"},
		{name: "named-int", set: true, value: account(-3), want: "-3"},
		{name: "stringer", set: true, value: &userID{"u-1"}, want: "u-1"},
		{name: "string-type", set: true, value: tenant("acme"), want: "acme"},
		{name: "absent", missing: true},
		{name: "nil", set: true, value: nil, missing: true},
		{name: "blank", set: true, value: " ", missing: true},
		{name: "nil-stringer", set: true, value: nilUser, missing: true},
		{name: "empty-stringer", set: true, value: &userID{}, missing: true},
		{name: "unsupported", set: true, value: 1.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, key := range []ratekitgin.Key{ratekitgin.User("user"), ratekitgin.ContextKey("user")} {
				k, err := keyOf(t, nil, func(c *gin.Context) (string, error) {
					if tc.set {
						c.Set("user", tc.value)
					}
					return key(c)
				}, "203.0.113.7:1")
				switch {
				case tc.want != "":
					require.NoError(t, err)
					assert.Equal(t, tc.want, k)
				case tc.missing:
					assert.ErrorIs(t, err, keyfuncs.ErrMissing)
					assert.Empty(t, k)
				default:
					require.Error(t, err)
					assert.False(t, errors.Is(err, keyfuncs.ErrMissing), "a bad type is a server error")
					assert.Contains(t, err.Error(), "unsupported type float64")
				}
			}
		})
	}

	type ctxKey struct{}
	k, err := keyOf(t, nil, func(c *gin.Context) (string, error) {
		c.Set(ctxKey{}, "bob") // Gin's keys need not be strings
		return ratekitgin.User(ctxKey{})(c)
	}, "203.0.113.7:1")
	require.NoError(t, err)
	assert.Equal(t, "bob", k)

	_, err = keyOf(t, nil, ratekitgin.ContextKey(nil), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

// TestUserThroughMiddleware: a limit per user set by an auth middleware;
// anonymous requests get 400.
func TestUserThroughMiddleware(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-Client"); u != "" {
			c.Set("user", u)
		}
		c.Next()
	})
	r.Use(ratekitgin.New(lim, ratekitgin.User("user")))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	assert.Equal(t, http.StatusTooManyRequests, do(t, r, http.MethodGet, "/", "alice").status)
	assert.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "bob").status)
	res := do(t, r, http.MethodGet, "/", "")
	assert.Equal(t, http.StatusBadRequest, res.status)
	assert.Contains(t, res.body, `"status":400`)
}
