package ratekitecho

import (
	"fmt"
	"reflect"
	"strconv"
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
	ra := c.Request().RemoteAddr
	if k, ok := canonical4(ra); ok {
		return k, nil
	}
	return peer.KeyFrom(ra, nil)
}

// canonical4 is the fast path of PeerIP for the common peer address, an
// IPv4 address in canonical dotted-decimal form with a decimal port
// ("192.0.2.1:4711"): it returns the address, the substring that
// keyfuncs.ClientIP.KeyFrom returns for it, without parsing it into a
// netip.Addr and formatting it back. Anything else reports false, for
// KeyFrom to handle.
func canonical4(s string) (string, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < len("0.0.0.0") || i > len("255.255.255.255") || len(s)-i-1 < 1 || len(s)-i-1 > 5 {
		return "", false
	}
	for j := i + 1; j < len(s); j++ {
		if s[j] < '0' || s[j] > '9' {
			return "", false
		}
	}
	dots, n, digits := 0, 0, 0
	for j := 0; j < i; j++ {
		switch b := s[j]; {
		case b == '.':
			if digits == 0 {
				return "", false
			}
			dots, n, digits = dots+1, 0, 0
		case '0' <= b && b <= '9':
			if digits > 0 && n == 0 { // a leading zero
				return "", false
			}
			n = n*10 + int(b-'0')
			digits++
			if n > 255 {
				return "", false
			}
		default:
			return "", false
		}
	}
	if dots != 3 || digits == 0 {
		return "", false
	}
	return s[:i], true
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
// stored with c.Set(key, v). The value may be a string, a fmt.Stringer, or
// of any integer or string type; integers are written in decimal. An
// absent, nil or blank value is an error wrapping keyfuncs.ErrMissing
// (400); a value of another type is an error that does not (500).
func ContextValue(key string) Key {
	errMissing := fmt.Errorf("ratekitecho: c.Get(%q): %w", key, keyfuncs.ErrMissing)
	return func(c echo.Context) (string, error) {
		v := c.Get(key)
		s, ok := valueString(v)
		if !ok {
			return "", fmt.Errorf("ratekitecho: c.Get(%q) has unsupported type %T", key, v)
		}
		if strings.TrimSpace(s) == "" {
			return "", errMissing
		}
		return s, nil
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

// valueString converts a value of c.Get to a key; false if its type is
// not supported. Absent and nil values give "".
func valueString(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, true
	case fmt.Stringer:
		if rv := reflect.ValueOf(x); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", true
		}
		return x.String(), true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.String:
		return rv.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(rv.Uint(), 10), true
	case reflect.Pointer:
		return "", rv.IsNil()
	}
	return "", false
}
