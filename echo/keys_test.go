package ratekitecho_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/keyfuncs"
)

// keyOf runs key on a request to e from the peer remote with the given
// header lines, and returns the key or the error. set, if not nil,
// prepares the context as the app's middleware would.
func keyOf(e *echo.Echo, key ratekitecho.Key, remote string, set func(echo.Context), header ...[2]string) (string, error) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for _, h := range header {
		r.Header.Add(h[0], h[1])
	}
	c := e.NewContext(r, httptest.NewRecorder())
	if set != nil {
		set(c)
	}
	return key(c)
}

func xff(v string) [2]string { return [2]string{"X-Forwarded-For", v} }

func TestPeerIP(t *testing.T) {
	k, err := keyOf(echo.New(), ratekitecho.PeerIP, "203.0.113.7:4711", nil, xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "forwarding headers of any peer are ignored")

	k, err = keyOf(echo.New(), ratekitecho.PeerIP, "[2001:db8:1:2:3:4:5:6]:4711", nil)
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "IPv6 clients are grouped by /64")

	k, err = keyOf(echo.New(), ratekitecho.PeerIP, "[::ffff:192.0.2.1]:4711", nil)
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.1", k, "an IPv4-mapped peer is its IPv4 client")

	_, err = keyOf(echo.New(), ratekitecho.PeerIP, "@", nil) // a Unix socket
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
}

