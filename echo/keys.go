package ratekitecho

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/internal/echoport"
	"github.com/ratekit/ratekit/keyfuncs"
)

// PeerIP is the key of the TCP peer address, keyfuncs.PeerIP (IPv6 clients
// by their /64): it reads no header, so no client can choose its bucket.
func PeerIP(c echo.Context) (string, error) { return keyfuncs.PeerIP(c.Request()) }

// IP returns the key of the client address as keyfuncs.IP resolves it
// under opts, such as keyfuncs.TrustedProxies("10.0.0.0/8"). It ignores
// e.IPExtractor, and fails as keyfuncs.IP does.
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	f, err := keyfuncs.IP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c echo.Context) (string, error) { return f(c.Request()) }, nil
}

// ClientIP is the key of Echo's own client address, c.RealIP(), made
// canonical as PeerIP's; a value that is not an address wraps
// keyfuncs.ErrMissing (400). Without e.IPExtractor, c.RealIP() is the
// leftmost X-Forwarded-For entry that any client writes, so ClientIP then
// fails every request with an error wrapping keyfuncs.ErrMisconfigured
// (500) that names the setting. On each Echo instance's first request it
// also probes the extractor with forged headers
// (adapter.ProbeClientIP), and fails the same way if it believes one: set
// echo.ExtractIPDirect(), or an extractor that trusts only your proxies,
// before serving. A RemoteAddr without a port fails too
// (adapter.CheckRemoteAddr).
func ClientIP(c echo.Context) (string, error) {
	e := c.Echo()
	if e == nil || e.IPExtractor == nil {
		return "", errNoExtractor
	}
	return clientIP.Key(c, e)
}

var errNoExtractor = fmt.Errorf("ratekitecho: ClientIP: %w: e.IPExtractor is nil, so c.RealIP() takes the leftmost "+
	"X-Forwarded-For (or X-Real-IP) that any client writes; set e.IPExtractor = echo.ExtractIPDirect() without proxies, "+
	"or echo.ExtractIPFromXFFHeader(echo.TrustIPRange(<your proxies>)) behind them", keyfuncs.ErrMisconfigured)

// clientIP probes the IPExtractor of each Echo instance.
var clientIP = echoport.ClientIP[echo.Context, *echo.Echo]{
	RealIP: func(e *echo.Echo, r *http.Request) string { return e.IPExtractor(r) },
	Unsafe: func(err error) error {
		return fmt.Errorf("ratekitecho: ClientIP: %w; give e.IPExtractor trust options that list only your proxies", err)
	},
	Missing: func(ip string) error { return fmt.Errorf("ratekitecho: ClientIP %q: %w", ip, keyfuncs.ErrMissing) },
}

// Header returns the key of the named request header: keyfuncs.Header.
func Header(name string) Key { return Adapt(keyfuncs.Header(name)) }

// Adapt returns the Key of a net/http key function, applied to
// c.Request(); a nil f fails with keyfuncs.ErrMisconfigured (500).
func Adapt(f keyfuncs.Func) Key {
	if f == nil {
		err := fmt.Errorf("%w: Adapt: nil key function", keyfuncs.ErrMisconfigured)
		return func(echo.Context) (string, error) { return "", err }
	}
	return func(c echo.Context) (string, error) { return f(c.Request()) }
}

// ContextValue returns the key of the value that the app's middleware
// stored with c.Set(key, v), converted as keyfuncs.ContextValue converts
// its value: an absent or blank value wraps keyfuncs.ErrMissing (400).
func ContextValue(key string) Key {
	toKey := adapter.ValueKey(fmt.Sprintf("ratekitecho: c.Get(%q)", key))
	return func(c echo.Context) (string, error) { return toKey(c.Get(key)) }
}

// User is ContextValue under a name that says so: the key of the user ID
// that the app's authentication middleware stored with c.Set(key, id).
func User(key string) Key { return ContextValue(key) }
