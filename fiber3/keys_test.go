package ratekitfiber3_test

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	"github.com/ratekit/ratekit/keyfuncs"
)

// keyOf runs key in a request to app from the peer remote with the given
// header lines, and returns the key or the error.
func keyOf(t *testing.T, app *fiber.App, key ratekitfiber3.Key, remote string, header ...[2]string) (string, error) {
	t.Helper()
	var k string
	var kerr error
	calls++
	path := "/key/" + strconv.Itoa(calls) // a route of its own: an app may serve several calls
	app.Get(path, func(c fiber.Ctx) error {
		k, kerr = key(c)
		return nil
	})
	var req fasthttp.Request
	req.Header.SetMethod(http.MethodGet)
	req.SetRequestURI(path)
	for _, h := range header {
		req.Header.Add(h[0], h[1])
	}
	addr, err := net.ResolveTCPAddr("tcp", remote)
	require.NoError(t, err)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, addr, nil)
	app.Handler()(&ctx)
	require.Equal(t, http.StatusOK, ctx.Response.StatusCode())
	return k, kerr
}

var calls int

func xff(v string) [2]string { return [2]string{"X-Forwarded-For", v} }

func TestPeerIP(t *testing.T) {
	k, err := keyOf(t, fiber.New(), ratekitfiber3.PeerIP, "203.0.113.7:4711", xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "forwarding headers of any peer are ignored")

	k, err = keyOf(t, fiber.New(), ratekitfiber3.PeerIP, "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "IPv6 clients are grouped by /64")
}

func TestIP(t *testing.T) {
	ip, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)

	k, err := keyOf(t, fiber.New(), ip, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "a spoofed X-Forwarded-For from an untrusted peer is ignored")

	k, err = keyOf(t, fiber.New(), ip, "10.0.0.2:4711", xff("1.1.1.1, 10.0.0.9"), xff("198.51.100.4, 10.0.0.3"))
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k, "walked from the right across header lines, skipping trusted proxies")

	k, err = keyOf(t, fiber.New(), ip, "10.0.0.2:4711")
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.2", k, "no header: the proxy itself")

	real, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.2"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	k, err = keyOf(t, fiber.New(), real, "10.0.0.2:4711", [2]string{"x-real-ip", " 198.51.100.4 "})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)

	_, err = ratekitfiber3.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
}

// clientIP builds ClientIP for app, which must be accepted.
func clientIP(t *testing.T, app *fiber.App) ratekitfiber3.Key {
	t.Helper()
	key, err := ratekitfiber3.ClientIP(app)
	require.NoError(t, err)
	return key
}

