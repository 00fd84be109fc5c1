package adapter

import (
	"net/http"
	"net/netip"

	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/internal/keyval"
	"github.com/ratekit/ratekit/keyfuncs"
)

// The names of this file are keyfuncs' logic over a framework's own
// request: an adapter's keys answer exactly as keyfuncs' do (the same
// keys, the same errors), whatever the framework keeps the request in.

// HeaderValues is the read-only view of request headers that a [ClientIP]
// reads: Values(name) returns all values of the named header, one per
// header line, in the order received, or nil if the header is absent. The
// name passed is in canonical form (see textproto.CanonicalMIMEHeaderKey).
//
// [http.Header] implements HeaderValues; an adapter implements it over its
// framework's header storage, with a pointer-shaped type so that it
// converts without allocating.
type HeaderValues = interface {
	Values(name string) []string
}

// ClientIP is the resolver behind keyfuncs.IP, for adapters whose
// framework keeps the peer address and headers elsewhere than in an
// [http.Request]: it finds the client that sent a request, by the rules
// keyfuncs.IP documents (the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, whose proxy header is then walked from the
// right), and turns it into its key (the IPv4 address, or the IPv6 prefix
// in CIDR notation). Create it with [NewClientIP]; the zero value is not
// usable. It is safe for concurrent use.
//
// A key that must be formatted (that of an IPv6 client, of an address
// given to KeyAddr, or of one from a header that is not canonical) is
// kept for recent clients, in a table of 1024 slots whatever the traffic,
// so that a hot client's key costs no allocation.
type ClientIP struct {
	c *clientip.ClientIP
}

// NewClientIP returns a ClientIP configured by opts, the options of
// keyfuncs.IP, for an adapter's IP (and, without options, its PeerIP). It
// returns the error of keyfuncs.IP for an invalid option.
func NewClientIP(opts ...keyfuncs.IPOption) (*ClientIP, error) {
	c, err := clientip.New(opts...)
	if err != nil {
		return nil, err
	}
	return &ClientIP{c}, nil
}

// Key returns the key of the client that sent r, as keyfuncs.IP's key
// function does: for an adapter whose framework hands over the
// *http.Request. It refuses an r.RemoteAddr without a port (see
// [CheckRemoteAddr]).
func (c *ClientIP) Key(r *http.Request) (string, error) { return c.c.Key(r) }

// KeyFrom returns the key of the client of a request from the peer
// remoteAddr, in the form of [http.Request.RemoteAddr] ("192.0.2.1:4711",
// "[2001:db8::1]:4711"), with the request headers h (nil for none; read
// only if the peer is a trusted proxy): Key for adapters whose framework
// keeps them elsewhere. It returns the same key for the same inputs, and
// also takes a peer address without a port, which Key refuses: an adapter
// may pass the address its framework resolved (the client, not
// necessarily the peer), once it has made sure that the framework reads no
// header from untrusted peers (see [ProbeClientIP]).
//
// If remoteAddr cannot be parsed, KeyFrom returns an error wrapping
// keyfuncs.ErrMissing. If the peer is an IPv4 client and needs no
// conversion, the key is a substring of remoteAddr and KeyFrom does not
// allocate.
func (c *ClientIP) KeyFrom(remoteAddr string, h HeaderValues) (string, error) {
	return c.c.KeyFrom(remoteAddr, h)
}

// KeyAddr returns the key of the client at address a, as Key returns it
// for a client at that address, after unmapping an IPv4-mapped address and
// removing the zone: for adapters whose framework gives the address as a
// [netip.Addr], or a net.IP (by [netip.AddrFromSlice]), rather than as
// text. a is taken to be the client, so neither the trusted proxies nor
// any header are consulted. If a is the zero Addr (not an IP address),
// KeyAddr returns an error wrapping keyfuncs.ErrMissing.
func (c *ClientIP) KeyAddr(a netip.Addr) (string, error) { return c.c.KeyAddr(a) }

