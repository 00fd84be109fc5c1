package ratekitfiber

import (
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = keyfuncs.NewClientIP()

// PeerIP is the key of the TCP peer address: IPv4 clients by address,
// IPv6 clients by their /64. It never reads a header, so no client can
// choose its bucket: the safe default. Behind a reverse proxy every client
// would share the proxy's address; there, use IP with TrustedProxies.
func PeerIP(c *fiber.Ctx) (string, error) {
	if a, ok := c.Context().RemoteAddr().(*net.TCPAddr); ok {
		// The key of keyfuncs.PeerIP, without formatting the address only
		// to parse it again (TestPeerIPAsKeyfuncs).
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			if ip = ip.Unmap(); ip.Is4() {
				var buf [len("255.255.255.255")]byte
				return string(ip.AppendTo(buf[:0])), nil
			}
			p, _ := ip.Prefix(64) // cannot fail: ip is IPv6
			var buf [len("ffff:ffff:ffff:ffff::/64")]byte
			return string(p.AppendTo(buf[:0])), nil
		}
	}
	return peer.KeyFrom(remoteAddr(c), nil) // not an IP peer: an error wrapping keyfuncs.ErrMissing
}

// remoteAddr returns the peer's address as keyfuncs.ClientIP takes it, in
// one allocation (net.TCPAddr.String takes three).
func remoteAddr(c *fiber.Ctx) string {
	a, ok := c.Context().RemoteAddr().(*net.TCPAddr)
	if !ok {
		return c.Context().RemoteAddr().String() // not an IP peer: KeyFrom reports it
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return ""
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")]byte
	return string(ip.Unmap().AppendTo(buf[:0]))
}

// IP returns the key of the client address as ratekit resolves it (see
// keyfuncs.ClientIP): the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, in which case the proxy header is walked from
// the right, so that entries a client forged are never used. It returns an
// error under the same conditions as keyfuncs.NewClientIP.
//
//	ip, err := ratekitfiber.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	ci, err := keyfuncs.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *fiber.Ctx) (string, error) {
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

// FiberIP is the key of Fiber's own client address, c.IP(), made canonical
// as PeerIP's (IPv6 clients grouped by /64); a value that is not an
// address is an error wrapping keyfuncs.ErrMissing (400).
//
// It is safe only as far as the app's proxy settings are: without
// fiber.Config.ProxyHeader (the default), c.IP() is the TCP peer and
// FiberIP is PeerIP. With ProxyHeader, Fiber reads the header from every
// peer, so that any client picks its own bucket, unless
// EnableTrustedProxyCheck is on and TrustedProxies lists your proxies. It
// returns the header's raw text unless EnableIPValidation is set (a list
// or an absent header is then not an address: 400), and even then takes
// the leftmost X-Forwarded-For entry, which the client writes. Use it only
// with the trusted-proxy check on and a header your proxy overwrites
// (X-Real-IP); otherwise prefer IP(keyfuncs.TrustedProxies(...)), which
// walks X-Forwarded-For from the right.
func FiberIP(c *fiber.Ctx) (string, error) {
	ip := c.IP()
	if strings.IndexByte(ip, ':') >= 0 && strings.IndexByte(ip, '[') < 0 {
		ip = "[" + ip + "]" // a bare IPv6 address, not host:port
	}
	k, err := peer.KeyFrom(ip, nil)
	if err != nil {
		return "", err
	}
	return utils.CopyString(k), nil
}

// Header returns the key of the named request header (c.Get(name)), for
// example an API key, with surrounding white space removed and copied out
// of the request. An absent or blank header is an error wrapping
// keyfuncs.ErrMissing, with the text of keyfuncs.Header's, so that the
// 400 body is the same as under stdhttp. An empty name gives a Key that
// fails every request with keyfuncs.ErrMisconfigured (500).
func Header(name string) Key {
	if name == "" {
		err := fmt.Errorf("%w: Header: empty header name", keyfuncs.ErrMisconfigured)
		return func(*fiber.Ctx) (string, error) { return "", err }
	}
	errMissing := fmt.Errorf("keyfuncs: header %q: %w", textproto.CanonicalMIMEHeaderKey(name), keyfuncs.ErrMissing)
	return func(c *fiber.Ctx) (string, error) {
		if v := strings.TrimSpace(c.Get(name)); v != "" {
			return utils.CopyString(v), nil
		}
		return "", errMissing
	}
}

// Locals returns the key of the value that the app's authentication
// middleware stored with c.Locals(key, user), for a limit per user. The
// value may be a string, a fmt.Stringer, or of any integer type or type
// whose underlying type is a string or integer type, as for
// keyfuncs.ContextValue; strings are copied, since they may have been read
// from the request. An absent, nil (including a nil pointer) or blank
// value is an error wrapping keyfuncs.ErrMissing (400; wrap Locals in a
// Key of your own to fall back to the client IP instead); a value of
// another type is an error that does not (500). A nil key gives a Key that
// fails every request with keyfuncs.ErrMisconfigured (500).
func Locals(key any) Key {
	if key == nil {
		err := fmt.Errorf("%w: Locals: nil key", keyfuncs.ErrMisconfigured)
		return func(*fiber.Ctx) (string, error) { return "", err }
	}
	errMissing := fmt.Errorf("ratekitfiber: c.Locals(%#v): %w", key, keyfuncs.ErrMissing)
	return func(c *fiber.Ctx) (string, error) {
		v := c.Locals(key)
		s, ok := localString(v)
		if !ok {
			return "", fmt.Errorf("ratekitfiber: c.Locals(%#v) has unsupported type %T", key, v)
		}
		if strings.TrimSpace(s) == "" {
			return "", errMissing
		}
		return s, nil
	}
}

// localString converts a value of c.Locals to a key that owns its memory,
// with the rules of keyfuncs.ContextValue. It reports false if v has an
// unsupported type; absent and nil values yield "", true.
func localString(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return strings.Clone(x), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return "", true
		}
	}
	if s, ok := v.(fmt.Stringer); ok {
		return s.String(), true
	}
	switch rv.Kind() {
	case reflect.String:
		return strings.Clone(rv.String()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), true
	}
	return "", false
}
