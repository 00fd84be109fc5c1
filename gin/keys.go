package ratekitgin

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = keyfuncs.NewClientIP()

// PeerIP is the key of the TCP peer address (c.Request.RemoteAddr): IPv4
// clients by address, IPv6 clients by their /64. It never reads a header,
// so no client can choose its bucket: the safe default, whatever the
// engine's proxy settings. Behind a reverse proxy every client would share
// the proxy's address; there, use IP with keyfuncs.TrustedProxies. It is
// keyfuncs.PeerIP: a RemoteAddr without a port, which a handler wrapping
// the engine rewrote from a header (gorilla's handlers.ProxyHeaders), is
// an error wrapping keyfuncs.ErrMisconfigured (500). For an IPv4 peer it
// does not allocate.
func PeerIP(c *gin.Context) (string, error) {
	return peer.Key(c.Request)
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
	return func(c *gin.Context) (string, error) { return ci.Key(c.Request) }, nil
}

// GinClientIP returns the key of Gin's own client address, c.ClientIP(),
// on the engine r, made canonical as PeerIP's (IPv4-mapped addresses
// unmapped, IPv6 clients grouped by /64). A value that is not an address
// is an error wrapping keyfuncs.ErrMissing (400).
//
// c.ClientIP() is only as safe as the engine's proxy settings, and Gin's
// defaults are not safe: until SetTrustedProxies is called, Gin trusts
// every peer as a proxy and believes its X-Forwarded-For or X-Real-IP, and
// it takes a TrustedPlatform header (gin.PlatformCloudflare...) from every
// peer. GinClientIP therefore checks r as configured when it is called,
// and returns an error wrapping keyfuncs.ErrMisconfigured, naming the
// setting to change, if r.TrustedPlatform or the deprecated r.AppEngine is
// set, if r is nil, or if c.ClientIP() of a request from a peer that is no
// proxy (192.0.2.1, 2001:db8::1; see keyfuncs.ProbeClientIP) is an address
// forged in a header. Configure the engine first, and leave its proxy
// settings alone afterwards: the check is not repeated per request. A
// request whose RemoteAddr a handler before the engine rewrote to an
// address without a port (see PeerIP) fails with such an error too (500).
//
//	r := gin.New()
//	err := r.SetTrustedProxies([]string{"10.0.0.0/8"}) // your proxies; nil for none
//	...
//	ip, err := ratekitgin.GinClientIP(r)
//
// Gin then walks X-Forwarded-For from the right, skipping the trusted
// proxies, as IP does. Behind a platform that sets its own header, use
// IP with the platform's addresses and keyfuncs.ProxyHeader instead.
func GinClientIP(r *gin.Engine) (Key, error) {
	switch {
	case r == nil:
		return nil, fmt.Errorf("ratekitgin: GinClientIP: %w: nil engine", keyfuncs.ErrMisconfigured)
	case r.TrustedPlatform != "" || r.AppEngine:
		return nil, fmt.Errorf("ratekitgin: GinClientIP: %w: engine.TrustedPlatform (%q) or the deprecated engine.AppEngine is set, "+
			"so Gin takes the platform's header from every peer, proxy or not; unset them, and behind the platform key with "+
			"ratekitgin.IP(keyfuncs.TrustedProxies(<the platform's addresses>), keyfuncs.ProxyHeader(<its header>))",
			keyfuncs.ErrMisconfigured, r.TrustedPlatform)
	}
	err := keyfuncs.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
		c := gin.CreateTestContextOnly(nil, r)
		c.Request, _ = http.NewRequest(http.MethodGet, "/", nil) // cannot fail
		c.Request.RemoteAddr, c.Request.Header = p.String(), h
		return c.ClientIP()
	}, r.RemoteIPHeaders...)
	if err != nil {
		return nil, fmt.Errorf("ratekitgin: GinClientIP: %w; call engine.SetTrustedProxies with your proxies' addresses "+
			"(nil for none) before GinClientIP, or set engine.ForwardedByClientIP = false", err)
	}
	return func(c *gin.Context) (string, error) {
		k, err := peer.KeyFrom(c.ClientIP(), nil) // with or without port
		if err != nil {
			// Gin finds no address in a RemoteAddr without port: say why.
			if perr := keyfuncs.CheckRemoteAddr(c.Request.RemoteAddr); perr != nil {
				return "", perr
			}
		}
		return k, err
	}, nil
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
