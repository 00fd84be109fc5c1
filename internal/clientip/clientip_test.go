package clientip_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/keyfuncs"
)

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

func mustClientIP(t testing.TB, opts ...keyfuncs.IPOption) *clientip.ClientIP {
	t.Helper()
	c, err := clientip.New(opts...)
	require.NoError(t, err)
	return c
}

func key(t testing.TB, c *clientip.ClientIP, r *http.Request) string {
	t.Helper()
	k, err := c.Key(r)
	require.NoError(t, err)
	require.NotEmpty(t, k)
	return k
}

var forged = []string{
	"X-Forwarded-For: 1.1.1.1",
	"X-Real-IP: 1.1.1.1",
	"Forwarded: for=1.1.1.1",
	"CF-Connecting-IP: 1.1.1.1",
	"True-Client-IP: 1.1.1.1",
}

func TestClientIPIgnoresHeadersFromUntrustedPeer(t *testing.T) {
	headers := []string{"", "X-Forwarded-For", "X-Real-IP", "Forwarded", "CF-Connecting-IP", "True-Client-IP"}
	trust := [][]string{nil, {"10.0.0.0/8"}, {"::1"}}
	for _, h := range headers {
		for _, tr := range trust {
			var opts []keyfuncs.IPOption
			if h != "" {
				opts = append(opts, keyfuncs.ProxyHeader(h))
			}
			if tr != nil {
				opts = append(opts, keyfuncs.TrustedProxies(tr...))
			}
			c := mustClientIP(t, opts...)
			t.Run(h+"/"+strings.Join(tr, ","), func(t *testing.T) {
				assert.Equal(t, "203.0.113.9", key(t, c, request("203.0.113.9:5555", forged...)))
				assert.Equal(t, "2001:db8:9::/64", key(t, c, request("[2001:db8:9::1]:5555", forged...)))
			})
		}
	}
}

func TestClientIPWithoutTrustedProxiesNeverReadsHeaders(t *testing.T) {
	c := mustClientIP(t)
	a, err := c.Resolve("192.0.2.1:80", panicHeaders{})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("192.0.2.1"), a)

	// Nor for an untrusted peer when proxies are configured.
	c = mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.0/8"))
	a, err = c.Resolve("192.0.2.1:80", panicHeaders{})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("192.0.2.1"), a)
}

type panicHeaders struct{}

func (panicHeaders) Values(string) []string { panic("headers read") }

func TestClientIPPeer(t *testing.T) {
	c := mustClientIP(t)
	tests := []struct {
		peer, want string
	}{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"[2001:db8:1:2::5]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"[::1]:80", "::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.peer, func(t *testing.T) {
			assert.Equal(t, tt.want, key(t, c, request(tt.peer)))
			k, err := c.KeyFrom(tt.peer, nil)
			require.NoError(t, err)
			assert.Equal(t, tt.want, k, "KeyFrom agrees")
		})
	}
}

// bareAddrs are peer addresses without a port: what Chi's
// middleware.RealIP and gorilla's handlers.ProxyHeaders leave in
// r.RemoteAddr, never what net/http's server sets, with their keys.
var bareAddrs = []struct{ addr, key string }{
	{"192.0.2.1", "192.0.2.1"},
	{"2001:db8:1:2::5", "2001:db8:1:2::/64"},
	{"[2001:db8:1:2::5]", "2001:db8:1:2::/64"},
	{"fe80::1%eth0", "fe80::/64"},
	{"::ffff:192.0.2.1", "192.0.2.1"},
}

// TestClientIPKeyFromBareAddress: KeyFrom, for adapters whose framework
// resolved the client itself, takes an address without a port.
func TestClientIPKeyFromBareAddress(t *testing.T) {
	c := mustClientIP(t)
	for _, tt := range bareAddrs {
		k, err := c.KeyFrom(tt.addr, nil)
		require.NoError(t, err, tt.addr)
		assert.Equal(t, tt.key, k, tt.addr)
	}
}

