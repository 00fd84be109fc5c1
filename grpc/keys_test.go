package ratekitgrpc_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
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
