package ratekitecho5

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = keyfuncs.NewClientIP()

// PeerIP is the key of the TCP peer address (the request's RemoteAddr):
// IPv4 clients by address, IPv6 clients by their /64. It never reads a
// header, so no client can choose its bucket: the safe default. Behind a
// reverse proxy every client would share the proxy's address; there, use
// IP with keyfuncs.TrustedProxies. It does not allocate for IPv4 peers.
func PeerIP(c *echo.Context) (string, error) {
	return keyfuncs.PeerIP(c.Request())
}

// IP returns the key of the client address as ratekit resolves it (see
// keyfuncs.ClientIP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, in which case the proxy header is walked from
// the right, so that entries a client forged are never used. It ignores
// e.IPExtractor. It returns an error under the same conditions as
// keyfuncs.NewClientIP.
//
//	ip, err := ratekitecho5.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	ci, err := keyfuncs.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *echo.Context) (string, error) { return ci.Key(c.Request()) }, nil
}

// A probe is the result of keyfuncs.ProbeClientIP on an Echo instance's
// c.RealIP(): nil, or the error RealIP returns.
type probe struct {
	e   *echo.Echo
	err error
}

// probed holds the probe of every Echo instance RealIP has served (an app
// has one or a few, for its life); lastProbe the latest, which a request
// reads with one atomic load.
var (
	probed    sync.Map // *echo.Echo to *probe
	lastProbe atomic.Pointer[probe]
)

// RealIP is the key of Echo's own client address, c.RealIP(), made
// canonical as PeerIP's (IPv6 clients grouped by /64). An empty value, or
// one that is not an address, is an error wrapping keyfuncs.ErrMissing
// (400).
//
// It is only as safe as e.IPExtractor. These are safe:
//
//   - none (nil, Echo v5's default) or echo.ExtractIPDirect(): the TCP
//     peer, as PeerIP.
//   - echo.ExtractIPFromXFFHeader(echo.TrustLoopback(false),
//     echo.TrustLinkLocal(false), echo.TrustPrivateNet(false),
//     echo.TrustIPRange(yourProxies)), or ExtractIPFromRealIPHeader with
//     the same options: the header is believed from your proxies only.
//     Echo's extractors trust every loopback, link-local and private
//     address unless told otherwise, which is safe only if every such
//     peer is a proxy of yours: RealIP cannot tell.
//
// On the first request of each Echo instance, RealIP runs c.RealIP() on
// requests with forged forwarding headers from peers that are no proxies
// (keyfuncs.ProbeClientIP). If it believes one, as echo.LegacyIPExtractor()
// does, or an extractor that reads X-Real-IP from anyone or trusts
// 0.0.0.0/0, RealIP fails every request with an error wrapping
// keyfuncs.ErrMisconfigured (500) that names e.IPExtractor. Set
// e.IPExtractor before serving, and leave it: it is not checked again. A
// request whose RemoteAddr a handler before Echo rewrote to an address
// without a port, which Echo takes for the peer, fails too (see
// keyfuncs.CheckRemoteAddr).
//
// IP(keyfuncs.TrustedProxies(...)) reads proxies' headers without
// depending on the Echo instance's settings.
func RealIP(c *echo.Context) (string, error) {
	if err := probeOf(c.Echo()); err != nil {
		return "", err
	}
	if err := keyfuncs.CheckRemoteAddr(c.Request().RemoteAddr); err != nil {
		return "", err // Echo takes a RemoteAddr without port for the peer
	}
	ip := strings.TrimSpace(c.RealIP())
	k, err := peer.KeyFrom(ip, nil)
	if err != nil {
		return "", fmt.Errorf("ratekitecho5: RealIP %q: %w", ip, keyfuncs.ErrMissing)
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
//	ratekitecho5.Adapt(keyfuncs.Join(keyfuncs.Route(), keyfuncs.PeerIP))
func Adapt(f keyfuncs.Func) Key {
	if f == nil {
		err := fmt.Errorf("%w: Adapt: nil key function", keyfuncs.ErrMisconfigured)
		return func(*echo.Context) (string, error) { return "", err }
	}
	return func(c *echo.Context) (string, error) { return f(c.Request()) }
}

// ContextValue returns the key of the value that the app's middleware
// stored with c.Set(key, v), converted as by keyfuncs.ValueKey. The value
// may be a string, a fmt.Stringer, or of any integer type or type whose
// underlying type is a string or integer type; integers are written in
// decimal. An absent, nil (including a nil pointer) or blank value is an
// error wrapping keyfuncs.ErrMissing (400); a value of another type is an
// error that does not (500).
func ContextValue(key string) Key {
	toKey := keyfuncs.ValueKey(fmt.Sprintf("ratekitecho5: c.Get(%q)", key))
	return func(c *echo.Context) (string, error) {
		return toKey(c.Get(key))
	}
}

// User returns the key of the user ID that the app's authentication
// middleware stored with c.Set(key, id), for a limit per user. It is
// ContextValue under a name that says so: requests without a user are an
// error wrapping keyfuncs.ErrMissing (400). To fall back to the client
// address for anonymous requests, write a Key that tries both.
//
//	e.Use(ratekitecho5.New(lim, ratekitecho5.User("user_id")))
func User(key string) Key { return ContextValue(key) }

// probeOf returns the probe of e's c.RealIP(), running it on e's first
// request. It probes c.RealIP() itself, not e.IPExtractor, so that it
// checks Echo's default (no extractor) too. e is nil for a context made
// by echo.NewContext without an Echo instance.
func probeOf(e *echo.Echo) error {
	if p := lastProbe.Load(); p != nil && p.e == e {
		return p.err
	}
	v, ok := probed.Load(e)
	if !ok {
		err := keyfuncs.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
			r, _ := http.NewRequest(http.MethodGet, "/", nil) // cannot fail
			r.RemoteAddr, r.Header = p.String(), h
			return echo.NewContext(r, nil, e).RealIP()
		})
		if err != nil {
			err = fmt.Errorf("ratekitecho5: RealIP: c.RealIP() under e.IPExtractor: %w; leave e.IPExtractor nil "+
				"or set echo.ExtractIPDirect() (the TCP peer), or behind proxies echo.ExtractIPFromXFFHeader with "+
				"trust options that list only your proxies (never echo.LegacyIPExtractor())", err)
		}
		v, _ = probed.LoadOrStore(e, &probe{e: e, err: err})
	}
	p := v.(*probe)
	lastProbe.Store(p)
	return p.err
}
