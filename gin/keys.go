package ratekitgin

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = keyfuncs.NewClientIP()

// PeerIP is the key of the TCP peer address (c.Request.RemoteAddr): IPv4
// clients by address, IPv6 clients by their /64. It never reads a header,
// so no client can choose its bucket: the safe default, whatever the
// engine's proxy settings. Behind a reverse proxy every client would share
// the proxy's address; there, use IP with keyfuncs.TrustedProxies. For an
// IPv4 peer it does not allocate.
func PeerIP(c *gin.Context) (string, error) {
	return peer.KeyFrom(c.Request.RemoteAddr, nil)
}

// IP returns the key of the client address as ratekit resolves it (see
// keyfuncs.ClientIP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, in which case the proxy header (X-Forwarded-For
// unless keyfuncs.ProxyHeader says otherwise) is walked from the right, so
// that entries a client forged are never used. It is independent of the
// engine's SetTrustedProxies and TrustedPlatform. It returns an error under
// the same conditions as keyfuncs.NewClientIP.
//
//	ip, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	ci, err := keyfuncs.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) (string, error) {
		return ci.KeyFrom(c.Request.RemoteAddr, c.Request.Header)
	}, nil
}

// GinClientIP is the key of Gin's own client address, c.ClientIP(), made
// canonical as PeerIP's (IPv4-mapped addresses unmapped, IPv6 clients
// grouped by /64). A value that is not an address is an error wrapping
// keyfuncs.ErrMissing (400).
//
// It is only as safe as the engine's proxy settings, and Gin's defaults are
// not safe: until engine.SetTrustedProxies is called, Gin trusts every
// peer, so any client picks its own key with an X-Forwarded-For or
// X-Real-IP header. Use GinClientIP only after
//
//	r.SetTrustedProxies([]string{"10.0.0.0/8"}) // your proxies; nil for none
//
// Gin then walks X-Forwarded-For from the right, skipping the trusted
// proxies, as IP does. Beware also of engine.TrustedPlatform (for example
// gin.PlatformCloudflare): Gin then takes the platform's header verbatim
// from every peer, trusted or not, which is safe only if no request can
// reach the server except through that platform. When in doubt, prefer
// PeerIP or IP, which do not depend on engine settings.
func GinClientIP(c *gin.Context) (string, error) {
	// KeyFrom takes an address with or without port; a bare IPv6 address
	// has at least two colons, so it is never mistaken for host:port.
	return peer.KeyFrom(c.ClientIP(), nil)
}

// Header returns the key of the named request header, for example an API
// key, with surrounding white space removed; if it occurs more than once,
// the first value is used. An absent or blank header is an error wrapping
// keyfuncs.ErrMissing. It is Adapt(keyfuncs.Header(name)): the 400 body is
// the same as under stdhttp. An empty name gives a Key that fails every
// request with keyfuncs.ErrMisconfigured (500).
func Header(name string) Key {
	return Adapt(keyfuncs.Header(name))
}

// Adapt returns the Key of a net/http key function, applied to
// c.Request, so that every function of package keyfuncs (Query, Route,
// Join, First, ContextValue...) and any of your own serve Gin as well:
//
//	ratekitgin.Adapt(keyfuncs.Join(keyfuncs.Route(), keyfuncs.PeerIP))
//
// A nil f gives a Key that fails every request with
// keyfuncs.ErrMisconfigured (500).
func Adapt(f keyfuncs.Func) Key {
	if f == nil {
		err := fmt.Errorf("%w: Adapt: nil key function", keyfuncs.ErrMisconfigured)
		return func(*gin.Context) (string, error) { return "", err }
	}
	return func(c *gin.Context) (string, error) { return f(c.Request) }
}

// ContextKey returns the key of the value stored in the Gin context under
// key (c.Set(key, value), read with c.Get), typically by an authentication
// middleware that runs before the limiter.
//
// The value is converted as by keyfuncs.ValueKey: it may be a string, a
// fmt.Stringer, any integer type, or any type whose underlying type is a
// string or integer type; integers are formatted in decimal. An absent,
// nil (including a nil pointer) or blank value is an error wrapping
// keyfuncs.ErrMissing (400); a value of any other type is a programming
// error, answered 500. A nil key gives a Key that fails every request with
// keyfuncs.ErrMisconfigured (500).
//
// Values set with c.Set live in the gin.Context, not in the context of
// c.Request, so keyfuncs.ContextValue does not see them.
func ContextKey(key any) Key {
	if key == nil {
		err := fmt.Errorf("%w: ContextKey: nil key", keyfuncs.ErrMisconfigured)
		return func(*gin.Context) (string, error) { return "", err }
	}
	toKey := keyfuncs.ValueKey(fmt.Sprintf("ratekitgin: c.Get(%#v)", key))
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(key)
		return toKey(v)
	}
}

// User returns the key of the user ID that the app's authentication
// middleware stored with c.Set(key, id), for a limit per user. It is
// ContextKey under a name that documents intent: unauthenticated requests
// (no value) are an error wrapping keyfuncs.ErrMissing, answered 400. To
// limit anonymous requests by address instead, write a Key that falls back
// to PeerIP or IP, prefixing the two kinds of keys so that a user ID never
// shares a bucket with an address.
func User(key any) Key {
	return ContextKey(key)
}
