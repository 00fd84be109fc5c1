package ratekitgin_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
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

func TestGinClientIP(t *testing.T) {
	// The pitfall: Gin's default engine trusts every peer.
	k, err := keyOf(t, nil, ratekitgin.GinClientIP, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "1.1.1.1", k, "spoofed: gin.New() believes X-Forwarded-For from anyone")

	// SetTrustedProxies(nil): the peer, whatever the headers.
	none := gin.New()
	require.NoError(t, none.SetTrustedProxies(nil))
	k, err = keyOf(t, none, ratekitgin.GinClientIP, "203.0.113.7:4711", xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
	k, err = keyOf(t, none, ratekitgin.GinClientIP, "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "keyed like PeerIP")

	// Your proxies: headers are read only from them, from the right.
	proxies := gin.New()
	require.NoError(t, proxies.SetTrustedProxies([]string{"10.0.0.0/8"}))
	k, err = keyOf(t, proxies, ratekitgin.GinClientIP, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "untrusted peer")
	k, err = keyOf(t, proxies, ratekitgin.GinClientIP, "10.0.0.2:4711", xff("1.1.1.1, 198.51.100.4, 10.0.0.9"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "trusted proxy")
	k, err = keyOf(t, proxies, ratekitgin.GinClientIP, "10.0.0.2:4711", xff("2001:db8:1:2::77"))
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)

	// The other pitfall: a trusted platform's header is believed from
	// every peer, even with no trusted proxies.
	platform := gin.New()
	require.NoError(t, platform.SetTrustedProxies(nil))
	platform.TrustedPlatform = gin.PlatformCloudflare
	k, err = keyOf(t, platform, ratekitgin.GinClientIP, "203.0.113.7:4711", [2]string{"CF-Connecting-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "1.1.1.1", k, "spoofed unless only the platform can reach the server")
	_, err = keyOf(t, platform, ratekitgin.GinClientIP, "203.0.113.7:4711", [2]string{"CF-Connecting-IP", "not-an-ip"})
	assert.ErrorIs(t, err, keyfuncs.ErrMissing, "Gin's raw header text is not an address")

	_, err = keyOf(t, none, ratekitgin.GinClientIP, "@unix")
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
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
