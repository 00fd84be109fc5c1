package ratekitecho5

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/internal/echoport"
	"github.com/ratekit/ratekit/keyfuncs"
)

// PeerIP is the key of the TCP peer address, keyfuncs.PeerIP (IPv6 clients
// by their /64): it reads no header, so no client can choose its bucket.
func PeerIP(c *echo.Context) (string, error) { return keyfuncs.PeerIP(c.Request()) }

// IP returns the key of the client address as keyfuncs.IP resolves it
// under opts, such as keyfuncs.TrustedProxies("10.0.0.0/8"). It ignores
// e.IPExtractor, and fails as keyfuncs.IP does.
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	f, err := keyfuncs.IP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *echo.Context) (string, error) { return f(c.Request()) }, nil
}

// ClientIP is the key of Echo's own client address, c.RealIP(), made
// canonical as PeerIP's; a value that is not an address wraps
// keyfuncs.ErrMissing (400). In Echo v5, c.RealIP() is the TCP peer unless
// e.IPExtractor says otherwise. On each Echo instance's first request
// ClientIP probes c.RealIP() with forged headers (adapter.ProbeClientIP)
// and, if it believes one, as echo.LegacyIPExtractor() does, fails every
// request with an error wrapping keyfuncs.ErrMisconfigured (500) that names
// e.IPExtractor: set it before serving, and leave it. A RemoteAddr without
// a port fails too (adapter.CheckRemoteAddr).
func ClientIP(c *echo.Context) (string, error) { return clientIP.Key(c, c.Echo()) }

// clientIP probes c.RealIP() on each Echo instance (Echo's default, no
// extractor, included); the instance is nil for a context made by
// echo.NewContext without one.
var clientIP = echoport.ClientIP[*echo.Context, *echo.Echo]{
	RealIP: func(e *echo.Echo, r *http.Request) string { return echo.NewContext(r, nil, e).RealIP() },
	Unsafe: func(err error) error {
		return fmt.Errorf("ratekitecho5: ClientIP: c.RealIP() under e.IPExtractor: %w; leave e.IPExtractor nil "+
			"or set echo.ExtractIPDirect() (the TCP peer), or behind proxies echo.ExtractIPFromXFFHeader with "+
			"trust options that list only your proxies (never echo.LegacyIPExtractor())", err)
	},
	Missing: func(ip string) error { return fmt.Errorf("ratekitecho5: ClientIP %q: %w", ip, keyfuncs.ErrMissing) },
}

// Header returns the key of the named request header: keyfuncs.Header.
func Header(name string) Key { return Adapt(keyfuncs.Header(name)) }

// Adapt returns the Key of a net/http key function, applied to
// c.Request(); a nil f fails with keyfuncs.ErrMisconfigured (500).
func Adapt(f keyfuncs.Func) Key {
	if f == nil {
		err := fmt.Errorf("%w: Adapt: nil key function", keyfuncs.ErrMisconfigured)
		return func(*echo.Context) (string, error) { return "", err }
	}
	return func(c *echo.Context) (string, error) { return f(c.Request()) }
}

// ContextValue returns the key of the value that the app's middleware
// stored with c.Set(key, v), converted as keyfuncs.ContextValue converts
// its value: an absent or blank value wraps keyfuncs.ErrMissing (400).
func ContextValue(key string) Key {
	toKey := adapter.ValueKey(fmt.Sprintf("ratekitecho5: c.Get(%q)", key))
	return func(c *echo.Context) (string, error) { return toKey(c.Get(key)) }
}

// User is ContextValue under a name that says so: the key of the user ID
// that the app's authentication middleware stored with c.Set(key, id).
func User(key string) Key { return ContextValue(key) }