func TestCheckRemoteAddr(t *testing.T) {
	for _, tt := range bareAddrs {
		err := clientip.CheckRemoteAddr(tt.addr)
		require.ErrorIs(t, err, keyfuncs.ErrMisconfigured, tt.addr)
		assert.Contains(t, err.Error(), "middleware.RealIP")
	}
	for _, ok := range []string{"192.0.2.1:1", "[2001:db8::1]:80", "[fe80::1%eth0]:80", "", "@", "/run/app.sock", "unknown", "1.2.3.4:"} {
		assert.NoError(t, clientip.CheckRemoteAddr(ok), ok)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = clientip.CheckRemoteAddr("192.0.2.1:4711") }))
}

func TestClientIPBadPeer(t *testing.T) {
	c := mustClientIP(t, keyfuncs.TrustedProxies("0.0.0.0/0"))
	for _, peer := range []string{"", "@", "localhost:80", "192.0.2.1:", "192.0.2.1:http", "192.0.2.01:80", "[2001:db8::1", "[2001:db8::1]80", "1.2.3.4.5", "unknown"} {
		t.Run(peer, func(t *testing.T) {
			k, err := c.Key(request(peer, "X-Forwarded-For: 198.51.100.1"))
			require.ErrorIs(t, err, keyfuncs.ErrMissing)
			assert.Contains(t, err.Error(), "peer address")
			assert.Empty(t, k)
		})
	}
}