// Resolve returns the address of the client, as KeyFrom finds it for the
// same inputs, unmapped, without zone and not masked: for an adapter that
// needs the address rather than its key. If remoteAddr cannot be parsed,
// as for a connection over a Unix domain socket, Resolve returns an error
// wrapping keyfuncs.ErrMissing.
func (c *ClientIP) Resolve(remoteAddr string, h HeaderValues) (netip.Addr, error) {
	return c.c.Resolve(remoteAddr, h)
}

// CheckRemoteAddr returns the error of keyfuncs.IP's key function (and of
// [ClientIP.Key]) for an http.Request.RemoteAddr that is an IP address
// without a port, as a middleware that rewrote it from a request header
// (Chi's middleware.RealIP) leaves it: an error wrapping
// keyfuncs.ErrMisconfigured (500) that names the cause and the remedy. For
// any other value, an address with a port or no address at all, it
// returns nil without allocating. It is for adapters whose framework
// resolves the client from r.RemoteAddr itself (Gin's c.ClientIP(),
// Echo's extractors, Chi's ClientIPFrom* middlewares).
func CheckRemoteAddr(remoteAddr string) error { return clientip.CheckRemoteAddr(remoteAddr) }

// ProbeClientIP checks an HTTP framework's own resolution of the client
// address, for adapters whose key is that address (Gin's c.ClientIP(),
// Fiber's c.IP()). Such a key is safe only if the framework reads no
// forwarding header from a peer that is not one of your proxies: otherwise
// every client chooses its own key, and a new one per request.
//
// resolve returns the client address, as text, that the framework finds
// for a request from peer with the header fields h. ProbeClientIP calls it
// for requests from 192.0.2.1:1234 and from [2001:db8::1]:1234, addresses
// reserved for documentation, which are no deployment's proxies. Each
// request carries a different forged address in each of X-Forwarded-For,
// X-Real-IP, Forwarded (as for=), True-Client-IP, CF-Connecting-IP and
// other common forwarding headers, and in each header named in extra (the
// names the framework is configured to read). If resolve returns the
// peer's address every time, ProbeClientIP returns nil. Otherwise it
// returns an error wrapping keyfuncs.ErrMisconfigured that names the
// header the framework believed (or, if it returned no forged value, the
// address it returned), to which the adapter adds the setting to change.
// A nil resolve is such an error too.
func ProbeClientIP(resolve func(peer netip.AddrPort, h http.Header) string, extra ...string) error {
	return clientip.ProbeClientIP(resolve, extra...)
}

// HeaderKey returns the function that turns the value of the named header
// into a key as keyfuncs.Header does, for adapters whose framework reads
// the header (its first value, or "" if it is absent) from its own request
// type. The key is the value with surrounding white space removed, and
// may share its memory. An empty or blank value gives the error wrapping
// keyfuncs.ErrMissing that keyfuncs.Header's Func returns, so that every
// adapter answers such a request with the same 400 body. An empty name
// gives a function that fails with keyfuncs.ErrMisconfigured.
func HeaderKey(name string) func(value string) (string, error) { return keyval.HeaderKey(name) }

// ValueKey returns the function that turns a value the application stored
// for a request into a key, by the rules of keyfuncs.ContextValue: for
// adapters whose framework keeps such values elsewhere than in the request
// context (Gin's and Echo's c.Get, Fiber's c.Locals). The value is passed
// as read, nil if it is absent.
//
// The value may be a string, a fmt.Stringer, any integer type, or any
// type whose underlying type is a string or integer type; integers are
// formatted in decimal, and a string key may share the value's memory. An
// absent or nil value (including a nil pointer, map, slice, function or
// channel), or one that gives a blank string, is an error wrapping
// keyfuncs.ErrMissing: "<what>: ratekit: request has no rate-limit key". A
// value of any other type is an error that does not wrap ErrMissing (500):
// "<what> has unsupported type T". what names the value in these errors,
// with the prefix of the package that reads it, as in
// `ratekitgin: c.Get("user")`.
func ValueKey(what string) func(v any) (string, error) { return keyval.ValueKey(what) }
