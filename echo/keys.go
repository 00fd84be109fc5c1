package ratekitecho

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = keyfuncs.NewClientIP()

// PeerIP is the key of the TCP peer address (the request's RemoteAddr):
// IPv4 clients by address, IPv6 clients by their /64. It never reads a
// header, so no client can choose its bucket: the safe default. Behind a
// reverse proxy every client would share the proxy's address; there, use
// IP with keyfuncs.TrustedProxies. It does not allocate for IPv4 peers.
func PeerIP(c echo.Context) (string, error) {
	return keyfuncs.PeerIP(c.Request())
}

// IP returns the key of the client address as ratekit resolves it (see
// keyfuncs.ClientIP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, in which case the proxy header is walked from
// the right, so that entries a client forged are never used. It ignores
// e.IPExtractor. It returns an error under the same conditions as
// keyfuncs.NewClientIP.
//
//	ip, err := ratekitecho.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	ci, err := keyfuncs.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c echo.Context) (string, error) {
		r := c.Request()
		return ci.KeyFrom(r.RemoteAddr, r.Header)
	}, nil
}

var errNoExtractor = fmt.Errorf("%w: RealIP: the Echo instance has no IPExtractor, "+
	"so c.RealIP() would believe any client's X-Forwarded-For", keyfuncs.ErrMisconfigured)

// RealIP is the key of Echo's own client address, c.RealIP(), made
// canonical as PeerIP's (IPv6 clients grouped by /64). An empty value, or
// one that is not an address, is an error wrapping keyfuncs.ErrMissing
// (400).
//
// It is only as safe as e.IPExtractor. Without one, c.RealIP() returns the
// leftmost X-Forwarded-For entry (or X-Real-IP) of any request, which the
// client writes: every request could pick a fresh bucket. RealIP therefore
// refuses to work without an extractor and fails every request with an
// error wrapping keyfuncs.ErrMisconfigured (500). Set one of:
//
//   - e.IPExtractor = echo.ExtractIPDirect(): the TCP peer, as PeerIP.
//   - e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustLoopback(false),
//     echo.TrustLinkLocal(false), echo.TrustPrivateNet(false),
//     echo.TrustIPRange(yourProxies)): X-Forwarded-For walked from the
//     right past your proxies. Echo's extractors trust every loopback,
//     link-local and private address unless told otherwise, which is safe
//     only if every such peer is a proxy of yours.
//
// IP(keyfuncs.TrustedProxies(...)) does the same as the second without
// depending on the Echo instance's settings.
func RealIP(c echo.Context) (string, error) {
	if e := c.Echo(); e == nil || e.IPExtractor == nil {
		return "", errNoExtractor
	}
	ip := strings.TrimSpace(c.RealIP())
	k, err := peer.KeyFrom(ip, nil)
	if err != nil {
		return "", fmt.Errorf("ratekitecho: RealIP %q: %w", ip, keyfuncs.ErrMissing)
	}
	return k, nil
}

// Header returns the key of the named request header, for example an API
// key: keyfuncs.Header, with its errors (an absent or blank header wraps
// keyfuncs.ErrMissing, an empty name keyfuncs.ErrMisconfigured).
func Header(name string) Key { return Adapt(keyfuncs.Header(name)) }

// Adapt returns the Key of a net/http key function, such as
// keyfuncs.Query, keyfuncs.Route or a keyfuncs.First or keyfuncs.Join of
// several, applied to c.Request(). A nil f gives a Key that fails every
// request with keyfuncs.ErrMisconfigured (500).
//
//	ratekitecho.Adapt(keyfuncs.Join(keyfuncs.Route(), keyfuncs.PeerIP))
func Adapt(f keyfuncs.Func) Key {
	if f == nil {
		err := fmt.Errorf("%w: Adapt: nil key function", keyfuncs.ErrMisconfigured)
		return func(echo.Context) (string, error) { return "", err }
	}
	return func(c echo.Context) (string, error) { return f(c.Request()) }
}

// ContextValue returns the key of the value that the app's middleware
// stored with c.Set(key, v), converted as by keyfuncs.ValueKey. The value
// may be a string, a fmt.Stringer, or of any integer type or type whose
// underlying type is a string or integer type; integers are written in
// decimal. An absent, nil (including a nil pointer) or blank value is an
// error wrapping keyfuncs.ErrMissing (400); a value of another type is an
// error that does not (500).
func ContextValue(key string) Key {
	toKey := keyfuncs.ValueKey(fmt.Sprintf("ratekitecho: c.Get(%q)", key))
	return func(c echo.Context) (string, error) {
		return toKey(c.Get(key))
	}
}

// User returns the key of the user ID that the app's authentication
// middleware stored with c.Set(key, id), for a limit per user. It is
// ContextValue under a name that says so: requests without a user are an
// error wrapping keyfuncs.ErrMissing (400). To fall back to the client
// address for anonymous requests, write a Key that tries both.
//
//	e.Use(ratekitecho.New(lim, ratekitecho.User("user_id")))
func User(key string) Key { return ContextValue(key) }
