package ratekitconnect

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"

	"connectrpc.com/connect"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/keyfuncs"
)

// A Call is what an interceptor knows of a call, for its Key and its
// options: the same for a unary call, a stream and each message of a
// stream. Its fields are the handler's and must not be modified.
type Call struct {
	// Spec describes the call; its Procedure is "/pkg.Service/Method".
	Spec connect.Spec

	// Peer is the client: its Addr is the TCP peer's address, "IP:port",
	// and its Protocol connect.ProtocolConnect, ProtocolGRPC or
	// ProtocolGRPCWeb.
	Peer connect.Peer

	// Header is the request header: Connect's metadata, and the header
	// fields of the HTTP request.
	Header http.Header
}

// A Key returns the rate-limit key of a call, from its context (what the
// application stored) and the Call (its peer, its header, its procedure):
// what an interceptor knows of a unary call and of a stream alike, so
// that one Key serves both, and each message of a stream. It returns a
// non-empty key, or an error: one wrapping keyfuncs.ErrMissing is
// answered connect.CodeInvalidArgument, any other connect.CodeInternal.
type Key func(ctx context.Context, call Call) (string, error)

// of is k's key of call c: the kit's key function.
func (k Key) of(c *call) (string, error) { return k(c.ctx, c.info) }

var peerKeys, _ = adapter.NewClientIP()

// PeerIP is the key of the call's TCP peer (Call.Peer.Addr), as
// keyfuncs.PeerIP: IPv4 clients by address, IPv6 clients by their /64. It
// never reads a header, so no client can choose its bucket: the safe
// default. Behind a proxy, use IP with keyfuncs.TrustedProxies. A call
// without an IP peer (a Unix socket) is an error wrapping
// keyfuncs.ErrMissing.
func PeerIP(_ context.Context, call Call) (string, error) {
	if call.Peer.Addr == "" {
		return "", errNoPeer
	}
	return peerKeys.KeyFrom(call.Peer.Addr, nil)
}

var errNoPeer = fmt.Errorf("ratekitconnect: the call has no peer: %w", keyfuncs.ErrMissing)

// IP returns the key of the client behind trusted proxies, as keyfuncs.IP
// resolves it, configured by its options: the TCP peer, unless the peer is
// one of the keyfuncs.TrustedProxies, whose proxy header
// (keyfuncs.ProxyHeader, X-Forwarded-For by default) is then read from the
// request header and walked from the right. The headers of any other peer
// are never read. It returns keyfuncs.IP's error for an invalid option.
//
//	ip, err := ratekitconnect.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	c, err := adapter.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(_ context.Context, call Call) (string, error) {
		if call.Peer.Addr == "" {
			return "", errNoPeer
		}
		return c.KeyFrom(call.Peer.Addr, call.Header)
	}, nil
}

// Header returns the key of the named request header, such as an API
// key, by the rules of keyfuncs.Header: its first value, with surrounding
// white space removed; an absent or blank value is an error wrapping
// keyfuncs.ErrMissing. The name is matched case-insensitively. An empty
// name gives a Key that fails every call with keyfuncs.ErrMisconfigured.
// The value is read as sent: that of a binary header ("-Bin") is its
// base64 text.
func Header(name string) Key {
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	toKey := adapter.HeaderKey(name)
	return func(_ context.Context, call Call) (string, error) {
		var v string
		if vs := call.Header[canonical]; len(vs) > 0 {
			v = vs[0]
		}
		return toKey(v)
	}
}

// ContextValue returns the key of the value stored in the call's context
// under ctxKey, typically by an authentication interceptor that runs
// before the limiter, converted as keyfuncs.ContextValue converts its
// value: an absent, nil or blank value is an error wrapping
// keyfuncs.ErrMissing. A nil ctxKey, or one of a type that is not
// comparable (which context.WithValue refuses), gives a Key that fails
// every call with keyfuncs.ErrMisconfigured.
func ContextValue(ctxKey any) Key {
	key := adapter.ContextValueKey("ratekitconnect", ctxKey)
	return func(ctx context.Context, _ Call) (string, error) { return key(ctx) }
}

// User returns the key of the user ID that the application's
// authentication interceptor stored in the call's context under ctxKey:
// it is ContextValue under a name that documents intent. Combine it with
// First to fall back to PeerIP for anonymous calls.
func User(ctxKey any) Key { return ContextValue(ctxKey) }

// Procedure is the key of the call's procedure, "/pkg.Service/Method": a
// limit per procedure shared by every client. Join it with a client's key
// for a limit per procedure and client.
func Procedure(_ context.Context, call Call) (string, error) {
	if call.Spec.Procedure == "" {
		return "", errNoProcedure
	}
	return call.Spec.Procedure, nil
}

var errNoProcedure = fmt.Errorf("ratekitconnect: the call has no procedure: %w", keyfuncs.ErrMissing)

// Join returns the Key that combines the keys of all keys, by the rules of
// keyfuncs.Join (each part preceded by its length, so that no two lists of
// parts give the same key; any error is returned as is):
//
//	ratekitconnect.Join(ratekitconnect.Procedure, ratekitconnect.PeerIP)
//
// A nil key gives a Key that fails every call with
// keyfuncs.ErrMisconfigured.
func Join(keys ...Key) Key { return adapter.JoinKeys(keys...) }

// First returns the Key whose key comes from the first of keys that finds
// one, by the rules of keyfuncs.First: a key error wrapping
// keyfuncs.ErrMissing passes on to the next, and the key is prefixed with
// the index of the one that found it ("0:alice", "1:192.0.2.1"):
//
//	ratekitconnect.First(ratekitconnect.User(userKey), ratekitconnect.PeerIP)
//
// A nil key gives a Key that fails every call with
// keyfuncs.ErrMisconfigured.
func First(keys ...Key) Key { return adapter.FirstKeys(keys...) }