func TestIP(t *testing.T) {
	ip, err := ratekitecho.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)

	k, err := keyOf(echo.New(), ip, "203.0.113.7:4711", nil, xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "a spoofed X-Forwarded-For from an untrusted peer is ignored")

	k, err = keyOf(echo.New(), ip, "10.0.0.2:4711", nil, xff("1.1.1.1, 10.0.0.9"), xff("198.51.100.4, 10.0.0.3"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "walked from the right across header lines, skipping trusted proxies")

	k, err = keyOf(echo.New(), ip, "10.0.0.2:4711", nil, xff("6.6.6.6, 198.51.100.4"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "the entry the client forged on the left is never used")

	k, err = keyOf(echo.New(), ip, "10.0.0.2:4711", nil)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.2", k, "no header: the proxy itself")

	// e.IPExtractor does not matter to IP.
	e := echo.New()
	e.IPExtractor = echo.ExtractIPFromXFFHeader()
	k, err = keyOf(e, ip, "203.0.113.7:4711", nil, xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)

	real, err := ratekitecho.IP(keyfuncs.TrustedProxies("10.0.0.2"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	k, err = keyOf(echo.New(), real, "10.0.0.2:4711", nil, [2]string{"x-real-ip", " 198.51.100.4 "})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)

	_, err = ratekitecho.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
}

func TestRealIP(t *testing.T) {
	// Echo's default: c.RealIP() takes the leftmost X-Forwarded-For from
	// anyone. RealIP refuses.
	bare := echo.New()
	_, err := keyOf(bare, ratekitecho.RealIP, "203.0.113.7:4711", nil, xff("1.1.1.1"))
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.False(t, errors.Is(err, keyfuncs.ErrMissing), "a server error (500), not the client's")
	c := bare.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	c.Request().Header.Set("X-Forwarded-For", "1.1.1.1, 203.0.113.7")
	assert.Equal(t, "1.1.1.1", c.RealIP(), "the pitfall RealIP refuses")

	// ExtractIPDirect: the TCP peer.
	direct := echo.New()
	direct.IPExtractor = echo.ExtractIPDirect()
	k, err := keyOf(direct, ratekitecho.RealIP, "203.0.113.7:4711", nil, xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
	k, err = keyOf(direct, ratekitecho.RealIP, "[2001:db8:1:2:3:4:5:6]:4711", nil)
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "IPv6 clients are grouped by /64")
	_, err = keyOf(direct, ratekitecho.RealIP, "@", nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)

	// X-Forwarded-For behind one trusted proxy, Echo's default trust of
	// private ranges turned off.
	_, proxies, err := net.ParseCIDR("10.0.0.0/8")
	require.NoError(t, err)
	proxied := echo.New()
	proxied.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustLoopback(false), echo.TrustLinkLocal(false),
		echo.TrustPrivateNet(false), echo.TrustIPRange(proxies))
	k, err = keyOf(proxied, ratekitecho.RealIP, "203.0.113.7:4711", nil, xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "a spoofed X-Forwarded-For from an untrusted peer is ignored")
	k, err = keyOf(proxied, ratekitecho.RealIP, "10.0.0.2:4711", nil, xff("6.6.6.6, 198.51.100.4, 10.0.0.9"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "from a trusted proxy, walked from the right")
	k, err = keyOf(proxied, ratekitecho.RealIP, "10.0.0.2:4711", nil, xff("2001:db8:1:2::99"))
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)
	k, err = keyOf(proxied, ratekitecho.RealIP, "10.0.0.2:4711", nil, xff("::ffff:198.51.100.4"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "a mapped address is keyed as the IPv4 client, not a second bucket")

	// An extractor that yields no address: 400.
	odd := echo.New()
	odd.IPExtractor = func(*http.Request) string { return "unknown" }
	_, err = keyOf(odd, ratekitecho.RealIP, "203.0.113.7:4711", nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
}

func TestHeader(t *testing.T) {
	key := ratekitecho.Header("x-api-key")
	k, err := keyOf(echo.New(), key, "203.0.113.7:1", nil, [2]string{"X-Api-Key", "  secret "})
	require.NoError(t, err)
	assert.Equal(t, "secret", k)

	for _, h := range [][][2]string{nil, {{"X-Api-Key", "  "}}} {
		_, err = keyOf(echo.New(), key, "203.0.113.7:1", nil, h...)
		assert.ErrorIs(t, err, keyfuncs.ErrMissing)
		assert.EqualError(t, err, `keyfuncs: header "X-Api-Key": ratekit: request has no rate-limit key`, "as keyfuncs.Header")
	}

	_, err = keyOf(echo.New(), ratekitecho.Header(""), "203.0.113.7:1", nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

func TestAdapt(t *testing.T) {
	key := ratekitecho.Adapt(keyfuncs.Join(keyfuncs.Query("tenant"), keyfuncs.PeerIP))
	r := httptest.NewRequest(http.MethodGet, "/?tenant=acme", nil)
	r.RemoteAddr = "203.0.113.7:1"
	k, err := key(echo.New().NewContext(r, httptest.NewRecorder()))
	require.NoError(t, err)
	assert.Contains(t, k, "acme")
	assert.Contains(t, k, "203.0.113.7")

	_, err = keyOf(echo.New(), ratekitecho.Adapt(nil), "203.0.113.7:1", nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

type userID struct{ id string }

func (u *userID) String() string { return u.id }

type tenant string

func TestContextValue(t *testing.T) {
	var nilUser *userID
	var nilInt *int
	tests := []struct {
		name    string
		value   any
		want    string
		missing bool
	}{
		{"string", "alice", "alice", false},
		{"int", 42, "42", false},
		{"int8", int8(-3), "-3", false},
		{"uint64", uint64(7), "7", false},
		{"stringer", &userID{"u-1"}, "u-1", false},
		{"string-type", tenant("acme"), "acme", false},
		{"absent", nil, "", true},
		{"blank", " ", "", true},
		{"nil-stringer", nilUser, "", true},
		{"nil-pointer", nilInt, "", true},
		{"unsupported", 1.5, "", false},
		{"unsupported-pointer", new(int), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := func(c echo.Context) {
				if tc.value != nil {
					c.Set("user", tc.value)
				}
			}
			for _, key := range []ratekitecho.Key{ratekitecho.ContextValue("user"), ratekitecho.User("user")} {
				k, err := keyOf(echo.New(), key, "203.0.113.7:1", set)
				switch {
				case tc.want != "":
					require.NoError(t, err)
					assert.Equal(t, tc.want, k)
				case tc.missing:
					assert.ErrorIs(t, err, keyfuncs.ErrMissing)
				default:
					require.Error(t, err)
					assert.False(t, errors.Is(err, keyfuncs.ErrMissing), "a bad type is a server error")
				}
			}
		})
	}
}

// TestUserLimit: a limit per user that an auth middleware stored with
// c.Set; a request without a user is answered 400.
func TestUserLimit(t *testing.T) {
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the app's auth middleware
		return func(c echo.Context) error {
			if u := c.Request().Header.Get("X-Client"); u != "" {
				c.Set("user_id", u)
			}
			return next(c)
		}
	})
	e.Use(ratekitecho.New(lim, ratekitecho.User("user_id")))
	e.GET("/", ok)

	assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "alice").status)
	assert.Equal(t, http.StatusTooManyRequests, do(t, e, http.MethodGet, "/", "alice").status)
	assert.Equal(t, http.StatusOK, do(t, e, http.MethodGet, "/", "bob").status)
	r := do(t, e, http.MethodGet, "/", "")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, answer.ProblemContentType, r.header.Get("Content-Type"))
}