func TestClientIPForwardedFor(t *testing.T) {
	c := mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48"))
	tests := []struct {
		name  string
		peer  string
		lines []string
		want  string
	}{
		{"no header", "10.0.0.1:80", nil, "10.0.0.1"},
		{"single entry", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},
		{"forged leftmost ignored", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
		{"trusted hop skipped", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 10.0.0.2"}, "6.6.6.6"},
		{"forged entry before trusted hops", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.9.9.9, 10.0.0.2"}, "198.51.100.7"},
		{"two header lines", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7", "X-Forwarded-For: 10.0.0.3"}, "198.51.100.7"},
		{"client in second line", "10.0.0.1:80", []string{"X-Forwarded-For: 6.6.6.6", "X-Forwarded-For: 198.51.100.8, 10.0.0.3"}, "198.51.100.8"},
		{"client in first line", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.9", "X-Forwarded-For: 10.0.0.3"}, "198.51.100.9"},
		{"all trusted: leftmost", "10.0.0.1:80", []string{"X-Forwarded-For: 10.0.0.5, 10.0.0.4", "X-Forwarded-For: 10.0.0.3"}, "10.0.0.5"},
		{"unparseable stops walk at trusted hop", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7, garbage, 10.0.0.2"}, "10.0.0.2"},
		{"unparseable rightmost: peer", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7, unknown"}, "10.0.0.1"},
		{"unparseable in later line", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7", "X-Forwarded-For: 1.2.3"}, "10.0.0.1"},
		{"empty elements skipped", "10.0.0.1:80", []string{"X-Forwarded-For: ,198.51.100.7,, ,"}, "198.51.100.7"},
		{"empty header line", "10.0.0.1:80", []string{"X-Forwarded-For: "}, "10.0.0.1"},
		{"ipv4 with port", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7:5678"}, "198.51.100.7"},
		{"ipv6 with port", "10.0.0.1:80", []string{"X-Forwarded-For: [2001:db8:1:2::1]:80"}, "2001:db8:1:2::/64"},
		{"bare ipv6", "10.0.0.1:80", []string{"X-Forwarded-For: 2001:db8:1:2::1"}, "2001:db8:1:2::/64"},
		{"ipv6 with zone", "10.0.0.1:80", []string{"X-Forwarded-For: fe80::1%25eth0, fe80::2%eth0"}, "fe80::/64"},
		{"quoted", "10.0.0.1:80", []string{`X-Forwarded-For: "198.51.100.7"`}, "198.51.100.7"},
		{"tabs and spaces", "10.0.0.1:80", []string{"X-Forwarded-For: \t198.51.100.7 \t"}, "198.51.100.7"},
		{"mapped client", "10.0.0.1:80", []string{"X-Forwarded-For: ::ffff:198.51.100.7"}, "198.51.100.7"},
		{"mapped trusted hop skipped", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7, ::ffff:10.0.0.2"}, "198.51.100.7"},
		{"mapped trusted peer", "[::ffff:10.0.0.1]:80", []string{"X-Forwarded-For: 198.51.100.7"}, "198.51.100.7"},
		{"ipv6 trusted peer", "[2001:db8:ffff::1]:80", []string{"X-Forwarded-For: 198.51.100.7, 2001:db8:ffff::2"}, "198.51.100.7"},
		{"port out of range syntax", "10.0.0.1:80", []string{"X-Forwarded-For: 198.51.100.7:123456"}, "10.0.0.1"},
		{"leading zeros rejected", "10.0.0.1:80", []string{"X-Forwarded-For: 198.051.100.7"}, "10.0.0.1"},
		{"other headers ignored", "10.0.0.1:80", []string{"X-Real-IP: 6.6.6.6", "Forwarded: for=6.6.6.6"}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, key(t, c, request(tt.peer, tt.lines...)))
		})
	}
}

func TestClientIPForwarded(t *testing.T) {
	c := mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ProxyHeader("forwarded"))
	tests := []struct {
		name  string
		lines []string
		want  string
	}{
		{"simple", []string{"Forwarded: for=198.51.100.7"}, "198.51.100.7"},
		{"case-insensitive name", []string{"Forwarded: For=198.51.100.7"}, "198.51.100.7"},
		{"quoted", []string{`Forwarded: for="198.51.100.7"`}, "198.51.100.7"},
		{"quoted ipv6 with port", []string{`Forwarded: for="[2001:db8:1:2::17]:4711"`}, "2001:db8:1:2::/64"},
		{"quoted ipv4 with port", []string{`Forwarded: for="198.51.100.7:4711"`}, "198.51.100.7"},
		{"among other params", []string{`Forwarded: proto=https;for=198.51.100.7;by=10.0.0.1;host="example.com"`}, "198.51.100.7"},
		{"spaces around pairs", []string{`Forwarded: proto=http ; for=198.51.100.7 ; by=x`}, "198.51.100.7"},
		{"multiple elements: forged left", []string{`Forwarded: for=6.6.6.6, for=198.51.100.7;proto=https`}, "198.51.100.7"},
		{"trusted element skipped", []string{`Forwarded: for=6.6.6.6, for=10.0.0.2`}, "6.6.6.6"},
		{"multiple lines", []string{`Forwarded: for=6.6.6.6`, `Forwarded: for=198.51.100.7, for="10.0.0.3:80"`}, "198.51.100.7"},
		{"obfuscated hidden stops walk", []string{`Forwarded: for=6.6.6.6, for=_hidden, for=10.0.0.2`}, "10.0.0.2"},
		{"unknown stops walk", []string{`Forwarded: for=6.6.6.6, for=unknown`}, "10.0.0.1"},
		{"obfuscated port accepted", []string{`Forwarded: for="198.51.100.7:_p1"`}, "198.51.100.7"},
		{"comma inside quoted other param", []string{`Forwarded: for=198.51.100.7;ext="a,for=6.6.6.6"`}, "198.51.100.7"},
		{"escaped quote inside other param", []string{`Forwarded: for=198.51.100.7;ext="a\",for=6.6.6.6"`}, "198.51.100.7"},
		{"escaped backslashes in other param", []string{`Forwarded: for=6.6.6.6, for=198.51.100.7;ext="a\\,b\\"`}, "198.51.100.7"},
		{"no for param", []string{`Forwarded: for=6.6.6.6, proto=https`}, "10.0.0.1"},
		{"duplicate for param", []string{`Forwarded: for=198.51.100.7;for=6.6.6.6`}, "10.0.0.1"},
		{"escape in for value", []string{`Forwarded: for="198.51.100.\7"`}, "10.0.0.1"},
		{"unterminated quote", []string{`Forwarded: for="198.51.100.7`}, "10.0.0.1"},
		{"malformed pair", []string{`Forwarded: for=198.51.100.7 garbage=1`}, "10.0.0.1"},
		{"missing equals", []string{`Forwarded: for`}, "10.0.0.1"},
		{"empty for", []string{`Forwarded: for=`}, "10.0.0.1"},
		{"trailing semicolon", []string{`Forwarded: for=198.51.100.7;`}, "198.51.100.7"},
		{"xff ignored", []string{`X-Forwarded-For: 6.6.6.6`}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, key(t, c, request("10.0.0.1:443", tt.lines...)))
		})
	}
}

func TestClientIPSingleValueHeader(t *testing.T) {
	for _, name := range []string{"X-Real-IP", "cf-connecting-ip", "True-Client-IP"} {
		c := mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.1"), keyfuncs.ProxyHeader(name))
		tests := []struct {
			name   string
			values []string
			want   string
		}{
			{"value", []string{"198.51.100.7"}, "198.51.100.7"},
			{"value with port", []string{"198.51.100.7:80"}, "198.51.100.7"},
			{"ipv6", []string{" 2001:db8:1:2::1 "}, "2001:db8:1:2::/64"},
			{"mapped", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
			{"trusted value is still the client", []string{"10.0.0.1"}, "10.0.0.1"},
			{"absent", nil, "10.0.0.1"},
			{"unparseable", []string{"not-an-ip"}, "10.0.0.1"},
			{"list", []string{"6.6.6.6, 198.51.100.7"}, "10.0.0.1"},
			{"two lines", []string{"6.6.6.6", "198.51.100.7"}, "10.0.0.1"},
			{"empty", []string{""}, "10.0.0.1"},
		}
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				r := request("10.0.0.1:443", "X-Forwarded-For: 6.6.6.6")
				for _, v := range tt.values {
					r.Header.Add(name, v)
				}
				assert.Equal(t, tt.want, key(t, c, r))
			})
		}
	}
}

func TestClientIPIPv6Prefix(t *testing.T) {
	def := mustClientIP(t)
	k1 := key(t, def, request("[2001:db8:1:2::1]:80"))
	k2 := key(t, def, request("[2001:db8:1:2:ffff:ffff:ffff:ffff]:80"))
	k3 := key(t, def, request("[2001:db8:1:3::1]:80"))
	assert.Equal(t, "2001:db8:1:2::/64", k1)
	assert.Equal(t, k1, k2, "addresses in one /64 share a key")
	assert.NotEqual(t, k1, k3, "different /64s have different keys")

	c56 := mustClientIP(t, keyfuncs.IPv6Prefix(56))
	assert.Equal(t, "2001:db8:1:200::/56", key(t, c56, request("[2001:db8:1:2ff::1]:80")))
	assert.Equal(t, key(t, c56, request("[2001:db8:1:200::1]:80")), key(t, c56, request("[2001:db8:1:2ff::1]:80")))
	assert.NotEqual(t, key(t, c56, request("[2001:db8:1:200::1]:80")), key(t, c56, request("[2001:db8:1:300::1]:80")))

	c128 := mustClientIP(t, keyfuncs.IPv6Prefix(128))
	assert.Equal(t, "2001:db8::1/128", key(t, c128, request("[2001:db8::1]:80")))
	assert.NotEqual(t, key(t, c128, request("[2001:db8::1]:80")), key(t, c128, request("[2001:db8::2]:80")))

	// The prefix applies to addresses from headers too.
	cx := mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.1"), keyfuncs.IPv6Prefix(48))
	assert.Equal(t, "2001:db8:1::/48", key(t, cx, request("10.0.0.1:80", "X-Forwarded-For: 2001:db8:1:2::1")))
}

// Masking must apply to IPv6 only, after unmapping: otherwise every IPv4
// client given as a mapped address would fall into one /64 bucket
// (express-rate-limit CVE-2026-30827).
func TestClientIPMappedIPv4(t *testing.T) {
	for _, bits := range []int{1, 48, 64, 96, 128} {
		c := mustClientIP(t, keyfuncs.IPv6Prefix(bits), keyfuncs.TrustedProxies("10.0.0.1"))
		mapped := key(t, c, request("[::ffff:192.0.2.1]:80"))
		plain := key(t, c, request("192.0.2.1:80"))
		other := key(t, c, request("[::ffff:192.0.2.2]:80"))
		far := key(t, c, request("[::ffff:203.0.113.9]:80"))
		assert.Equal(t, "192.0.2.1", mapped)
		assert.Equal(t, plain, mapped)
		assert.Equal(t, "192.0.2.2", other)
		assert.NotEqual(t, mapped, other)
		assert.NotEqual(t, mapped, far)
		assert.Equal(t, "192.0.2.1", key(t, c, request("10.0.0.1:80", "X-Forwarded-For: ::ffff:192.0.2.1")))
		assert.Equal(t, "192.0.2.2", key(t, c, request("10.0.0.1:80", "X-Forwarded-For: [::ffff:192.0.2.2]:80")))
	}
}

func TestClientIPTrustedProxiesForms(t *testing.T) {
	tests := []struct {
		trusted string
		peer    string
		trust   bool
	}{
		{"10.0.0.0/8", "10.255.1.2:80", true},
		{"10.0.0.0/8", "11.0.0.1:80", false},
		{"10.1.2.3/8", "10.9.9.9:80", true}, // host bits ignored
		{"192.0.2.7", "192.0.2.7:80", true},
		{"192.0.2.7", "192.0.2.8:80", false},
		{" 192.0.2.7 ", "192.0.2.7:80", true},
		{"::1", "[::1]:80", true},
		{"::1", "127.0.0.1:80", false},
		{"2001:db8::/32", "[2001:db8:ffff::1]:80", true},
		{"fe80::1%eth0", "[fe80::1%eth1]:80", true},
		{"::ffff:10.0.0.0/104", "10.1.1.1:80", true},
		{"::ffff:10.0.0.0/104", "[::ffff:10.1.1.1]:80", true},
		{"::ffff:10.0.0.1", "10.0.0.1:80", true},
		{"10.0.0.0/8", "[::ffff:10.0.0.1]:80", true},
		{"::/0", "10.0.0.1:80", false}, // IPv6 prefixes do not match IPv4
		{"0.0.0.0/0", "[2001:db8::1]:80", false},
	}
	for _, tt := range tests {
		t.Run(tt.trusted+" "+tt.peer, func(t *testing.T) {
			c := mustClientIP(t, keyfuncs.TrustedProxies(tt.trusted))
			a, err := c.Resolve(tt.peer, http.Header{"X-Forwarded-For": {"198.51.100.7"}})
			require.NoError(t, err)
			assert.Equal(t, tt.trust, a == netip.MustParseAddr("198.51.100.7"))
		})
	}
}

func TestClientIPOptionsAccumulate(t *testing.T) {
	c := mustClientIP(t,
		keyfuncs.TrustedProxies("10.0.0.1"),
		keyfuncs.TrustedProxies("10.0.0.2"),
		keyfuncs.TrustedProxies(),
		nil,
		keyfuncs.ProxyHeader("X-Real-IP"),
		keyfuncs.ProxyHeader("X-Forwarded-For"), // last one wins
	)
	assert.Equal(t, "198.51.100.7", key(t, c, request("10.0.0.1:80", "X-Forwarded-For: 198.51.100.7, 10.0.0.2", "X-Real-IP: 6.6.6.6")))
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  keyfuncs.IPOption
		msg  string
	}{
		{"bad cidr", keyfuncs.TrustedProxies("10.0.0.0/8", "10.0.0.0/33"), `"10.0.0.0/33"`},
		{"bad address", keyfuncs.TrustedProxies("10.0.0.256"), `"10.0.0.256"`},
		{"hostname", keyfuncs.TrustedProxies("proxy.internal"), `"proxy.internal"`},
		{"empty proxy", keyfuncs.TrustedProxies(""), `""`},
		{"prefix with zone", keyfuncs.TrustedProxies("fe80::%eth0/64"), `"fe80::%eth0/64"`},
		{"prefix 0", keyfuncs.IPv6Prefix(0), "IPv6Prefix(0)"},
		{"prefix 129", keyfuncs.IPv6Prefix(129), "IPv6Prefix(129)"},
		{"prefix negative", keyfuncs.IPv6Prefix(-1), "IPv6Prefix(-1)"},
		{"empty header", keyfuncs.ProxyHeader(""), `ProxyHeader("")`},
		{"header with space", keyfuncs.ProxyHeader("X Real IP"), `ProxyHeader("X Real IP")`},
		{"header with colon", keyfuncs.ProxyHeader("X-Real-IP:"), `ProxyHeader("X-Real-IP:")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := clientip.New(keyfuncs.TrustedProxies("192.0.2.1"), tt.opt)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tt.msg)
			assert.NotErrorIs(t, err, keyfuncs.ErrMissing)
		})
	}
}

func TestClientIPKeyFromAndResolve(t *testing.T) {
	c := mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.0/8"))
	h := http.Header{"X-Forwarded-For": {"[2001:db8:1:2::99%eth0]:80, 10.0.0.9"}}

	a, err := c.Resolve("10.0.0.1:80", h)
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("2001:db8:1:2::99"), a, "unmasked, without zone")

	k, err := c.KeyFrom("10.0.0.1:80", h)
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", k)

	a, err = c.Resolve("10.0.0.1:80", nil)
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.0.0.1"), a)

	_, err = c.Resolve("not an address", h)
	require.ErrorIs(t, err, keyfuncs.ErrMissing)
}

func TestClientIPZeroAllocIPv4(t *testing.T) {
	r := request("192.0.2.1:1234", "X-Forwarded-For: 1.1.1.1")
	for _, c := range []*clientip.ClientIP{mustClientIP(t), mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.0/8"))} {
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := c.Key(r); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs)
	}
	// Through a trusted proxy, a canonical IPv4 entry is returned without
	// allocating too.
	c := mustClientIP(t, keyfuncs.TrustedProxies("10.0.0.0/8"))
	r = request("10.0.0.1:1234", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2")
	assert.Zero(t, testing.AllocsPerRun(200, func() { _, _ = c.Key(r) }))
}

func BenchmarkClientIP(b *testing.B) {
	plain := mustClientIP(b)
	proxied := mustClientIP(b, keyfuncs.TrustedProxies("10.0.0.0/8"))
	benchmarks := []struct {
		name string
		c    *clientip.ClientIP
		r    *http.Request
		want string
	}{
		{"IPv4/no-proxies", plain, request("192.0.2.1:1234", "X-Forwarded-For: 1.1.1.1"), "192.0.2.1"},
		{"IPv6/no-proxies", plain, request("[2001:db8:1:2::1]:1234"), "2001:db8:1:2::/64"},
		{"IPv4/trusted-proxy-xff-3", proxied, request("10.0.0.1:1234", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2"), "198.51.100.7"},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				k, err := bm.c.Key(bm.r)
				if err != nil || k != bm.want {
					b.Fatalf("Key = %q, %v; want %q", k, err, bm.want)
				}
			}
		})
	}
}

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "6.6.6.6, 198.51.100.7", `for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`)
	f.Add("[::ffff:10.0.0.1]:80", "::ffff:1.2.3.4, 10.0.0.2", "for=_hidden")
	f.Add("192.0.2.1", "", "")
	f.Add("[fe80::1%eth0]:1", "[2001:db8::1%x]:8, unknown", `for="a\",b"`)
	f.Add("@", "1.1.1.1", "for=1.1.1.1")
	trustAll := keyfuncs.TrustedProxies("10.0.0.0/8", "::ffff:0:0/96", "2001:db8::/32", "fe80::/10")
	configs := []*clientip.ClientIP{
		mustClientIP(f),
		mustClientIP(f, trustAll),
		mustClientIP(f, trustAll, keyfuncs.ProxyHeader("Forwarded"), keyfuncs.IPv6Prefix(48)),
		mustClientIP(f, trustAll, keyfuncs.ProxyHeader("X-Real-IP"), keyfuncs.IPv6Prefix(128)),
	}
	f.Fuzz(func(t *testing.T, peer, xff, fwd string) {
		h := http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}, "X-Real-Ip": {xff}}
		_, peerErr := configs[0].KeyFrom(peer, nil)
		for _, c := range configs {
			k, err := c.KeyFrom(peer, h)
			if err != nil {
				if k != "" {
					t.Fatalf("key %q with error %v", k, err)
				}
				if peerErr == nil {
					t.Fatalf("error %v for parseable peer %q", err, peer)
				}
				continue
			}
			if k == "" {
				t.Fatal("empty key without error")
			}
			if p, perr := netip.ParsePrefix(k); perr == nil {
				if !p.Addr().Is6() || p.Addr().Is4In6() || p != p.Masked() || p.String() != k {
					t.Fatalf("key %q is not a canonical IPv6 prefix", k)
				}
			} else if a, aerr := netip.ParseAddr(k); aerr == nil {
				if !a.Is4() || a.String() != k {
					t.Fatalf("key %q is not a canonical IPv4 address", k)
				}
			} else {
				t.Fatalf("key %q is neither an address nor a prefix", k)
			}
			a, err := c.Resolve(peer, h)
			if err != nil || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("Resolve = %v, %v", a, err)
			}
		}
		// Without trusted proxies, headers never matter.
		k0, err0 := configs[0].KeyFrom(peer, h)
		k1, err1 := configs[0].KeyFrom(peer, nil)
		if k0 != k1 || (err0 == nil) != (err1 == nil) {
			t.Fatalf("headers changed the key without trusted proxies: %q vs %q", k0, k1)
		}
	})
}

// FuzzKeyFromFastPath: KeyFrom's fast path for canonical "a.b.c.d:port"
// peers keys every peer address exactly as the full parse does, with and
// without trusted proxies (which turn the fast path off for IPv4).
func FuzzKeyFromFastPath(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:4711", "0.0.0.0:0", "255.255.255.255:65535", "256.0.0.1:1", "01.2.3.4:1",
		"1.2.3.4", "1.2.3.4:", "1.2.3.4:123456", "1.2.3:4", "1.2.3.4.5:6", "1..3.4:5", ".1.2.3:4",
		"1.2.3.4:_x", "[::ffff:1.2.3.4]:5", "[2001:db8::1]:80", "2001:db8::1", "1.2.3.4%eth0:5",
		"1.2.3.04:5", "0.0.0.00:1", "10.0.0.255:99999", "", "@", ":80", "a.b.c.d:1", "10.0.0.1:80",
	} {
		f.Add(s, "198.51.100.7")
	}
	configs := []*clientip.ClientIP{
		mustClientIP(f),
		mustClientIP(f, keyfuncs.TrustedProxies("10.0.0.0/8")),
		mustClientIP(f, keyfuncs.TrustedProxies("2001:db8::/32"), keyfuncs.IPv6Prefix(48)),
	}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		h := http.Header{"X-Forwarded-For": {xff}}
		for i, c := range configs {
			parsed := c.WithoutFastPath()
			for _, h := range []clientip.HeaderValues{nil, h} {
				got, err := c.KeyFrom(peer, h)
				want, wantErr := parsed.KeyFrom(peer, h)
				if got != want || (err == nil) != (wantErr == nil) {
					t.Fatalf("config %d: KeyFrom(%q) = %q, %v; full parse: %q, %v", i, peer, got, err, want, wantErr)
				}
			}
		}
	})
}

func TestClientIPKeyAddr(t *testing.T) {
	plain := mustClientIP(t, keyfuncs.TrustedProxies("0.0.0.0/0", "::/0"))
	wide := mustClientIP(t, keyfuncs.IPv6Prefix(48))
	for _, tt := range []struct {
		addr         string
		want, want48 string
	}{
		{"192.0.2.1", "192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64", "2001:db8:1::/48"},
		{"fe80::1%eth0", "fe80::/64", "fe80::/48"},
	} {
		a := netip.MustParseAddr(tt.addr)
		k, err := plain.KeyAddr(a)
		require.NoError(t, err, tt.addr)
		assert.Equal(t, tt.want, k, "%s: a is the client, trusted proxy or not", tt.addr)
		k, err = wide.KeyAddr(a)
		require.NoError(t, err, tt.addr)
		assert.Equal(t, tt.want48, k, "%s: the configured IPv6 prefix", tt.addr)

		// The key Key gives for the same peer.
		want, err := wide.KeyFrom(a.String(), nil)
		require.NoError(t, err)
		assert.Equal(t, want, k, tt.addr)
	}

	k, err := plain.KeyAddr(netip.Addr{})
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.Empty(t, k)
}

// TestProbeClientIP: a resolution that reads a header from a peer that is
// no proxy is refused, with the header named; one that reads headers only
// from real proxies passes.
func TestProbeClientIP(t *testing.T) {
	viaClientIP := func(opts ...keyfuncs.IPOption) func(netip.AddrPort, http.Header) string {
		c := mustClientIP(t, opts...)
		return func(peer netip.AddrPort, h http.Header) string {
			a, err := c.Resolve(peer.String(), h)
			require.NoError(t, err)
			return a.String()
		}
	}
	header := func(name string) func(netip.AddrPort, http.Header) string {
		return func(_ netip.AddrPort, h http.Header) string { return h.Get(name) }
	}
	tests := []struct {
		name    string
		resolve func(netip.AddrPort, http.Header) string
		extra   []string
		want    []string // in the error; nil: no error
	}{
		{"peer", func(p netip.AddrPort, _ http.Header) string { return p.Addr().String() }, nil, nil},
		{"peer with port", func(p netip.AddrPort, _ http.Header) string { return p.String() }, nil, nil},
		{"own proxies", viaClientIP(keyfuncs.TrustedProxies("10.0.0.0/8", "fd00::/8")), nil, nil},
		{"own proxies, X-Real-IP", viaClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ProxyHeader("X-Real-IP")), nil, nil},
		{"every IPv4 peer trusted", viaClientIP(keyfuncs.TrustedProxies("0.0.0.0/0")), nil, []string{"192.0.2.1", "X-Forwarded-For"}},
		{"every IPv6 peer trusted", viaClientIP(keyfuncs.TrustedProxies("::/0"), keyfuncs.ProxyHeader("Forwarded")), nil, []string{"2001:db8::1", "Forwarded"}},
		{"platform header", header("CF-Connecting-IP"), nil, []string{"Cf-Connecting-Ip", "which any client can send"}},
		{"configured header", header("x-my-client"), []string{" x-my-client "}, []string{"X-My-Client"}},
		{"unknown header", header("X-Other"), nil, []string{`client address ""`}},
		{"raw list", func(_ netip.AddrPort, h http.Header) string { return "6.6.6.6, " + h.Get("X-Forwarded-For") }, nil, []string{"X-Forwarded-For"}},
		{"nil", nil, nil, []string{"nil resolve"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := clientip.ProbeClientIP(tt.resolve, tt.extra...)
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	// Every request carries a distinct forged address in each header, and
	// the peers are not private addresses a deployment could trust.
	var peers []netip.AddrPort
	require.NoError(t, clientip.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
		peers = append(peers, p)
		seen := map[string]bool{}
		for name, vs := range h {
			require.Len(t, vs, 1, name)
			assert.False(t, seen[vs[0]], "%s: %s", name, vs[0])
			seen[vs[0]] = true
		}
		assert.Contains(t, h, "X-Extra")
		assert.Equal(t, "for=", h.Get("Forwarded")[:4])
		return p.Addr().String()
	}, "X-Extra", "x-forwarded-for", ""))
	require.Len(t, peers, 2)
	for _, p := range peers {
		assert.False(t, p.Addr().IsPrivate() || p.Addr().IsLoopback(), p)
	}
	assert.True(t, peers[0].Addr().Is4() && peers[1].Addr().Is6())
}
