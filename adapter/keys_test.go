package adapter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/keyfuncs"
)

// The resolver behind ClientIP, ProbeClientIP and CheckRemoteAddr is
// tested in internal/clientip; these tests hold the kit's names to
// keyfuncs' keys and errors.

// TestClientIP: a ClientIP keys as keyfuncs.IP under the same options, by
// each of its methods, and fails as it does.
func TestClientIP(t *testing.T) {
	opts := []keyfuncs.IPOption{keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.IPv6Prefix(48)}
	c, err := adapter.NewClientIP(opts...)
	require.NoError(t, err)
	ip, err := keyfuncs.IP(opts...)
	require.NoError(t, err)

	for _, tt := range []struct {
		peer, xff, want string
	}{
		{"10.0.0.1:80", "6.6.6.6, 198.51.100.7, 10.0.0.2", "198.51.100.7"},
		{"203.0.113.9:80", "198.51.100.7", "203.0.113.9"},
		{"[2001:db8:1:2::1]:80", "", "2001:db8:1::/48"},
		{"10.0.0.1:80", "[2001:db8:5:6::1%eth0]:4711", "2001:db8:5::/48"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.peer
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		want, err := ip(r)
		require.NoError(t, err)
		require.Equal(t, tt.want, want, tt.peer)

		k, err := c.Key(r)
		require.NoError(t, err)
		assert.Equal(t, want, k, "Key(%s)", tt.peer)
		k, err = c.KeyFrom(tt.peer, r.Header)
		require.NoError(t, err)
		assert.Equal(t, want, k, "KeyFrom(%s)", tt.peer)
		a, err := c.Resolve(tt.peer, r.Header)
		require.NoError(t, err)
		assert.False(t, a.Is4In6() || a.Zone() != "", "%v: unmapped, without zone", a)
		k, err = c.KeyAddr(a)
		require.NoError(t, err)
		assert.Equal(t, want, k, "KeyAddr(%v)", a)
	}

	// A peer without a port: Key refuses it as keyfuncs.IP does, KeyFrom
	// takes it (an address the framework resolved).
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.7"
	_, want := ip(r)
	_, err = c.Key(r)
	require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.EqualError(t, err, want.Error())
	assert.EqualError(t, adapter.CheckRemoteAddr(r.RemoteAddr), want.Error())
	assert.NoError(t, adapter.CheckRemoteAddr("198.51.100.7:1"))
	k, err := c.KeyFrom("198.51.100.7", nil)
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.7", k)

	// No address: ErrMissing (400), by every method.
	_, err = c.KeyFrom("@", nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	_, err = c.Resolve("/run/app.sock", nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	_, err = c.KeyAddr(netip.Addr{})
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)

	// An invalid option is keyfuncs.IP's error.
	_, want = keyfuncs.IP(keyfuncs.IPv6Prefix(0))
	c, err = adapter.NewClientIP(keyfuncs.IPv6Prefix(0))
	assert.Nil(t, c)
	assert.EqualError(t, err, want.Error())
}

// TestClientIPAllocs: the key of an IPv4 peer, and of a hot IPv6 client
// given as a netip.Addr, costs no allocation.
func TestClientIPAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are noise under the race detector")
	}
	c, err := adapter.NewClientIP()
	require.NoError(t, err)
	h := http.Header{"X-Forwarded-For": {"198.51.100.7"}}
	v6 := netip.MustParseAddr("2001:db8::1")
	_, _ = c.KeyAddr(v6)
	_, _ = c.KeyAddr(v6) // kept from the second miss on
	for name, f := range map[string]func() (string, error){
		"KeyFrom": func() (string, error) { return c.KeyFrom("192.0.2.1:4711", h) },
		"KeyAddr": func() (string, error) { return c.KeyAddr(v6) },
	} {
		assert.Zero(t, testing.AllocsPerRun(100, func() {
			if _, err := f(); err != nil {
				t.Fatal(err)
			}
		}), name)
	}
}

// TestProbeClientIP: a resolution that returns the peer passes; one that
// believes a forged header is refused, with the header named.
func TestProbeClientIP(t *testing.T) {
	assert.NoError(t, adapter.ProbeClientIP(func(p netip.AddrPort, _ http.Header) string { return p.String() }))
	err := adapter.ProbeClientIP(func(_ netip.AddrPort, h http.Header) string { return h.Get("X-My-Client") }, "x-my-client")
	require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	assert.Contains(t, err.Error(), "X-My-Client")
}

type userID string

type stringer struct{ s string }

func (s *stringer) String() string { return s.s }

type account int16

// TestHeaderKey: the function adapters use on headers they read
// themselves gives keyfuncs.Header's keys and errors.
func TestHeaderKey(t *testing.T) {
	toKey := adapter.HeaderKey("x-api-key")
	k, err := toKey("  secret ")
	require.NoError(t, err)
	assert.Equal(t, "secret", k)

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	_, want := keyfuncs.Header("x-api-key")(r)
	for _, v := range []string{"", " \t "} {
		_, err = toKey(v)
		require.ErrorIs(t, err, keyfuncs.ErrMissing)
		assert.EqualError(t, err, want.Error())
		assert.EqualError(t, err, `keyfuncs: header "X-Api-Key": ratekit: request has no rate-limit key`)
	}

	_, err = adapter.HeaderKey("")("secret")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	_, want = keyfuncs.Header("")(r)
	assert.EqualError(t, err, want.Error())
}

// TestValueKey: the conversion of keyfuncs.ContextValue, for values an
// adapter reads from its framework's context.
func TestValueKey(t *testing.T) {
	toKey := adapter.ValueKey(`ratekitx: c.Get("user")`)
	var nilStringer *stringer
	for v, want := range map[any]string{
		"alice": "alice", userID("bob"): "bob", &stringer{"carol"}: "carol",
		42: "42", int8(-8): "-8", int16(-16): "-16", int32(-32): "-32", int64(-64): "-64",
		uint(1): "1", uint8(8): "8", uint16(16): "16", uint32(32): "32", uint64(64): "64", uintptr(7): "7",
		account(-3): "-3",
	} {
		got, err := toKey(v)
		require.NoError(t, err, "%T", v)
		assert.Equal(t, want, got, "%T", v)
	}
	for _, v := range []any{nil, "", " ", nilStringer, &stringer{""}, map[string]int(nil), []byte(nil), (func())(nil)} {
		got, err := toKey(v)
		require.ErrorIs(t, err, keyfuncs.ErrMissing, "%T", v)
		assert.EqualError(t, err, `ratekitx: c.Get("user"): ratekit: request has no rate-limit key`)
		assert.Empty(t, got)
	}
	for _, v := range []any{1.5, new(int), struct{}{}, []string{"a"}} {
		got, err := toKey(v)
		require.Error(t, err, "%T", v)
		assert.NotErrorIs(t, err, keyfuncs.ErrMissing)
		assert.Equal(t, fmt.Sprintf(`ratekitx: c.Get("user") has unsupported type %T`, v), err.Error())
		assert.Empty(t, got)
	}
}
