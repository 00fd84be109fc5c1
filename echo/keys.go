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

// ClientIP returns the key of Echo's own client address on the instance
// e, c.RealIP() as e.IPExtractor finds it, made canonical as PeerIP's; a
// value that is not an address wraps keyfuncs.ErrMissing (400), and a
// RemoteAddr without a port fails as adapter.CheckRemoteAddr says (500).
//
// Without e.IPExtractor, c.RealIP() is the leftmost X-Forwarded-For entry
// that any client writes. ClientIP therefore returns an error wrapping
// keyfuncs.ErrMisconfigured, naming the setting, if e is nil, if
// e.IPExtractor is nil, or if the extractor believes a forged header from
// a peer that is no proxy (adapter.ProbeClientIP). Set the extractor
// first:
//
//	e := echo.New()
//	e.IPExtractor = echo.ExtractIPDirect() // or ExtractIPFromXFFHeader(echo.TrustIPRange(<your proxies>))
//	ip, err := ratekitecho.ClientIP(e)
//
// The extractor stays checked for the life of e: on the first request
// after e.IPExtractor is replaced, the new one is checked as above (a
// comparison per request, without allocating). A safe extractor is
// followed. One that would let a client choose its address, or none, is
// not honoured: until e.IPExtractor is safe again the key is PeerIP's, the
// TCP peer, so that the limit holds whatever the error handler does, and
// slog.Default() receives one error line when such an episode starts and
// one, with the count of requests keyed by the peer, when it ends.
func ClientIP(e *echo.Echo) (Key, error) {
	if e == nil {
		return nil, fmt.Errorf("ratekitecho: ClientIP: %w: nil Echo instance", keyfuncs.ErrMisconfigured)
	}
	ci := &echoport.ClientIP{
		Package:     "ratekitecho",
		Extractor:   func() func(*http.Request) string { return e.IPExtractor },
		NoExtractor: errNoExtractor,
		Unsafe: func(err error) error {
			return fmt.Errorf("ratekitecho: ClientIP: %w; give e.IPExtractor trust options that list only your proxies", err)
		},
		Missing: func(ip string) error { return fmt.Errorf("ratekitecho: ClientIP %q: %w", ip, keyfuncs.ErrMissing) },
	}
	if err := ci.Check(); err != nil {
		return nil, err
	}
	return func(c echo.Context) (string, error) { return ci.Key(c.Request()) }, nil
}

var errNoExtractor = fmt.Errorf("ratekitecho: ClientIP: %w: e.IPExtractor is nil, so c.RealIP() takes the leftmost "+
	"X-Forwarded-For (or X-Real-IP) that any client writes; set e.IPExtractor = echo.ExtractIPDirect() without proxies, "+
	"or echo.ExtractIPFromXFFHeader(echo.TrustIPRange(<your proxies>)) behind them, before ClientIP", keyfuncs.ErrMisconfigured)

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
