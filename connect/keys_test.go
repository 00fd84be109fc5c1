package ratekitconnect_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	ratekitconnect "github.com/ratekit/ratekit/connect"
	"github.com/ratekit/ratekit/keyfuncs"
)

type userKey struct{}

// The keys over a Call, without a server: what an interceptor is given.
func TestKeys(t *testing.T) {
	call := ratekitconnect.Call{
		Spec:   connect.Spec{Procedure: echoProc},
		Peer:   connect.Peer{Addr: "[2001:db8:1:2::7]:4711", Protocol: connect.ProtocolGRPC},
		Header: http.Header{"X-Api-Key": {"  k1  ", "k2"}},
	}
	ctx := context.Background()
	alice := context.WithValue(ctx, userKey{}, "alice")

	for _, c := range []struct {
		name string
		key  ratekitconnect.Key
		ctx  context.Context
		call ratekitconnect.Call
		want string
		err  error
	}{
		{"PeerIP", ratekitconnect.PeerIP, ctx, call, "2001:db8:1:2::/64", nil},
		{"PeerIP IPv4", ratekitconnect.PeerIP, ctx, ratekitconnect.Call{Peer: connect.Peer{Addr: "192.0.2.9:4711"}}, "192.0.2.9", nil},
		{"PeerIP without peer", ratekitconnect.PeerIP, ctx, ratekitconnect.Call{}, "", keyfuncs.ErrMissing},
		{"PeerIP of a Unix socket", ratekitconnect.PeerIP, ctx, ratekitconnect.Call{Peer: connect.Peer{Addr: "@"}}, "", keyfuncs.ErrMissing},
		{"Header", ratekitconnect.Header("x-api-key"), ctx, call, "k1", nil},
		{"Header absent", ratekitconnect.Header("X-Other"), ctx, call, "", keyfuncs.ErrMissing},
		{"Header blank", ratekitconnect.Header("X-Api-Key"), ctx, ratekitconnect.Call{Header: http.Header{"X-Api-Key": {"  "}}}, "", keyfuncs.ErrMissing},
		{"Header empty name", ratekitconnect.Header(""), ctx, call, "", keyfuncs.ErrMisconfigured},
		{"User", ratekitconnect.User(userKey{}), alice, call, "alice", nil},
		{"User absent", ratekitconnect.User(userKey{}), ctx, call, "", keyfuncs.ErrMissing},
		{"ContextValue nil key", ratekitconnect.ContextValue(nil), ctx, call, "", keyfuncs.ErrMisconfigured},
		{"ContextValue incomparable key", ratekitconnect.ContextValue([]string{"x"}), ctx, call, "", keyfuncs.ErrMisconfigured},
		{"Procedure", ratekitconnect.Procedure, ctx, call, echoProc, nil},
		{"Procedure absent", ratekitconnect.Procedure, ctx, ratekitconnect.Call{}, "", keyfuncs.ErrMissing},
		{"Join", ratekitconnect.Join(ratekitconnect.Procedure, ratekitconnect.Header("X-Api-Key")), ctx, call, "14:/test.Svc/Echo|2:k1", nil},
		{"Join missing", ratekitconnect.Join(ratekitconnect.Procedure, ratekitconnect.User(userKey{})), ctx, call, "", keyfuncs.ErrMissing},
		{"Join nil", ratekitconnect.Join(ratekitconnect.Procedure, nil), ctx, call, "", keyfuncs.ErrMisconfigured},
		{"Join of none", ratekitconnect.Join(), ctx, call, "", keyfuncs.ErrMissing},
		{"First", ratekitconnect.First(ratekitconnect.User(userKey{}), ratekitconnect.PeerIP), ctx, call, "1:2001:db8:1:2::/64", nil},
		{"First user", ratekitconnect.First(ratekitconnect.User(userKey{}), ratekitconnect.PeerIP), alice, call, "0:alice", nil},
		{"First nil", ratekitconnect.First(nil), ctx, call, "", keyfuncs.ErrMisconfigured},
		{"First of none", ratekitconnect.First(), ctx, call, "", keyfuncs.ErrMissing},
	} {
		got, err := c.key(c.ctx, c.call)
		assert.Equal(t, c.want, got, c.name)
		if c.err == nil {
			assert.NoError(t, err, c.name)
		} else {
			assert.True(t, errors.Is(err, c.err), "%s: %v", c.name, err)
		}
	}

	_, err := ratekitconnect.User(userKey{})(ctx, call)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "ratekitconnect: context value ratekitconnect_test.userKey{}"), err.Error())
	failing := func(context.Context, ratekitconnect.Call) (string, error) { return "", errors.New("lookup failed") }
	_, err = ratekitconnect.First(failing, ratekitconnect.PeerIP)(ctx, call)
	assert.EqualError(t, err, "lookup failed", "only a missing key passes on")
}

// IP reads the proxy header only from a trusted peer, walking every entry
// of every value from the right; a peer that is no IP address is a
// missing key.
func TestIPForwarded(t *testing.T) {
	ip, err := ratekitconnect.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	const proxy, client = "10.1.2.3:4711", "[::ffff:192.0.2.9]:4711"
	for _, c := range []struct {
		name   string
		peer   string
		header http.Header
		want   string
	}{
		{"two values", proxy, http.Header{"X-Forwarded-For": {"203.0.113.9", "198.51.100.7"}}, "198.51.100.7"},
		{"forged left of the proxy's entry", proxy, http.Header{"X-Forwarded-For": {"203.0.113.9, 198.51.100.7", "10.0.0.1"}}, "198.51.100.7"},
		{"IPv6 client", proxy, http.Header{"X-Forwarded-For": {"2001:db8:1:2::9"}}, "2001:db8:1:2::/64"},
		{"unparseable entry", proxy, http.Header{"X-Forwarded-For": {"198.51.100.7, unknown"}}, "10.1.2.3"},
		{"no header", proxy, nil, "10.1.2.3"},
		{"untrusted peer", client, http.Header{"X-Forwarded-For": {"198.51.100.7"}}, "192.0.2.9"},
	} {
		got, err := ip(context.Background(), ratekitconnect.Call{Peer: connect.Peer{Addr: c.peer}, Header: c.header})
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	for _, addr := range []string{"", "@", "/tmp/s"} {
		_, err := ip(context.Background(), ratekitconnect.Call{Peer: connect.Peer{Addr: addr}})
		assert.ErrorIs(t, err, keyfuncs.ErrMissing, "%q", addr)
	}

	realIP, err := ratekitconnect.IP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ProxyHeader("X-Real-IP"))
	require.NoError(t, err)
	got, err := realIP(context.Background(), ratekitconnect.Call{Peer: connect.Peer{Addr: proxy}, Header: http.Header{
		"X-Real-Ip": {"198.51.100.7"}, "X-Forwarded-For": {"203.0.113.9"},
	}})
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.7", got, "the configured header alone")

	_, err = ratekitconnect.IP(keyfuncs.TrustedProxies("not an address"))
	assert.Error(t, err)
}
