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

// ClientIP returns the key of Echo's own client address on the instance
// e, c.RealIP() as e.IPExtractor finds it (the TCP peer when it is nil,
// Echo v5's default), made canonical as PeerIP's; a value that is not an
// address wraps keyfuncs.ErrMissing (400), and a RemoteAddr without a port
// fails as adapter.CheckRemoteAddr says (500).
//
// ClientIP returns an error wrapping keyfuncs.ErrMisconfigured, naming
// e.IPExtractor, if e is nil or if its extractor believes a forged header
// from a peer that is no proxy (adapter.ProbeClientIP), as
// echo.LegacyIPExtractor() does:
//
//	e := echo.New() // no extractor: the TCP peer
//	ip, err := ratekitecho5.ClientIP(e)
//
// The extractor stays checked for the life of e: on the first request
// after e.IPExtractor is replaced, the new one is checked as above (a
// comparison per request, without allocating). A safe extractor is
// followed. One that would let a client choose its address is not
// honoured: until e.IPExtractor is safe again the key is PeerIP's, the TCP
// peer, so that the limit holds whatever the error handler does, and
// slog.Default() receives one error line when such an episode starts and
// one, with the count of requests keyed by the peer, when it ends.
func ClientIP(e *echo.Echo) (Key, error) {
	if e == nil {
		return nil, fmt.Errorf("ratekitecho5: ClientIP: %w: nil Echo instance", keyfuncs.ErrMisconfigured)
	}
	ci := &echoport.ClientIP{
		Package:   "ratekitecho5",
		Extractor: func() func(*http.Request) string { return e.IPExtractor },
		Default:   echo.ExtractIPDirect(), // c.RealIP() without an extractor
		Unsafe: func(err error) error {
			return fmt.Errorf("ratekitecho5: ClientIP: c.RealIP() under e.IPExtractor: %w; leave e.IPExtractor nil "+
				"or set echo.ExtractIPDirect() (the TCP peer), or behind proxies echo.ExtractIPFromXFFHeader with "+
				"trust options that list only your proxies (never echo.LegacyIPExtractor())", err)
		},
		Missing: func(ip string) error { return fmt.Errorf("ratekitecho5: ClientIP %q: %w", ip, keyfuncs.ErrMissing) },
	}
	if err := ci.Check(); err != nil {
		return nil, err
	}
	return func(c *echo.Context) (string, error) { return ci.Key(c.Request()) }, nil
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
