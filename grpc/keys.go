package ratekitgrpc

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/keyfuncs"
)

// A Key returns the rate-limit key of a call, from its context (its peer,
// its incoming metadata, what the application stored) and its full method
// ("/pkg.Service/Method"): the two things a unary and a stream interceptor
// both know of a call, so that one Key serves both, and each message of a
// stream. It returns a non-empty key, or an error: one wrapping
// keyfuncs.ErrMissing is answered codes.InvalidArgument, any other
// codes.Internal.
type Key func(ctx context.Context, fullMethod string) (string, error)

// of is k's key of call c: the kit's key function.
func (k Key) of(c *call) (string, error) { return k(c.ctx, c.method) }

var peerKeys, _ = adapter.NewClientIP()

// PeerIP is the key of the call's TCP peer (peer.FromContext), as
// keyfuncs.PeerIP: IPv4 clients by address, IPv6 clients by their /64. It
// never reads metadata, so no client can choose its bucket: the safe
// default. Behind a proxy, use IP with keyfuncs.TrustedProxies. A call
// without an IP peer (a Unix socket) is an error wrapping
// keyfuncs.ErrMissing.
func PeerIP(ctx context.Context, _ string) (string, error) {
	switch a := peerAddr(ctx).(type) {
	case *net.TCPAddr:
		return peerKeys.KeyAddr(a.AddrPort().Addr())
	case nil:
		return "", errNoPeer
	default:
		return peerKeys.KeyFrom(a.String(), nil)
	}
}

var errNoPeer = fmt.Errorf("ratekitgrpc: the call has no peer: %w", keyfuncs.ErrMissing)

// IP returns the key of the client behind trusted proxies, as keyfuncs.IP
// resolves it, configured by its options: the TCP peer, unless the peer is
// one of the keyfuncs.TrustedProxies, whose proxy header
// (keyfuncs.ProxyHeader, x-forwarded-for by default) is then read from the
// call's incoming metadata and walked from the right. Metadata of any
// other peer is never read. It returns keyfuncs.IP's error for an invalid
// option.
//
//	ip, err := ratekitgrpc.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	c, err := adapter.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, _ string) (string, error) {
		a := peerAddr(ctx)
		if a == nil {
			return "", errNoPeer
		}
		return c.KeyFrom(a.String(), incoming(ctx))
	}, nil
}

// Metadata returns the key of the named incoming metadata, such as an API
// key, by the rules of keyfuncs.Header: its first value, with surrounding
// white space removed; an absent or blank value is an error wrapping
// keyfuncs.ErrMissing. The name is matched case-insensitively (grpc-go
// receives metadata keys in lower case). A name that is empty, that is not
// a metadata key (letters, digits, '-', '_', '.'), or that is binary
// metadata (ending in "-bin", whose values are bytes, not text: decode
// them in an interceptor of your own and use ContextValue) gives a Key
// that fails every call with keyfuncs.ErrMisconfigured.
func Metadata(name string) Key {
	if err := metadataName(name); err != nil {
		return func(context.Context, string) (string, error) { return "", err }
	}
	name = strings.ToLower(name)
	toKey := adapter.HeaderKey(name)
	return func(ctx context.Context, _ string) (string, error) {
		var v string
		if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 {
			v = vs[0]
		}
		return toKey(v)
	}
}

// metadataName returns the error of Metadata's name, nil if it is a key of
// text metadata in any case.
func metadataName(name string) error {
	if name == "" {
		return nil // adapter.HeaderKey's error
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_', b == '.':
		default:
			return fmt.Errorf("%w: Metadata: %q is not a metadata key", keyfuncs.ErrMisconfigured, name)
		}
	}
	if strings.HasSuffix(strings.ToLower(name), "-bin") {
		return fmt.Errorf("%w: Metadata: %q is binary metadata", keyfuncs.ErrMisconfigured, name)
	}
	return nil
}

// ClientCert is the key of the client's verified TLS certificate
// (credentials.TLSInfo of the call's peer): its SPIFFE ID
// ("spiffe://example.org/billing") when it has one, else its subject
// ("CN=billing,O=Example"). A call over a connection without TLS, or whose
// client sent no certificate that the server verified
// (tls.Config.ClientAuth of VerifyClientCertIfGiven or
// RequireAndVerifyClientCert), is an error wrapping keyfuncs.ErrMissing.
func ClientCert(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", errNoCert
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", errNoCert
	}
	leaf := info.State.VerifiedChains[0][0]
	if id := spiffeID(leaf); id != "" {
		return id, nil
	}
	if s := leaf.Subject.String(); s != "" {
		return s, nil
	}
	return "", errNoCert
}

