package ratekitgin

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = adapter.NewClientIP()

// PeerIP is the key of the TCP peer address (c.Request.RemoteAddr), as
// keyfuncs.PeerIP: IPv4 clients by address, IPv6 clients by their /64. It
// never reads a header, so no client can choose its bucket: the safe
// default. Behind a reverse proxy, use IP with keyfuncs.TrustedProxies.
func PeerIP(c *gin.Context) (string, error) {
	return peer.Key(c.Request)
}

// IP returns the key of the client address behind trusted proxies, as
// keyfuncs.IP resolves it: the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, whose proxy header is then walked from the
// right. It is independent of the engine's SetTrustedProxies.
//
//	ip, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	f, err := keyfuncs.IP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) (string, error) { return f(c.Request) }, nil
}

// ClientIP returns the key of Gin's own client address, c.ClientIP(), on
// the engine r, made canonical as PeerIP's. A value that is not an address
// is an error wrapping keyfuncs.ErrMissing (400).
//
// c.ClientIP() is only as safe as the engine's proxy settings, and Gin's
// defaults are not: until SetTrustedProxies is called, Gin believes the
// X-Forwarded-For or X-Real-IP of every peer, and a TrustedPlatform header
// from every peer. ClientIP therefore checks r when it is called and
// returns an error wrapping keyfuncs.ErrMisconfigured, naming the setting
// to change, if r is nil, if r.TrustedPlatform or r.AppEngine is set, or
// if c.ClientIP() of a request from a peer that is no proxy is an address
// forged in a header (adapter.ProbeClientIP). Configure the engine first:
//
//	r := gin.New()
//	err := r.SetTrustedProxies([]string{"10.0.0.0/8"}) // your proxies; nil for none
//	...
//	ip, err := ratekitgin.ClientIP(r)
//
// Behind a platform that sets its own header, use IP with the platform's
// addresses and keyfuncs.ProxyHeader instead.
func ClientIP(r *gin.Engine) (Key, error) {
	switch {
	case r == nil:
		return nil, fmt.Errorf("ratekitgin: ClientIP: %w: nil engine", keyfuncs.ErrMisconfigured)
	case r.TrustedPlatform != "" || r.AppEngine:
		return nil, fmt.Errorf("ratekitgin: ClientIP: %w: engine.TrustedPlatform (%q) or the deprecated engine.AppEngine is set, "+
			"so Gin takes the platform's header from every peer, proxy or not; unset them, and behind the platform key with "+
			"ratekitgin.IP(keyfuncs.TrustedProxies(<the platform's addresses>), keyfuncs.ProxyHeader(<its header>))",
			keyfuncs.ErrMisconfigured, r.TrustedPlatform)
	}
	err := adapter.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
		c := gin.CreateTestContextOnly(nil, r)
		c.Request, _ = http.NewRequest(http.MethodGet, "/", nil) // cannot fail
		c.Request.RemoteAddr, c.Request.Header = p.String(), h
		return c.ClientIP()
	}, r.RemoteIPHeaders...)
	if err != nil {
		return nil, fmt.Errorf("ratekitgin: ClientIP: %w; call engine.SetTrustedProxies with your proxies' addresses "+
			"(nil for none) before ClientIP, or set engine.ForwardedByClientIP = false", err)
	}
	return func(c *gin.Context) (string, error) {
		k, err := peer.KeyFrom(c.ClientIP(), nil) // with or without port
		if err != nil {
			// Gin finds no address in a RemoteAddr without port: say why.
			if perr := adapter.CheckRemoteAddr(c.Request.RemoteAddr); perr != nil {
				return "", perr
			}
		}
		return k, err
	}, nil
}

// Header returns the key of the named request header, such as an API key:
// Adapt(keyfuncs.Header(name)).
func Header(name string) Key {
	return Adapt(keyfuncs.Header(name))
}

// Adapt returns the Key of a net/http key function, applied to
// c.Request, so that every function of package keyfuncs (Query, Route,
// Join, First...) and any of your own serve Gin as well:
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

// ContextValue returns the key of the value stored in the Gin context
// under key (c.Set(key, value)), typically by an authentication middleware
// that runs before the limiter, converted as keyfuncs.ContextValue
// converts its value: an absent, nil or blank value is an error wrapping
// keyfuncs.ErrMissing (400). A nil key gives a Key that fails every
// request with keyfuncs.ErrMisconfigured (500). Values set with c.Set live
// in the gin.Context, not in the context of c.Request, which
// keyfuncs.ContextValue reads.
func ContextValue(key any) Key {
	if key == nil {
		err := fmt.Errorf("%w: ContextValue: nil key", keyfuncs.ErrMisconfigured)
		return func(*gin.Context) (string, error) { return "", err }
	}
	toKey := adapter.ValueKey(fmt.Sprintf("ratekitgin: c.Get(%#v)", key))
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(key)
		return toKey(v)
	}
}

// User returns the key of the user ID that the app's authentication
// middleware stored with c.Set(key, id), for a limit per user: it is
// ContextValue under a name that documents intent. Unauthenticated
// requests are answered 400; to limit them by address instead, write a
// Key that falls back to PeerIP, prefixing the two kinds of keys.
func User(key any) Key {
	return ContextValue(key)
}