func TestClientIP(t *testing.T) {
	// Default config: c.IP() is the peer, headers are ignored.
	app := fiber.New()
	k, err := keyOf(t, app, clientIP(t, app), "203.0.113.7:4711", xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
	k, err = keyOf(t, app, clientIP(t, app), "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)

	// A header the proxy overwrites, read only from the proxy.
	trusted := fiber.New(fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.2"}}, EnableIPValidation: true})
	key := clientIP(t, trusted)
	k, err = keyOf(t, trusted, key, "203.0.113.7:4711", [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
	k, err = keyOf(t, trusted, key, "10.0.0.2:4711", [2]string{"X-Real-IP", "198.51.100.4"})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)
	k, err = keyOf(t, trusted, key, "10.0.0.2:4711", [2]string{"X-Real-IP", "2001:db8:1:2::9"})
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)

	// Built for one app, used on another: 500, whatever that app does.
	_, err = keyOf(t, fiber.New(), key, "203.0.113.7:4711")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.Contains(t, err.Error(), "another app")
}

// TestClientIPRefusesUnsafeApps: on an app whose c.IP() would come from a
// header any client sends, ClientIP returns an error naming the setting to
// change, and no key.
func TestClientIPRefusesUnsafeApps(t *testing.T) {
	checked := func(header string, proxies ...string) fiber.Config {
		return fiber.Config{ProxyHeader: header, TrustProxy: true, TrustProxyConfig: fiber.TrustProxyConfig{Proxies: proxies}}
	}
	tests := []struct {
		name string
		app  *fiber.App
		want []string
	}{
		{"X-Forwarded-For", fiber.New(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor}), []string{"leftmost", "ratekitfiber3.IP(keyfuncs.TrustedProxies"}},
		{"X-Forwarded-For, checked", fiber.New(checked("x-forwarded-for", "10.0.0.0/8")), []string{"leftmost", "ratekitfiber3.IP"}},
		{"Forwarded, checked", fiber.New(checked("Forwarded", "10.0.0.0/8")), []string{"leftmost", "ratekitfiber3.IP"}},
		{"X-Real-IP unchecked", fiber.New(fiber.Config{ProxyHeader: "X-Real-IP", TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.2"}}}), []string{`"X-Real-IP"`, "TrustProxy"}},
		{"every IPv4 peer trusted", fiber.New(checked("X-Real-IP", "0.0.0.0/0")), []string{"TrustProxyConfig", "192.0.2.1", "X-Real-Ip"}},
		{"every IPv6 peer trusted", fiber.New(checked("CF-Connecting-IP", "10.0.0.0/8", "::/0")), []string{"TrustProxyConfig", "2001:db8::1", "Cf-Connecting-Ip"}},
		{"nil", nil, []string{"nil app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ratekitfiber3.ClientIP(tt.app)
			require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
			assert.Nil(t, key)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// statuses sends n requests through app, keyed by key at a limit of
// limit per minute, each from peer with a different forged X-Forwarded-For
// and X-Real-IP (or, from a proxy at 10.0.0.2, with the client's address
// appended to X-Forwarded-For and written over X-Real-IP, as a proxy
// does), and counts the statuses of the answers.
func statuses(t *testing.T, app *fiber.App, key ratekitfiber3.Key, peer string, n, limit int) map[int]int {
	t.Helper()
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(limit)})
	app.Use(ratekitfiber3.New(lim, key, ratekitfiber3.WithLogger(slog.New(slog.DiscardHandler))))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	addr, err := net.ResolveTCPAddr("tcp", peer)
	require.NoError(t, err)
	codes := map[int]int{}
	for i := range n {
		var req fasthttp.Request
		req.SetRequestURI("/")
		forged := "198.51.100." + strconv.Itoa(i+1)
		if strings.HasPrefix(peer, "10.0.0.2:") {
			req.Header.Set("X-Forwarded-For", forged+", 203.0.113.50")
			req.Header.Set("X-Real-IP", "203.0.113.50")
		} else {
			req.Header.Set("X-Forwarded-For", forged)
			req.Header.Set("X-Real-IP", forged)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, addr, nil)
		app.Handler()(&ctx)
		codes[ctx.Response.StatusCode()]++
	}
	return codes
}

// TestForgedHeaders: at a limit of 3, six requests of one client that
// rotates its X-Forwarded-For and X-Real-IP get 3 through on every safe
// stack; on an unsafe one the key refuses to be built.
func TestForgedHeaders(t *testing.T) {
	ip, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	behindProxy := fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.0/8"}}, EnableIPValidation: true}
	behindPrivate := fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
		TrustProxyConfig: fiber.TrustProxyConfig{Private: true}, EnableIPValidation: true}
	held := map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}
	peerIP := func(*fiber.App) ratekitfiber3.Key { return ratekitfiber3.PeerIP }
	clientIPOf := func(app *fiber.App) ratekitfiber3.Key { return clientIP(t, app) }
	for _, tt := range []struct {
		name string
		cfg  fiber.Config
		key  func(*fiber.App) ratekitfiber3.Key
		peer string
	}{
		{"PeerIP", fiber.Config{}, peerIP, "203.0.113.7:4711"},
		{"PeerIP, ProxyHeader trusted from all", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, TrustProxy: true,
			TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"0.0.0.0/0"}}}, peerIP, "203.0.113.7:4711"},
		{"IP", fiber.Config{}, func(*fiber.App) ratekitfiber3.Key { return ip }, "203.0.113.7:4711"},
		{"IP via proxy", fiber.Config{}, func(*fiber.App) ratekitfiber3.Key { return ip }, "10.0.0.2:4711"},
		{"ClientIP, default config", fiber.Config{}, clientIPOf, "203.0.113.7:4711"},
		{"ClientIP, IPv6 peer", fiber.Config{}, clientIPOf, "[2001:db8:1:2::7]:4711"},
		{"ClientIP, TrustProxy without ProxyHeader", fiber.Config{TrustProxy: true,
			TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"0.0.0.0/0"}}}, clientIPOf, "203.0.113.7:4711"},
		{"ClientIP behind proxy, direct", behindProxy, clientIPOf, "203.0.113.7:4711"},
		{"ClientIP behind proxy, via proxy", behindProxy, clientIPOf, "10.0.0.2:4711"},
		{"ClientIP behind private proxies, direct", behindPrivate, clientIPOf, "203.0.113.7:4711"},
		{"ClientIP behind private proxies, via proxy", behindPrivate, clientIPOf, "10.0.0.2:4711"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			app := fiber.New(tt.cfg)
			assert.Equal(t, held, statuses(t, app, tt.key(app), tt.peer, 6, 3))
		})
	}

	// The configurations ClientIP refuses, and what a key of c.IP() itself
	// does under each. Fiber v3 reads ProxyHeader only from the peers of
	// TrustProxyConfig, but from X-Forwarded-For it takes the leftmost
	// entry, the client's own, even there: 6 of 6 pass. Without TrustProxy
	// it ignores ProxyHeader altogether: c.IP() is the peer (3 of 6 pass
	// here, one bucket for every client behind a proxy), a configuration
	// ClientIP refuses as contradictory rather than as forgeable.
	rawIP := func(c fiber.Ctx) (string, error) { return strings.Clone(c.IP()), nil }
	for _, tt := range []struct {
		name   string
		cfg    fiber.Config
		peer   string
		passed int
	}{
		{"X-Forwarded-For, via a trusted proxy", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, TrustProxy: true,
			TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.0/8"}}, EnableIPValidation: true}, "10.0.0.2:4711", 6},
		{"X-Real-IP, every peer trusted", fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
			TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"0.0.0.0/0"}}}, "203.0.113.7:4711", 6},
		{"X-Real-IP, every peer trusted, validated", fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
			TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"0.0.0.0/0"}}, EnableIPValidation: true}, "203.0.113.7:4711", 6},
		{"X-Forwarded-For without TrustProxy", fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor}, "203.0.113.7:4711", 3},
		{"X-Real-IP without TrustProxy", fiber.Config{ProxyHeader: "X-Real-IP"}, "203.0.113.7:4711", 3},
	} {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			key, err := ratekitfiber3.ClientIP(fiber.New(tt.cfg))
			assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
			assert.Nil(t, key)
			got := statuses(t, fiber.New(tt.cfg), rawIP, tt.peer, 6, 3)
			assert.Equal(t, tt.passed, got[http.StatusOK], "c.IP() as the key: %v", got)
		})
	}
}

