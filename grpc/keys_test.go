package ratekitgrpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	ratekitgrpc "github.com/ratekit/ratekit/grpc"
	"github.com/ratekit/ratekit/keyfuncs"
)

type userKey struct{}

// The keys over a call's context, without a server: a peer and incoming
// metadata are what grpc-go puts in a handler's context.
func TestKeys(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::7"), Port: 4711}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-api-key", "  k1  "))
	const m = "/test.Svc/Echo"

	for _, c := range []struct {
		name string
		key  ratekitgrpc.Key
		ctx  context.Context
		want string
		err  error
	}{
		{"PeerIP", ratekitgrpc.PeerIP, ctx, "2001:db8:1:2::/64", nil},
		{"PeerIP without peer", ratekitgrpc.PeerIP, context.Background(), "", keyfuncs.ErrMissing},
		{"Metadata", ratekitgrpc.Metadata("X-Api-Key"), ctx, "k1", nil},
		{"Metadata absent", ratekitgrpc.Metadata("x-other"), ctx, "", keyfuncs.ErrMissing},
		{"Metadata empty name", ratekitgrpc.Metadata(""), ctx, "", keyfuncs.ErrMisconfigured},
		{"User", ratekitgrpc.User(userKey{}), context.WithValue(ctx, userKey{}, "alice"), "alice", nil},
		{"User absent", ratekitgrpc.User(userKey{}), ctx, "", keyfuncs.ErrMissing},
		{"ContextValue nil key", ratekitgrpc.ContextValue(nil), ctx, "", keyfuncs.ErrMisconfigured},
		{"FullMethod", ratekitgrpc.FullMethod, ctx, m, nil},
		{"ClientCert without TLS", ratekitgrpc.ClientCert, ctx, "", keyfuncs.ErrMissing},
		{"Join", ratekitgrpc.Join(ratekitgrpc.FullMethod, ratekitgrpc.Metadata("x-api-key")), ctx, "14:/test.Svc/Echo|2:k1", nil},
		{"Join nil", ratekitgrpc.Join(ratekitgrpc.FullMethod, nil), ctx, "", keyfuncs.ErrMisconfigured},
		{"First", ratekitgrpc.First(ratekitgrpc.User(userKey{}), ratekitgrpc.PeerIP), ctx, "1:2001:db8:1:2::/64", nil},
	} {
		got, err := c.key(c.ctx, m)
		assert.Equal(t, c.want, got, c.name)
		if c.err == nil {
			assert.NoError(t, err, c.name)
		} else {
			assert.True(t, errors.Is(err, c.err), "%s: %v", c.name, err)
		}
	}
}

// Metadata refuses names that are no metadata key, or binary metadata,
// and reads any value, however large, without it reaching an error.
func TestMetadataNames(t *testing.T) {
	huge := strings.Repeat("k", 1<<20)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{
		"x-api-key":     {"k1", "k2"},
		"x-huge":        {huge},
		"x-api-key-bin": {"\x00\xff"},
	})
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"x-api-key", "k1", nil},
		{"X-API-Key", "k1", nil},
		{"x-huge", huge, nil},
		{"x-api-key-bin", "", keyfuncs.ErrMisconfigured},
		{"X-Api-Key-Bin", "", keyfuncs.ErrMisconfigured},
		{"x api key", "", keyfuncs.ErrMisconfigured},
		{" x-api-key", "", keyfuncs.ErrMisconfigured},
		{"x-api-key:", "", keyfuncs.ErrMisconfigured},
		{"", "", keyfuncs.ErrMisconfigured},
	} {
		got, err := ratekitgrpc.Metadata(c.name)(ctx, "/test.Svc/Echo")
		assert.Equal(t, c.want, got, "%q", c.name)
		if c.err == nil {
			assert.NoError(t, err, "%q", c.name)
		} else {
			assert.ErrorIs(t, err, c.err, "%q", c.name)
		}
	}
	_, err := ratekitgrpc.ContextValue([]string{"not comparable"})(ctx, "/test.Svc/Echo")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	_, err = ratekitgrpc.Join()(ctx, "/test.Svc/Echo")
	assert.Error(t, err)
	_, err = ratekitgrpc.First()(ctx, "/test.Svc/Echo")
	assert.Error(t, err)
}

// IP reads x-forwarded-for only from a trusted peer, walking every entry
// of every value from the right; a peer that is no IP address, or a nil
// one, is a missing key.
func TestIPForwarded(t *testing.T) {
	ip, err := ratekitgrpc.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	proxy := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 4711}})
	client := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.9"), Port: 4711}})
	for _, c := range []struct {
		name string
		ctx  context.Context
		md   metadata.MD
		want string
	}{
		{"two values", proxy, metadata.MD{"x-forwarded-for": {"203.0.113.9", "198.51.100.7"}}, "198.51.100.7"},
		{"forged left of the proxy's entry", proxy, metadata.MD{"x-forwarded-for": {"203.0.113.9, 198.51.100.7", "10.0.0.1"}}, "198.51.100.7"},
		{"IPv6 client", proxy, metadata.MD{"x-forwarded-for": {"2001:db8:1:2::9"}}, "2001:db8:1:2::/64"},
		{"unparseable entry", proxy, metadata.MD{"x-forwarded-for": {"198.51.100.7, unknown"}}, "10.1.2.3"},
		{"no header", proxy, nil, "10.1.2.3"},
		// grpc-go refuses upper-case keys on the wire; an interceptor that
		// makes incoming metadata of its own may use any case.
		{"upper case, made by an interceptor", proxy, metadata.MD{"X-Forwarded-For": {"198.51.100.7"}}, "198.51.100.7"},
		{"untrusted peer", client, metadata.MD{"x-forwarded-for": {"198.51.100.7"}}, "192.0.2.9"},
	} {
		ctx := c.ctx
		if c.md != nil {
			ctx = metadata.NewIncomingContext(ctx, c.md)
		}
		got, err := ip(ctx, "/test.Svc/Echo")
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	for _, p := range []*peer.Peer{{Addr: &net.UnixAddr{Name: "/tmp/s", Net: "unix"}}, {Addr: (*net.TCPAddr)(nil)}, {}} {
		ctx := peer.NewContext(context.Background(), p)
		_, err := ip(ctx, "/test.Svc/Echo")
		assert.ErrorIs(t, err, keyfuncs.ErrMissing, "%#v", p.Addr)
		_, err = ratekitgrpc.PeerIP(ctx, "/test.Svc/Echo")
		assert.ErrorIs(t, err, keyfuncs.ErrMissing, "%#v", p.Addr)
	}
}