var errNoCert = fmt.Errorf("ratekitgrpc: the call has no verified client certificate: %w", keyfuncs.ErrMissing)

// spiffeID returns the SPIFFE ID of cert, its one URI SAN of scheme
// spiffe, or "" if it has none or several.
func spiffeID(cert *x509.Certificate) string {
	id := ""
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		if id != "" {
			return ""
		}
		id = u.String()
	}
	return id
}

// ContextValue returns the key of the value stored in the call's context
// under ctxKey, typically by an authentication interceptor that runs
// before the limiter, converted as keyfuncs.ContextValue converts its
// value: an absent, nil or blank value is an error wrapping
// keyfuncs.ErrMissing. A nil ctxKey, or one of a type that is not
// comparable (which context.WithValue refuses), gives a Key that fails
// every call with keyfuncs.ErrMisconfigured.
func ContextValue(ctxKey any) Key {
	key := adapter.ContextValueKey("ratekitgrpc", ctxKey)
	return func(ctx context.Context, _ string) (string, error) { return key(ctx) }
}

// User returns the key of the user ID that the application's
// authentication interceptor stored in the call's context under ctxKey:
// it is ContextValue under a name that documents intent. Combine it with
// First to fall back to PeerIP for anonymous calls.
func User(ctxKey any) Key { return ContextValue(ctxKey) }

// FullMethod is the key of the call's full method, "/pkg.Service/Method":
// a limit per method shared by every client. Join it with a client's key
// for a limit per method and client.
func FullMethod(_ context.Context, fullMethod string) (string, error) {
	if fullMethod == "" {
		return "", errNoMethod
	}
	return fullMethod, nil
}

var errNoMethod = fmt.Errorf("ratekitgrpc: the call has no method: %w", keyfuncs.ErrMissing)

// Join returns the Key that combines the keys of all keys, by the rules of
// keyfuncs.Join (each part preceded by its length, so that no two lists of
// parts give the same key; any error is returned as is):
//
//	ratekitgrpc.Join(ratekitgrpc.FullMethod, ratekitgrpc.PeerIP)
//
// A nil key gives a Key that fails every call with
// keyfuncs.ErrMisconfigured.
func Join(keys ...Key) Key { return adapter.JoinKeys(keys...) }

// First returns the Key whose key comes from the first of keys that finds
// one, by the rules of keyfuncs.First: a key error wrapping
// keyfuncs.ErrMissing passes on to the next, and the key is prefixed with
// the index of the one that found it ("0:alice", "1:192.0.2.1"):
//
//	ratekitgrpc.First(ratekitgrpc.User(userKey), ratekitgrpc.PeerIP)
//
// A nil key gives a Key that fails every call with
// keyfuncs.ErrMisconfigured.
func First(keys ...Key) Key { return adapter.FirstKeys(keys...) }

// peerAddr returns the address of the call's peer, or nil.
func peerAddr(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
}

// incoming returns the call's incoming metadata as the header view of
// package adapter.
func incoming(ctx context.Context) headerView { return headerView{ctx} }

// headerView is the incoming metadata of a call's context, read by header
// name: adapter.HeaderValues.
type headerView struct{ ctx context.Context }

// Values returns the values of the metadata of the header name, in any
// case; nil if there are none.
func (h headerView) Values(name string) []string {
	return metadata.ValueFromIncomingContext(h.ctx, metadataKey(name))
}

// metadataKey returns the metadata key of header name: in lower case, from
// a table for the proxy headers of keyfuncs.ProxyHeader's doc.
func metadataKey(name string) string {
	switch name {
	case "X-Forwarded-For":
		return "x-forwarded-for"
	case "Forwarded":
		return "forwarded"
	case "X-Real-Ip":
		return "x-real-ip"
	case "Cf-Connecting-Ip":
		return "cf-connecting-ip"
	case "True-Client-Ip":
		return "true-client-ip"
	}
	return strings.ToLower(name)
}
