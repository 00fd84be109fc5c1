package ratekitfiber3

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = keyfuncs.NewClientIP()

// PeerIP is the key of the TCP peer address: IPv4 clients by address,
// IPv6 clients by their /64. It never reads a header, so no client can
// choose its bucket: the safe default. Behind a reverse proxy every client
// would share the proxy's address; there, use IP with TrustedProxies.
func PeerIP(c fiber.Ctx) (string, error) {
	if a, ok := c.RequestCtx().RemoteAddr().(*net.TCPAddr); ok {
		// The key of keyfuncs.PeerIP, without formatting the address only
		// to parse it again (TestPeerIPAsKeyfuncs).
		ip, _ := netip.AddrFromSlice(a.IP) // not an address: KeyAddr reports it
		return peer.KeyAddr(ip)
	}
	return peer.KeyFrom(remoteAddr(c), nil) // not an IP peer: an error wrapping keyfuncs.ErrMissing
}

// remoteAddr returns the peer's address as keyfuncs.ClientIP and
// rules.Request take it, "IP:port" ("[IPv6%zone]:port"), in one
// allocation (net.TCPAddr.String takes three). It shares no memory with
// the request.
func remoteAddr(c fiber.Ctx) string {
	ra := c.RequestCtx().RemoteAddr()
	a, ok := ra.(*net.TCPAddr)
	if !ok {
		return ra.String() // not an IP peer: KeyFrom reports it
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return ""
	}
	ap := netip.AddrPortFrom(ip.Unmap().WithZone(a.Zone), uint16(a.Port))
	var buf [len("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")]byte
	return string(ap.AppendTo(buf[:0]))
}

// IP returns the key of the client address as ratekit resolves it (see
// keyfuncs.ClientIP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, in which case the proxy header is walked from
// the right, so that entries a client forged are never used. Fiber's
// ProxyHeader and TrustProxy play no part. It returns an error under the
// same conditions as keyfuncs.NewClientIP.
//
//	ip, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	ci, err := keyfuncs.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c fiber.Ctx) (string, error) {
		return ci.KeyFrom(remoteAddr(c), headers{&c.Request().Header})
	}, nil
}

// headers is keyfuncs.HeaderValues over fasthttp's request headers. The
// values are copied: a key may be a substring of one.
type headers struct{ h *fasthttp.RequestHeader }

func (h headers) Values(name string) []string {
	all := h.h.PeekAll(name)
	if len(all) == 0 {
		return nil
	}
	vs := make([]string, len(all))
	for i, v := range all {
		vs[i] = string(v)
	}
	return vs
}

