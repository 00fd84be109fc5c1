package ratekitchi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/ratekit/ratekit/keyfuncs"
)

// Route is the key function of the request's method and Chi route pattern,
// such as "GET /users/{id}": one counter per route (per client too with
// keyfuncs.Join(ratekitchi.Route, keyfuncs.PeerIP)), however many paths
// match it.
//
// The pattern is what chi.RouteContext(r.Context()).RoutePattern() holds
// when the middleware runs, and Chi completes it only while routing. Mount
// the middleware with r.With(...) or with Use inside r.Group, where the
// route is already matched. Inside r.Route or a mounted sub-router, the
// pattern is only as complete as the routing so far ("/api/*" in its Use
// middleware). On the top router's r.Use nothing is routed yet: Route then
// fails every request with an error wrapping keyfuncs.ErrMisconfigured (500),
// rather than put all routes in one counter. To key by the URL path there,
// use keyfuncs.Route(), knowing that every distinct path is then a key.
// (Chi also copies the pattern into r.Pattern when it routes, so after
// routing keyfuncs.Route() gives the same key as Route; before routing it
// falls back to the path silently, where Route fails.)
func Route(r *http.Request) (string, error) {
	if p := chi.RouteContext(r.Context()).RoutePattern(); p != "" {
		method := r.Method
		if method == "" {
			method = http.MethodGet
		}
		return method + " " + p, nil
	}
	return "", errNoPattern
}

var errNoPattern = fmt.Errorf("%w: ratekitchi.Route: no Chi route pattern yet; mount the middleware with r.With or in r.Group",
	keyfuncs.ErrMisconfigured)

// ClientIP is the key function of the client IP address that one of Chi's
// ClientIPFrom* middlewares (Chi v5.3 and later) stored in the request
// context, as middleware.GetClientIPAddr returns it, keyed like PeerIP: an
// IPv4 address, or the /64 prefix of an IPv6 address. Mount it after that
// middleware:
//
//	r.Use(middleware.ClientIPFromXFF("10.0.0.0/8"))
//	r.Use(ratekitchi.New(lim, ratekitchi.ClientIP))
//
// It is exactly as safe as that middleware's configuration.
// ClientIPFromXFF with your proxies' CIDR prefixes reads X-Forwarded-For
// only from them, walks it from the right and skips them; from any other
// peer the peer is the client. ClientIPFromRemoteAddr reads no header.
// ClientIPFromHeader without prefixes, and ClientIPFromXFFTrustedProxies,
// believe the header from whoever sends it: safe only when the network lets
// nothing but your proxies reach the server.
//
// When no such middleware stored an address (it was not mounted, or it
// failed closed on a header it could not parse), ClientIP returns an error
// wrapping keyfuncs.ErrMissing (400). PeerIP, or TrustedIP behind proxies,
// needs no other middleware and is the default to prefer.
//
// Chi's ClientIPFrom* middlewares decide whom to trust by r.RemoteAddr, so
// ClientIP, like PeerIP, refuses a request whose r.RemoteAddr a middleware
// such as middleware.RealIP rewrote to an address without a port (an error
// wrapping keyfuncs.ErrMisconfigured, 500).
func ClientIP(r *http.Request) (string, error) {
	if err := keyfuncs.CheckRemoteAddr(r.RemoteAddr); err != nil {
		return "", err
	}
	a := middleware.GetClientIPAddr(r.Context())
	if !a.IsValid() {
		return "", errNoClientIP
	}
	return peerKey.KeyAddr(a)
}

var (
	errNoClientIP = fmt.Errorf("ratekitchi: no client IP from Chi's ClientIPFrom* middleware: %w", keyfuncs.ErrMissing)
	peerKey, _    = keyfuncs.NewClientIP()
)

// PeerIP is the key function of the TCP peer address (r.RemoteAddr): an
// IPv4 address, or the /64 prefix of an IPv6 address. It never reads a
// header, so no client can choose its counter: the safe default. Behind a
// reverse proxy every client would share the proxy's address; there, use
// TrustedIP. It is keyfuncs.PeerIP, and so refuses a request whose
// r.RemoteAddr a middleware before it rewrote from a header, as
// middleware.RealIP does (see TrustedIP): 500, with an error wrapping
// keyfuncs.ErrMisconfigured.
func PeerIP(r *http.Request) (string, error) { return keyfuncs.PeerIP(r) }

// IP returns the key function of the client address as ratekit resolves
// it (keyfuncs.ClientIP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, whose proxy header (X-Forwarded-For unless
// keyfuncs.ProxyHeader says otherwise) is then walked from the right. It
// is keyfuncs.IP, and returns an error under the same conditions.
//
//	ip, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.IPv6Prefix(56))
func IP(opts ...keyfuncs.IPOption) (Key, error) { return keyfuncs.IP(opts...) }

// Header returns the key function of the named request header, such as an
// API key, with surrounding white space removed. An absent or blank header
// is an error wrapping keyfuncs.ErrMissing (400). It is keyfuncs.Header.
func Header(name string) Key { return keyfuncs.Header(name) }

// TrustedIP returns the key function of the client IP address behind the
// reverse proxies whose addresses or CIDR prefixes are given: IP with
// keyfuncs.TrustedProxies, the replacement for Chi's middleware.RealIP. It
// reads X-Forwarded-For only when the TCP peer is a trusted proxy, walks
// it from the right and skips trusted entries, so a client that writes its
// own header stays in its own counter. Without proxies, use PeerIP.
//
// Warning: Chi's middleware.RealIP (deprecated since Chi v5.3) copies
// True-Client-IP, X-Real-IP or the leftmost X-Forwarded-For entry into
// r.RemoteAddr whatever the peer, so that a client could escape its limit
// by changing the header on each request. It leaves an address without a
// port, which net/http never sets: PeerIP, IP, TrustedIP and ClientIP
// therefore fail such a request with an error wrapping
// keyfuncs.ErrMisconfigured (500) that says so, rather than key it by the
// forged address. Requests without those headers keep their port and pass,
// so the failure shows as soon as a proxy or a client sends one. The unsafe
// orderings are
//
//	r.Use(middleware.RealIP)          // rewrites r.RemoteAddr from headers
//	r.Use(ratekitchi.New(lim, key))   // any client-IP key: 500
//
// and RealIP before ClientIPFromXFF, which then trusts a forged peer. Drop
// RealIP (ClientIPFromXFF with your proxies is Chi's safe replacement, see
// ClientIP; TrustedIP is ratekit's), or mount ratekit's middleware before
// it.
//
// It returns an error if no proxy is given or an address or prefix is
// invalid.
func TrustedIP(proxies ...string) (Key, error) {
	if len(proxies) == 0 {
		return nil, errors.New("ratekitchi: TrustedIP needs the addresses of the trusted proxies; without proxies use PeerIP")
	}
	return keyfuncs.IP(keyfuncs.TrustedProxies(proxies...))
}

// User returns the key function of the user ID that the application's
// authentication middleware stored in the request context under ctxKey,
// with context.WithValue: a string, fmt.Stringer or integer. A request
// without one gets an error wrapping keyfuncs.ErrMissing (400); combine
// with keyfuncs.First to fall back to the client IP. It is keyfuncs.User,
// since Chi keeps per-request values in the request context.
func User(ctxKey any) Key { return keyfuncs.User(ctxKey) }
