package ratekitfiber3

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/internal/fastport"
	"github.com/ratekit/ratekit/keyfuncs"
)

// PeerIP is the key of the TCP peer address, as keyfuncs.PeerIP: IPv4
// clients by address, IPv6 clients by their /64. It never reads a header,
// so no client can choose its bucket: the safe default. Behind a reverse
// proxy, use IP with keyfuncs.TrustedProxies.
func PeerIP(c fiber.Ctx) (string, error) { return fastport.PeerKey(c.RequestCtx().RemoteAddr()) }

// IP returns the key of the client address behind trusted proxies, as
// keyfuncs.IP resolves it: the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, whose proxy header is then walked from the
// right. Fiber's ProxyHeader and TrustProxy play no part.
//
//	ip, err := ratekitfiber3.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) { return fastport.IP[framework[fiber.Ctx]](opts...) }

// ClientIP returns the key of Fiber's own client address, c.IP(), on app,
// made canonical as PeerIP's (400 if it is no address). Fiber v3 reads
// ProxyHeader from the peers of TrustProxyConfig, and takes the leftmost
// X-Forwarded-For entry, which the client writes, even there: ClientIP
// returns an error wrapping keyfuncs.ErrMisconfigured, naming the setting
// to change, for a nil app, a ProxyHeader of X-Forwarded-For or Forwarded
// (use IP), one without TrustProxy (Fiber v3 then ignores it, and c.IP()
// is the proxy's address for every client behind it), or an app whose
// c.IP() a peer that is no proxy can forge (adapter.ProbeClientIP). Safe
// are no ProxyHeader, or
//
//	fiber.Config{ProxyHeader: "X-Real-IP", TrustProxy: true,
//		TrustProxyConfig: fiber.TrustProxyConfig{Proxies: []string{"10.0.0.0/8"}},
//		EnableIPValidation: true}
//
// The check holds for the life of app: Fiber fixes its proxy settings in
// fiber.New (app.Config() returns a copy, and the trusted proxies are
// parsed into tables of the app's own), so no later change can loosen
// them, and the key compares nothing per request. The key answers 500 on
// a request served by another app than app (build it with the root app
// when mounting sub-apps).
func ClientIP(app *fiber.App) (Key, error) {
	if app == nil {
		return nil, fmt.Errorf("ratekitfiber3: ClientIP: %w: nil app", keyfuncs.ErrMisconfigured)
	}
	cfg := app.Config()
	fail := func(why string) (Key, error) {
		return nil, fmt.Errorf("ratekitfiber3: ClientIP: %w: fiber.Config.ProxyHeader is %q: %s", keyfuncs.ErrMisconfigured, cfg.ProxyHeader, why)
	}
	switch h := cfg.ProxyHeader; {
	case strings.EqualFold(h, fiber.HeaderXForwardedFor) || strings.EqualFold(h, "Forwarded"):
		return fail("Fiber takes its leftmost entry, which the client writes, even behind a trusted proxy; " +
			"key with ratekitfiber3.IP(keyfuncs.TrustedProxies(<your proxies>)), which walks X-Forwarded-For from the right")
	case h != "" && !cfg.TrustProxy:
		return fail("without TrustProxy Fiber v3 ignores it and c.IP() is the proxy's address for every client behind it " +
			"(Fiber v2 read it from every peer); set TrustProxy: true and TrustProxyConfig.Proxies: <your proxies>, or unset ProxyHeader")
	}
	if err := adapter.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
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
		return nil, fmt.Errorf("ratekitfiber3: ClientIP: %w; list only your proxies in fiber.Config.TrustProxyConfig "+
			"(Proxies, Private, Loopback, LinkLocal)", err)
	}
	return fastport.ClientIP[fiber.Ctx]("ratekitfiber3", app), nil
}

// Header returns the key of the named request header, such as an API key,
// as keyfuncs.Header takes it (trimmed; 400 when absent or blank), copied
// out of the request.
func Header(name string) Key { return fastport.Header[fiber.Ctx](name) }

// ContextValue returns the key of the value that an earlier middleware,
// such as the app's authentication, stored with c.Locals(key, v),
// converted as keyfuncs.ContextValue converts its value (an absent, nil or
// blank value is an error wrapping keyfuncs.ErrMissing, 400) and copied. A
// nil key gives a Key that fails every request with
// keyfuncs.ErrMisconfigured (500).
func ContextValue(key any) Key { return fastport.ContextValue[fiber.Ctx]("ratekitfiber3", key) }