// FiberIP returns the key of Fiber's own client address, c.IP(), on the
// app, made canonical as PeerIP's (IPv6 clients grouped by /64); a value
// that is not an address is an error wrapping keyfuncs.ErrMissing (400).
//
// Without fiber.Config.ProxyHeader (the default), c.IP() is the TCP peer
// and the key is PeerIP's. With ProxyHeader and TrustProxy, Fiber v3 reads
// the header from the peers that TrustProxyConfig trusts, and from
// X-Forwarded-For (or Forwarded) takes the leftmost entry, which the
// client writes, even behind a trusted proxy. FiberIP therefore returns an
// error wrapping keyfuncs.ErrMisconfigured, naming the setting to change:
//   - if app is nil;
//   - if ProxyHeader is X-Forwarded-For or Forwarded: use
//     IP(keyfuncs.TrustedProxies(...)), which walks it from the right;
//   - if ProxyHeader is set without TrustProxy: Fiber v3 then ignores the
//     header, and c.IP() is the proxy's address for every client behind
//     it (Fiber v2 read it from every peer), a configuration to settle;
//   - if c.IP() of a request from a peer that is no proxy (192.0.2.1,
//     2001:db8::1; see keyfuncs.ProbeClientIP) is an address forged in a
//     header, as when TrustProxyConfig.Proxies holds 0.0.0.0/0.
//
// The safe configurations are no ProxyHeader, or a header your proxies
// overwrite (X-Real-IP) with
//
//	fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
//		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.0/8"}},
//		EnableIPValidation: true}
//
// The key answers 500 on a request served by another app than the one it
// was built for (build it with the root app when mounting sub-apps).
func FiberIP(app *fiber.App) (Key, error) {
	if app == nil {
		return nil, fmt.Errorf("ratekitfiber3: FiberIP: %w: nil app", keyfuncs.ErrMisconfigured)
	}
	cfg := app.Config()
	fail := func(why string) (Key, error) {
		return nil, fmt.Errorf("ratekitfiber3: FiberIP: %w: fiber.Config.ProxyHeader is %q: %s", keyfuncs.ErrMisconfigured, cfg.ProxyHeader, why)
	}
	switch h := cfg.ProxyHeader; {
	case strings.EqualFold(h, fiber.HeaderXForwardedFor) || strings.EqualFold(h, "Forwarded"):
		return fail("Fiber takes its leftmost entry, which the client writes, even behind a trusted proxy; " +
			"key with ratekitfiber3.IP(keyfuncs.TrustedProxies(<your proxies>)), which walks X-Forwarded-For from the right")
	case h != "" && !cfg.TrustProxy:
		return fail("without TrustProxy Fiber v3 ignores it and c.IP() is the proxy's address for every client behind it " +
			"(Fiber v2 read it from every peer); set TrustProxy: true and TrustProxyConfig.Proxies: <your proxies>, or unset ProxyHeader")
	}
	if err := keyfuncs.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
		var req fasthttp.Request
		for name, vs := range h {
			req.Header.Set(name, vs[0])
		}
		var fctx fasthttp.RequestCtx
		fctx.Init(&req, net.TCPAddrFromAddrPort(p), nil)
		c := app.AcquireCtx(&fctx)
		defer app.ReleaseCtx(c)
		return strings.Clone(c.IP())
	}, cfg.ProxyHeader); err != nil {
		return nil, fmt.Errorf("ratekitfiber3: FiberIP: %w; list only your proxies in fiber.Config.TrustProxyConfig "+
			"(Proxies, Private, Loopback, LinkLocal)", err)
	}
	errOtherApp := fmt.Errorf("ratekitfiber3: FiberIP: %w: the request is served by another app than the one FiberIP checked",
		keyfuncs.ErrMisconfigured)
	return func(c fiber.Ctx) (string, error) {
		if c.App() != app {
			return "", errOtherApp
		}
		ip := c.IP()
		if strings.IndexByte(ip, ':') >= 0 && strings.IndexByte(ip, '[') < 0 {
			ip = "[" + ip + "]" // a bare IPv6 address, not host:port
		}
		k, err := peer.KeyFrom(ip, nil)
		if err != nil {
			return "", err
		}
		return strings.Clone(k), nil
	}, nil
}

// Header returns the key of the named request header (c.Get(name)), for
// example an API key, with surrounding white space removed and copied out
// of the request. An absent or blank header is an error wrapping
// keyfuncs.ErrMissing, the error of keyfuncs.Header (by keyfuncs.HeaderKey),
// so that the 400 body is the same as under stdhttp. An empty name gives a
// Key that fails every request with keyfuncs.ErrMisconfigured (500).
func Header(name string) Key {
	toKey := keyfuncs.HeaderKey(name)
	return func(c fiber.Ctx) (string, error) {
		k, err := toKey(c.Get(name))
		if err != nil {
			return "", err
		}
		return strings.Clone(k), nil
	}
}

// Locals returns the key of the value that the app's authentication
// middleware stored with c.Locals(key, user), for a limit per user. The
// value is converted as by keyfuncs.ValueKey (the rules of
// keyfuncs.ContextValue): it may be a string, a fmt.Stringer, or of any
// integer type or type whose underlying type is a string or integer type.
// The key is copied, since the value may have been read from the request.
// An absent, nil (including a nil pointer) or blank value is an error
// wrapping keyfuncs.ErrMissing (400; wrap Locals in a Key of your own to
// fall back to the client IP instead); a value of another type is an error
// that does not (500). A nil key gives a Key that fails every request with
// keyfuncs.ErrMisconfigured (500).
func Locals(key any) Key {
	if key == nil {
		err := fmt.Errorf("%w: Locals: nil key", keyfuncs.ErrMisconfigured)
		return func(fiber.Ctx) (string, error) { return "", err }
	}
	toKey := keyfuncs.ValueKey(fmt.Sprintf("ratekitfiber3: c.Locals(%#v)", key))
	return func(c fiber.Ctx) (string, error) {
		k, err := toKey(c.Locals(key))
		if err != nil {
			return "", err
		}
		return strings.Clone(k), nil
	}
}