func TestHeader(t *testing.T) {
	key := ratekitfiber3.Header("x-api-key")
	k, err := keyOf(t, fiber.New(), key, "203.0.113.7:1", [2]string{"X-Api-Key", "  secret "})
	require.NoError(t, err)
	assert.Equal(t, "secret", k)

	for _, h := range [][][2]string{nil, {{"X-Api-Key", "  "}}} {
		_, err = keyOf(t, fiber.New(), key, "203.0.113.7:1", h...)
		assert.ErrorIs(t, err, keyfuncs.ErrMissing)
		assert.EqualError(t, err, `keyfuncs: header "X-Api-Key": ratekit: request has no rate-limit key`, "as keyfuncs.Header")
	}

	_, err = keyOf(t, fiber.New(), ratekitfiber3.Header(""), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

type userID struct{ id string }

func (u *userID) String() string { return u.id }

type tenant string

func TestContextValue(t *testing.T) {
	type userKey struct{}
	var nilUser *userID
	tests := []struct {
		name    string
		value   any
		want    string
		missing bool
	}{
		{"string", "alice", "alice", false},
		{"int", 42, "42", false},
		{"uint64", uint64(7), "7", false},
		{"stringer", &userID{"u-1"}, "u-1", false},
		{"string-type", tenant("acme"), "acme", false},
		{"absent", nil, "", true},
		{"blank", " ", "", true},
		{"nil-stringer", nilUser, "", true},
		{"nil-map", map[string]string(nil), "", true},
		{"unsupported", 1.5, "", false},
		{"unsupported-pointer", new(float64), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			app := fiber.New()
			app.Use(func(c fiber.Ctx) error {
				if tc.value != nil {
					c.Locals(userKey{}, tc.value)
				}
				return c.Next()
			})
			k, err := keyOf(t, app, ratekitfiber3.ContextValue(userKey{}), "203.0.113.7:1")
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
		})
	}
}

func TestContextValueNilKey(t *testing.T) {
	_, err := keyOf(t, fiber.New(), ratekitfiber3.ContextValue(nil), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.False(t, errors.Is(err, keyfuncs.ErrMissing), "a programming error is a 500")
}

// TestPeerIPNotIP: a peer without an IP address (a Unix socket) has no
// key: 400, never one bucket shared by every such request.
func TestPeerIPNotIP(t *testing.T) {
	var k string
	var kerr error
	app := fiber.New()
	app.Get("/", func(c fiber.Ctx) error {
		k, kerr = ratekitfiber3.PeerIP(c)
		return nil
	})
	var req fasthttp.Request
	req.SetRequestURI("/")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, nil)
	app.Handler()(&ctx)
	assert.Empty(t, k)
	assert.ErrorIs(t, kerr, keyfuncs.ErrMissing)
}

// TestPeerIPAsKeyfuncs: PeerIP gives the key that keyfuncs.PeerIP gives
// for the same peer under net/http.
func TestPeerIPAsKeyfuncs(t *testing.T) {
	for _, remote := range []string{
		"203.0.113.7:4711", "0.0.0.0:1", "255.255.255.255:65535", "[::ffff:198.51.100.4]:80",
		"[2001:db8:1:2:3:4:5:6]:4711", "[::1]:80", "[fe80::1%eth0]:80", "[2001:db8::]:1",
		"[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:1",
	} {
		r, err := http.NewRequest(http.MethodGet, "/", nil)
		require.NoError(t, err)
		r.RemoteAddr = remote
		want, err := keyfuncs.PeerIP(r)
		require.NoError(t, err, remote)
		got, err := keyOf(t, fiber.New(), ratekitfiber3.PeerIP, remote)
		require.NoError(t, err, remote)
		assert.Equal(t, want, got, remote)
	}
}
