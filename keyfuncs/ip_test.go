package keyfuncs_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/keyfuncs"
)

// The resolver behind IP and PeerIP is tested in internal/clientip; these
// tests hold the functions of this package to it.

// request returns a request from peer with the given header lines, each
// "Name: value".
func request(peer string, lines ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ":")
		r.Header.Add(name, strings.TrimPrefix(value, " "))
	}
	return r
}

// TestIP: IP's options take effect, in order: the proxy header is read
// from trusted peers only, walked from the right, and IPv6 clients are
// keyed by the configured prefix.
func TestIP(t *testing.T) {
	ip, err := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ProxyHeader("X-Real-IP"),
		keyfuncs.ProxyHeader("x-forwarded-for"), keyfuncs.IPv6Prefix(48))
	require.NoError(t, err)
	for _, tt := range []struct {
		r    *http.Request
		want string
	}{
		{request("10.0.0.1:80", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2", "X-Real-IP: 1.1.1.1"), "198.51.100.7"},
		{request("203.0.113.9:80", "X-Forwarded-For: 198.51.100.7"), "203.0.113.9"},
		{request("[2001:db8:1:2::1]:80"), "2001:db8:1::/48"},
		{request("10.0.0.1:80", "X-Forwarded-For: 2001:db8:5:6::1"), "2001:db8:5::/48"},
	} {
		k, err := ip(tt.r)
		require.NoError(t, err)
		assert.Equal(t, tt.want, k, tt.r.RemoteAddr)
	}

	// Without options, IP is PeerIP: no header is read.
	plain, err := keyfuncs.IP()
	require.NoError(t, err)
	r := request("10.0.0.1:80", "X-Forwarded-For: 198.51.100.7")
	for _, f := range []keyfuncs.Func{plain, keyfuncs.PeerIP} {
		k, err := f(r)
		require.NoError(t, err)
		assert.Equal(t, "10.0.0.1", k)
	}
}

// TestIPErrors: an invalid option is an error of IP, naming the value,
// never a Func that fails at request time.
func TestIPErrors(t *testing.T) {
	for _, tt := range []struct {
		opt keyfuncs.IPOption
		msg string
	}{
		{keyfuncs.TrustedProxies("10.0.0.0/8", "10.0.0.0/33"), `"10.0.0.0/33"`},
		{keyfuncs.TrustedProxies("proxy.internal"), `"proxy.internal"`},
		{keyfuncs.IPv6Prefix(129), "IPv6Prefix(129)"},
		{keyfuncs.ProxyHeader("X Real IP"), `ProxyHeader("X Real IP")`},
	} {
		f, err := keyfuncs.IP(keyfuncs.TrustedProxies("192.0.2.1"), tt.opt)
		require.Error(t, err, tt.msg)
		assert.Nil(t, f)
		assert.Contains(t, err.Error(), tt.msg)
		assert.NotErrorIs(t, err, keyfuncs.ErrMissing)
	}
}

// TestIPZeroAllocIPv4: the key of an IPv4 peer, by PeerIP or IP, and of
// a canonical IPv4 client behind a trusted proxy, costs no allocation.
func TestIPZeroAllocIPv4(t *testing.T) {
	proxied, err := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	r := request("192.0.2.1:1234", "X-Forwarded-For: 1.1.1.1")
	for name, f := range map[string]keyfuncs.Func{"PeerIP": keyfuncs.PeerIP, "IP": proxied} {
		assert.Zero(t, testing.AllocsPerRun(200, func() {
			if k, err := f(r); err != nil || k != "192.0.2.1" {
				t.Fatalf("%s: %q, %v", name, k, err)
			}
		}), name)
	}
	r = request("10.0.0.1:1234", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2")
	assert.Zero(t, testing.AllocsPerRun(200, func() { _, _ = proxied(r) }), "through a trusted proxy")
}

// bareAddrs are peer addresses without a port: what Chi's
// middleware.RealIP and gorilla's handlers.ProxyHeaders leave in
// r.RemoteAddr, never what net/http's server sets.
var bareAddrs = []struct{ addr string }{
	{"192.0.2.1"}, {"2001:db8:1:2::5"}, {"[2001:db8:1:2::5]"}, {"fe80::1%eth0"}, {"::ffff:192.0.2.1"},
}

// TestKeyRefusesRewrittenRemoteAddr: an r.RemoteAddr without a port was
// written by a middleware from a header any client sends. IP's Func, with
// and without options, and PeerIP fail it with a configuration error (500)
// that names the cause and the remedy, instead of keying by the forged
// address.
func TestKeyRefusesRewrittenRemoteAddr(t *testing.T) {
	ip, err := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	plain, err := keyfuncs.IP()
	require.NoError(t, err)
	funcs := map[string]keyfuncs.Func{
		"IP()":   plain,
		"IP":     ip,
		"PeerIP": keyfuncs.PeerIP,
		"First":  keyfuncs.First(keyfuncs.Header("X-Missing"), keyfuncs.PeerIP),
	}
	for name, f := range funcs {
		for _, tt := range bareAddrs {
			k, err := f(request(tt.addr, "X-Forwarded-For: 198.51.100.7"))
			require.ErrorIs(t, err, keyfuncs.ErrMisconfigured, "%s(%q)", name, tt.addr)
			assert.NotErrorIs(t, err, keyfuncs.ErrMissing, "a 500, not a 400")
			assert.Empty(t, k)
			for _, want := range []string{tt.addr, "without a port", "middleware.RealIP", "TrustedProxies", "ClientIPFromXFF"} {
				assert.Contains(t, err.Error(), want)
			}
		}
		// Addresses with a port, and what is no address at all, are
		// unchanged.
		k, err := f(request("192.0.2.1:1"))
		require.NoError(t, err, name)
		assert.Contains(t, k, "192.0.2.1")
		_, err = f(request("@"))
		assert.ErrorIs(t, err, keyfuncs.ErrMissing, name)
	}
}

// TestKeyAfterChiStyleRealIP runs the middleware ordering that the check
// exists for: a RealIP-like middleware (as Chi's, which sets r.RemoteAddr
// to True-Client-IP, X-Real-IP or the leftmost X-Forwarded-For entry)
// before a handler keyed by PeerIP. With the header, every request fails;
// without it, the peer is the key.
func TestKeyAfterChiStyleRealIP(t *testing.T) {
	realIP := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v, _, _ := strings.Cut(r.Header.Get("X-Forwarded-For"), ","); v != "" {
				if _, err := netip.ParseAddr(v); err == nil {
					r.RemoteAddr = v
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	var keys []string
	var errs int
	h := realIP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		k, err := keyfuncs.PeerIP(r)
		if err != nil {
			require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
			errs++
			return
		}
		keys = append(keys, k)
	}))
	for i := range 6 {
		h.ServeHTTP(httptest.NewRecorder(), request("203.0.113.9:5555", "X-Forwarded-For: 198.51.100."+strconv.Itoa(i)))
	}
	h.ServeHTTP(httptest.NewRecorder(), request("203.0.113.9:5555"))
	assert.Equal(t, 6, errs, "no forged address becomes a key")
	assert.Equal(t, []string{"203.0.113.9"}, keys)
}
