package ratekitchi

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/keyfuncs"
)

// Route is the key function of the request's method and Chi route pattern,
// such as "GET /users/{id}": one counter per route (per client too with
// keyfuncs.Join(ratekitchi.Route, keyfuncs.PeerIP)), however many paths
// match it.
//
// Chi completes the pattern only while routing, so mount the middleware
// with r.With(...) or with Use inside r.Group, where the route is matched.
// Inside r.Route or a mounted sub-router, r.Use sees the pattern so far
// ("/api/*"). On the top router's r.Use nothing is routed yet: Route then
// fails every request with an error wrapping keyfuncs.ErrMisconfigured
// (500), rather than put all routes in one counter. To key by the URL path
// there, use keyfuncs.Route(), knowing that every distinct path is then a
// key.
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

// ClientIP is the key function of Chi's own client address: the one that
// one of Chi's ClientIPFrom* middlewares (Chi v5.3 and later) stored in the
// request context (middleware.GetClientIPAddr), made canonical as PeerIP's
// (IPv6 clients grouped by /64). Mount the limiter after that middleware:
//
//	r.Use(middleware.ClientIPFromXFF("10.0.0.0/8")) // your proxies
//	r.Use(ratekitchi.New(lim, ratekitchi.ClientIP))
//
// It is exactly as safe as that middleware's configuration:
// ClientIPFromXFF with your proxies' prefixes and ClientIPFromRemoteAddr
// are safe; ClientIPFromHeader without prefixes and
// ClientIPFromXFFTrustedProxies believe the header from whoever sends it.
// Without such a middleware (or when it failed closed), ClientIP is an
// error wrapping keyfuncs.ErrMissing (400). After middleware.RealIP, whose
// rewritten r.RemoteAddr those middlewares would trust, it is an error
// wrapping keyfuncs.ErrMisconfigured (500), as for PeerIP.
func ClientIP(r *http.Request) (string, error) {
	if err := adapter.CheckRemoteAddr(r.RemoteAddr); err != nil {
		return "", err
	}
	a := middleware.GetClientIPAddr(r.Context())
	if !a.IsValid() {
		return "", errNoClientIP
	}
	return peer.KeyAddr(a)
}

var (
	errNoClientIP = fmt.Errorf("ratekitchi: no client IP from Chi's ClientIPFrom* middleware: %w", keyfuncs.ErrMissing)
	peer, _       = adapter.NewClientIP()
)

// PeerIP is the key function of the TCP peer address (r.RemoteAddr): IPv4
// clients by address, IPv6 clients by their /64. It never reads a header,
// so no client can choose its counter: the safe default. Behind a reverse
// proxy every client would share the proxy's address; there, use IP with
// keyfuncs.TrustedProxies. It is keyfuncs.PeerIP: after middleware.RealIP
// it is an error wrapping keyfuncs.ErrMisconfigured (500).
func PeerIP(r *http.Request) (string, error) { return keyfuncs.PeerIP(r) }

// IP returns the key function of the client address as ratekit resolves
// it (see keyfuncs.IP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, in which case the proxy header (X-Forwarded-For
// unless keyfuncs.ProxyHeader says otherwise) is walked from the right, so
// that entries a client forged are never used. It is keyfuncs.IP, Chi's
// middleware.RealIP done safely, and returns an error under the same
// conditions; like PeerIP, it refuses a request after RealIP (500).
//
//	ip, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) { return keyfuncs.IP(opts...) }

// Header returns the key function of the named request header, such as an
// API key, with surrounding white space removed. An absent or blank header
// is an error wrapping keyfuncs.ErrMissing (400). It is keyfuncs.Header.
func Header(name string) Key { return keyfuncs.Header(name) }

// User returns the key function of the user ID that the app's
// authentication middleware stored in the request context under ctxKey
// (context.WithValue): keyfuncs.User. A request without one is an error
// wrapping keyfuncs.ErrMissing (400); keyfuncs.First falls back to PeerIP.
func User(ctxKey any) Key { return keyfuncs.User(ctxKey) }
