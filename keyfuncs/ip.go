package keyfuncs

import (
	"net/http"

	"github.com/ratekit/ratekit/internal/clientip"
)

// IPOption configures the client-IP key of [IP]. Options are applied in
// order; invalid arguments are reported by IP (and by the other functions
// that take IPOptions: the adapters' IP, rules.WithClientIP).
type IPOption func(*clientip.Config)

// TrustedProxies adds the given proxies to the set of trusted proxies. Each
// argument is a CIDR prefix ("10.0.0.0/8", "2001:db8::/32") or a single
// address ("192.0.2.7", "::1"). Host bits of a prefix are ignored, zones are
// removed, and an IPv4-mapped IPv6 prefix of length 96 or more
// ("::ffff:10.0.0.0/104") is treated as the IPv4 prefix it maps. IPv6
// prefixes never match IPv4 addresses, and vice versa.
//
// Only proxies you operate, or whose forwarding headers you otherwise trust,
// belong in this set: a trusted peer can claim any client address. The
// option may be given more than once; the sets are merged.
func TrustedProxies(cidrs ...string) IPOption { return clientip.TrustedProxies(cidrs...) }

// IPv6Prefix sets the length in bits, 1 to 128, of the prefix that
// identifies an IPv6 client; the default is 64. All addresses in one prefix
// share a key, because a single subscriber usually controls a whole /64 (or
// larger) and could otherwise rotate through addresses to escape its limit.
// IPv4 addresses are never masked.
func IPv6Prefix(bits int) IPOption { return clientip.IPv6Prefix(bits) }

// ProxyHeader sets the request header from which the client address is
// taken when the peer is a trusted proxy. The default is "X-Forwarded-For".
// The name is case-insensitive.
//
//   - "X-Forwarded-For" is a comma-separated list of addresses, to which each
//     proxy appends the address of its own peer. All header lines are read, as
//     one list, in order.
//   - "Forwarded" (RFC 7239) is a comma-separated list of elements; the
//     address is the for= parameter of each element.
//   - Any other header, such as "X-Real-IP", "CF-Connecting-IP" or
//     "True-Client-IP", must hold exactly one address, set by the nearest
//     trusted proxy. If the header is absent, occurs on more than one line,
//     or does not hold a single address, the peer address is used.
//
// Addresses may carry a port ("192.0.2.1:4711", "[2001:db8::1]:4711"),
// double quotes, surrounding spaces and an IPv6 zone. Anything else that is
// not an IP address, such as "unknown" or an obfuscated RFC 7239 identifier
// ("_hidden"), is unparseable.
func ProxyHeader(name string) IPOption { return clientip.ProxyHeader(name) }

// IP returns a Func whose key is the IP address of the client that sent
// the request, configured by opts. Without options, it is [PeerIP]: the
// client is always the TCP peer, and IPv6 clients are keyed by their /64.
// Build it once, at start-up: it returns an error, naming the offending
// value, if a trusted proxy is not a valid address or CIDR prefix, if an
// IPv6 prefix length is outside 1 to 128, or if a proxy header name is
// empty or not a valid header name.
//
// The client is the TCP peer (the RemoteAddr of an [http.Request]) unless
// the peer is a trusted proxy (see [TrustedProxies]). Without trusted
// proxies, no header is ever read, so a client cannot influence its key by
// sending X-Forwarded-For, X-Real-IP, Forwarded or any other header.
//
// If the peer is trusted, the client is taken from the proxy header (see
// [ProxyHeader]). A list header is walked from the right, newest entry
// first, skipping entries that are themselves trusted proxies; the first
// untrusted address is the client. Entries to the left of it, which the
// client may have forged, are never looked at. If every entry is trusted,
// the leftmost is the client. If an entry cannot be parsed, the walk stops
// and the client is the last address walked: the trusted proxy that
// reported the bad entry, or the peer.
//
// Addresses are compared and keyed after unmapping IPv4-mapped IPv6
// addresses ("::ffff:192.0.2.1" is the client 192.0.2.1) and removing
// zones. The key of an IPv4 client is its address ("192.0.2.1"); the key of
// an IPv6 client is its prefix of the configured length (see [IPv6Prefix]),
// written in CIDR notation ("2001:db8:1:2::/64"). The key of an IPv4 peer
// costs no allocation; keys that must be formatted (IPv6 clients) are kept
// for recent clients in a table of bounded size, so that a hot client's
// key is free too.
//
// The net/http server always sets r.RemoteAddr of a TCP connection to
// "IP:port". An IP address without a port ("198.51.100.7") is what a
// middleware leaves there after replacing the peer with an address taken
// from a request header, such as Chi's middleware.RealIP or gorilla's
// handlers.ProxyHeaders: any client can send that header, and choose its
// own key. The Func therefore fails such a request with an error wrapping
// [ErrMisconfigured] (500) that says so. Remove that middleware, or mount
// the limiter before it; behind proxies, use IP with [TrustedProxies]
// (every adapter's IP), or Chi's middleware.ClientIPFromXFF with
// ratekitchi.ClientIP, none of which rewrites r.RemoteAddr. (A middleware
// that copies a forged value with a port, "198.51.100.7:1", cannot be told
// from a real peer: the check finds the common cases, not every one.)
//
// If r.RemoteAddr is not an IP address with optional port, as for
// connections over Unix domain sockets, the Func returns an error wrapping
// [ErrMissing].
func IP(opts ...IPOption) (Func, error) {
	c, err := clientip.New(opts...)
	if err != nil {
		return nil, err
	}
	return c.Key, nil
}

var peerIP = clientip.NewPeer()

// PeerIP is the key function of the TCP peer address with the default
// settings: no proxy header is ever read, IPv6 clients are grouped by /64.
// It is what IP returns without options, for use in one line:
//
//	handler := stdhttp.New(lim, keyfuncs.PeerIP)(mux)
//
// Behind a reverse proxy every client would share the proxy's address:
// there, use IP with TrustedProxies. Never mount PeerIP after a middleware
// that rewrites r.RemoteAddr from request headers, such as Chi's
// middleware.RealIP: the peer would then be whatever the client wrote.
// PeerIP refuses an r.RemoteAddr without a port, which is what such
// middleware leaves (an error wrapping ErrMisconfigured, 500; see [IP]).
func PeerIP(r *http.Request) (string, error) { return peerIP.Key(r) }
