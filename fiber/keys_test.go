package ratekitfiber_test

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	ratekitfiber "github.com/ratekit/ratekit/fiber"
	"github.com/ratekit/ratekit/keyfuncs"
)

// keyOf runs key in a request to app from the peer remote with the given
// header lines, and returns the key or the error.
func keyOf(t *testing.T, app *fiber.App, key ratekitfiber.Key, remote string, header ...[2]string) (string, error) {
	t.Helper()
	var k string
	var kerr error
	calls++
	path := "/key/" + strconv.Itoa(calls) // a route of its own: an app may serve several calls
	app.Get(path, func(c *fiber.Ctx) error {
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
	k, err := keyOf(t, fiber.New(), ratekitfiber.PeerIP, "203.0.113.7:4711", xff("1.1.1.1"), [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "forwarding headers of any peer are ignored")

	k, err = keyOf(t, fiber.New(), ratekitfiber.PeerIP, "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k, "IPv6 clients are grouped by /64")
}

func TestIP(t *testing.T) {
	ip, err := ratekitfiber.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
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

	real, err := ratekitfiber.IP(keyfuncs.TrustedProxies("10.0.0.2"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	k, err = keyOf(t, fiber.New(), real, "10.0.0.2:4711", [2]string{"x-real-ip", " 198.51.100.4 "})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)

	_, err = ratekitfiber.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
}

func TestFiberIP(t *testing.T) {
	// Default config: c.IP() is the peer, headers are ignored.
	k, err := keyOf(t, fiber.New(), ratekitfiber.FiberIP, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)

	k, err = keyOf(t, fiber.New(), ratekitfiber.FiberIP, "[2001:db8:1:2:3:4:5:6]:4711")
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)

	// The pitfall: ProxyHeader without the trusted-proxy check believes
	// any client.
	open := fiber.New(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor})
	k, err = keyOf(t, open, ratekitfiber.FiberIP, "203.0.113.7:4711", xff("1.1.1.1"))
	require.NoError(t, err)
	assert.Equal(t, "1.1.1.1", k, "spoofed")
	_, err = keyOf(t, open, ratekitfiber.FiberIP, "203.0.113.7:4711", xff("1.1.1.1, 10.0.0.9"))
	assert.ErrorIs(t, err, keyfuncs.ErrMissing, "Fiber's raw header text is not an address")

	// With the check on, only the configured proxy is believed.
	trusted := fiber.New(fiber.Config{ProxyHeader: "X-Real-IP", EnableTrustedProxyCheck: true,
		TrustedProxies: []string{"10.0.0.2"}, EnableIPValidation: true})
	k, err = keyOf(t, trusted, ratekitfiber.FiberIP, "203.0.113.7:4711", [2]string{"X-Real-IP", "1.1.1.1"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k)
	k, err = keyOf(t, trusted, ratekitfiber.FiberIP, "10.0.0.2:4711", [2]string{"X-Real-IP", "198.51.100.4"})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)
}

func TestHeader(t *testing.T) {
	key := ratekitfiber.Header("x-api-key")
	k, err := keyOf(t, fiber.New(), key, "203.0.113.7:1", [2]string{"X-Api-Key", "  secret "})
	require.NoError(t, err)
	assert.Equal(t, "secret", k)

	for _, h := range [][][2]string{nil, {{"X-Api-Key", "  "}}} {
		_, err = keyOf(t, fiber.New(), key, "203.0.113.7:1", h...)
		assert.ErrorIs(t, err, keyfuncs.ErrMissing)
		assert.EqualError(t, err, `keyfuncs: header "X-Api-Key": ratekit: request has no rate-limit key`, "as keyfuncs.Header")
	}

	_, err = keyOf(t, fiber.New(), ratekitfiber.Header(""), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

type userID struct{ id string }

func (u *userID) String() string { return u.id }

type tenant string

func TestLocals(t *testing.T) {
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
			app.Use(func(c *fiber.Ctx) error {
				if tc.value != nil {
					c.Locals(userKey{}, tc.value)
				}
				return c.Next()
			})
			k, err := keyOf(t, app, ratekitfiber.Locals(userKey{}), "203.0.113.7:1")
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

func TestLocalsNilKey(t *testing.T) {
	_, err := keyOf(t, fiber.New(), ratekitfiber.Locals(nil), "203.0.113.7:1")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.False(t, errors.Is(err, keyfuncs.ErrMissing), "a programming error is a 500")
}

// TestPeerIPNotIP: a peer without an IP address (a Unix socket) has no
// key: 400, never one bucket shared by every such request.
func TestPeerIPNotIP(t *testing.T) {
	var k string
	var kerr error
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error {
		k, kerr = ratekitfiber.PeerIP(c)
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
		got, err := keyOf(t, fiber.New(), ratekitfiber.PeerIP, remote)
		require.NoError(t, err, remote)
		assert.Equal(t, want, got, remote)
	}
}
