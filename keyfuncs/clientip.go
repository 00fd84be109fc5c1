package keyfuncs

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// HeaderValues is the read-only view of request headers that [ClientIP]
// needs. Values returns all values of the named header, one per header line,
// in the order received, or nil if the header is absent. The name passed is
// in canonical form (see [textproto.CanonicalMIMEHeaderKey]).
//
// [http.Header] implements HeaderValues; adapters for other HTTP frameworks
// implement it over their own header storage.
type HeaderValues interface {
	Values(name string) []string
}

// IPOption configures a [ClientIP]. Options are applied in order by
// [NewClientIP] and [IP]; invalid arguments are reported by those functions.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted []netip.Prefix
	v6bits  int
	header  string
	err     error
}

func (c *ipConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

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
func TrustedProxies(cidrs ...string) IPOption {
	var prefixes []netip.Prefix
	var err error
	for _, s := range cidrs {
		p, perr := parseTrusted(s)
		if perr != nil {
			err = perr
			break
		}
		prefixes = append(prefixes, p)
	}
	return func(c *ipConfig) {
		if err != nil {
			c.fail(err)
			return
		}
		c.trusted = append(c.trusted, prefixes...)
	}
}

func parseTrusted(s string) (netip.Prefix, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return netip.Prefix{}, fmt.Errorf("keyfuncs: trusted proxy %q: empty address", s)
	}
	if strings.Contains(t, "/") {
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("keyfuncs: trusted proxy %q: invalid CIDR prefix: %w", s, err)
		}
		a, bits := p.Addr(), p.Bits()
		if a.Is4In6() && bits >= 96 {
			a, bits = a.Unmap(), bits-96
		}
		p, _ = a.Prefix(bits) // cannot fail: bits is in range for a
		return p, nil
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("keyfuncs: trusted proxy %q: invalid IP address: %w", s, err)
	}
	a = a.WithZone("").Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// IPv6Prefix sets the length in bits, 1 to 128, of the prefix that
// identifies an IPv6 client; the default is 64. All addresses in one prefix
// share a key, because a single subscriber usually controls a whole /64 (or
// larger) and could otherwise rotate through addresses to escape its limit.
// IPv4 addresses are never masked.
func IPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) {
		if bits < 1 || bits > 128 {
			c.fail(fmt.Errorf("keyfuncs: IPv6Prefix(%d): prefix length must be between 1 and 128", bits))
			return
		}
		c.v6bits = bits
	}
}

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
func ProxyHeader(name string) IPOption {
	return func(c *ipConfig) {
		if !validHeaderName(name) {
			c.fail(fmt.Errorf("keyfuncs: ProxyHeader(%q): invalid header name", name))
			return
		}
		c.header = textproto.CanonicalMIMEHeaderKey(name)
	}
}

// validHeaderName reports whether name is a non-empty RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

type headerKind uint8

const (
	headerList      headerKind = iota // X-Forwarded-For
	headerForwarded                   // RFC 7239 Forwarded
	headerSingle                      // X-Real-IP and the like
)

// ClientIP determines the IP address of the client that sent a request and
// turns it into a rate-limit key. Create it with [NewClientIP]; the zero
// value is not usable. A ClientIP is immutable and safe for concurrent use.
//
// The client is the TCP peer (the RemoteAddr of an [http.Request]) unless the
// peer is a trusted proxy (see [TrustedProxies]). Without trusted proxies,
// no header is ever read, so a client cannot influence its key by sending
// X-Forwarded-For, X-Real-IP, Forwarded or any other header.
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
// written in CIDR notation ("2001:db8:1:2::/64").
type ClientIP struct {
	trusted4 []netip.Prefix
	trusted6 []netip.Prefix
	v6bits   int
	header   string
	kind     headerKind
	fast4    bool // no IPv4 address is trusted: KeyFrom may take canonical4
}

// NewClientIP returns a ClientIP configured by opts. Without options, the
// client is always the TCP peer and IPv6 clients are keyed by their /64.
//
// It returns an error, naming the offending value, if a trusted proxy is not
// a valid address or CIDR prefix, if an IPv6 prefix length is outside 1 to
// 128, or if a proxy header name is empty or not a valid header name.
func NewClientIP(opts ...IPOption) (*ClientIP, error) {
	cfg := ipConfig{v6bits: 64, header: "X-Forwarded-For"}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	c := &ClientIP{v6bits: cfg.v6bits, header: cfg.header}
	for _, p := range cfg.trusted {
		if p.Addr().Is4() {
			c.trusted4 = append(c.trusted4, p)
		} else {
			c.trusted6 = append(c.trusted6, p)
		}
	}
	c.fast4 = len(c.trusted4) == 0
	switch c.header {
	case "X-Forwarded-For":
		c.kind = headerList
	case "Forwarded":
		c.kind = headerForwarded
	default:
		c.kind = headerSingle
	}
	return c, nil
}

// IP returns the Key method of a new ClientIP configured by opts. It returns
// an error under the same conditions as [NewClientIP].
func IP(opts ...IPOption) (Func, error) {
	c, err := NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return c.Key, nil
}

// Key returns the rate-limit key of the client that sent r: the client's
// IPv4 address, or its IPv6 prefix in CIDR notation. It has the signature of
// a [Func]. It is KeyFrom(r.RemoteAddr, r.Header).
//
// If r.RemoteAddr is not an IP address with optional port, as for
// connections over Unix domain sockets, Key returns an error wrapping
// [ErrMissing].
func (c *ClientIP) Key(r *http.Request) (string, error) {
	return c.KeyFrom(r.RemoteAddr, r.Header)
}

// KeyFrom is like [ClientIP.Key] but takes the peer address and the request
// headers directly, for adapters to HTTP frameworks other than net/http. It
// returns the same key for the same inputs.
//
// If remoteAddr cannot be parsed, KeyFrom returns an error wrapping
// [ErrMissing]. If the peer is an IPv4 client and needs no conversion, the
// key is a substring of remoteAddr and KeyFrom does not allocate.
func (c *ClientIP) KeyFrom(remoteAddr string, h HeaderValues) (string, error) {
	if c.fast4 {
		// The key of an IPv4 peer is its address, whatever the headers:
		// skip parsing it into a netip.Addr only to format it back.
		if k, ok := canonical4(remoteAddr); ok {
			return k, nil
		}
	}
	a, text, err := c.resolve(remoteAddr, h)
	if err != nil {
		return "", err
	}
	if a.Is4() && isCanonical4(a, text) {
		return text, nil
	}
	return c.key(a), nil
}

// KeyAddr returns the key of the client at address a, as [ClientIP.Key]
// returns it for a client at that address: the IPv4 address, or the IPv6
// prefix of the configured length (see [IPv6Prefix]) in CIDR notation,
// after unmapping an IPv4-mapped address and removing the zone. It is for
// adapters whose framework gives the address as a [netip.Addr] or a
// net.IP (by [netip.AddrFromSlice]) rather than as text: a is taken to be
// the client, so neither the trusted proxies nor any header are consulted.
//
// If a is the zero Addr (not an IP address), KeyAddr returns an error
// wrapping [ErrMissing].
func (c *ClientIP) KeyAddr(a netip.Addr) (string, error) {
	if !a.IsValid() {
		return "", errInvalidAddr
	}
	return c.key(a.WithZone("").Unmap()), nil
}

var errInvalidAddr = fmt.Errorf("keyfuncs: client address is not an IP address: %w", ErrMissing)

// key returns the key of the client a, which is unmapped and has no zone.
func (c *ClientIP) key(a netip.Addr) string {
	if a.Is4() {
		var buf [len("255.255.255.255")]byte
		return string(a.AppendTo(buf[:0]))
	}
	p, _ := a.Prefix(c.v6bits) // cannot fail: a is IPv6, v6bits in 1..128
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	return string(p.AppendTo(buf[:0]))
}

// canonical4 is the fast path of KeyFrom for the most common peer address:
// an IPv4 address in canonical dotted-decimal form with a decimal port
// ("192.0.2.1:4711"). It returns the address, the substring that the full
// parse would return as the key, without parsing it into a netip.Addr and
// formatting it back. Anything else (no port, an obfuscated port, leading
// zeros, a zone, IPv6) reports false, for the full parse to handle.
func canonical4(s string) (string, bool) {
	if len(s) > len("255.255.255.255:65535") || len(s) == 0 || s[0] == '[' {
		return "", false // not an IPv4 address and port; IPv6 peers are bracketed
	}
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

// Resolve returns the address of the client, given the peer address in the
// form of [http.Request.RemoteAddr] ("192.0.2.1:4711", "[2001:db8::1]:4711",
// or an address without port) and the request headers. The returned address
// is unmapped, has no zone and is not masked. h may be nil if no headers are
// available; headers are read only if the peer is a trusted proxy.
//
// If remoteAddr cannot be parsed, Resolve returns an error wrapping
// [ErrMissing]. This happens, for example, for connections over Unix domain
// sockets.
func (c *ClientIP) Resolve(remoteAddr string, h HeaderValues) (netip.Addr, error) {
	a, _, err := c.resolve(remoteAddr, h)
	return a, err
}

// isCanonical4 reports whether text is the canonical dotted-decimal form of
// the IPv4 address a.
func isCanonical4(a netip.Addr, text string) bool {
	if len(text) > len("255.255.255.255") {
		return false
	}
	var buf [len("255.255.255.255")]byte
	return string(a.AppendTo(buf[:0])) == text
}

// resolve implements Resolve. It also returns the text from which the client
// address was parsed, so that KeyFrom can return it without allocating when
// it is already canonical.
func (c *ClientIP) resolve(remoteAddr string, h HeaderValues) (netip.Addr, string, error) {
	peer, peerText, ok := parseAddr(remoteAddr, false)
	if !ok {
		return netip.Addr{}, "", fmt.Errorf("keyfuncs: peer address %q: %w", remoteAddr, ErrMissing)
	}
	if h == nil || !c.trustedAddr(peer) {
		return peer, peerText, nil
	}
	vals := h.Values(c.header)
	if c.kind == headerSingle {
		if len(vals) != 1 {
			return peer, peerText, nil
		}
		if a, text, ok := parseAddr(trimOWS(vals[0]), true); ok {
			return a, text, nil
		}
		return peer, peerText, nil
	}

	// Walk the list from the right: header lines last to first, entries
	// within a line last to first.
	last, lastText := peer, peerText
	for i := len(vals) - 1; i >= 0; i-- {
		rest := vals[i]
		for {
			var sep int
			if c.kind == headerForwarded {
				sep = lastElementSep(rest)
			} else {
				sep = strings.LastIndexByte(rest, ',')
			}
			if entry := trimOWS(rest[sep+1:]); entry != "" {
				ok := true
				if c.kind == headerForwarded {
					entry, ok = forwardedFor(entry)
				}
				var a netip.Addr
				var text string
				if ok {
					a, text, ok = parseAddr(entry, true)
				}
				if !ok {
					return last, lastText, nil
				}
				if !c.trustedAddr(a) {
					return a, text, nil
				}
				last, lastText = a, text
			}
			if sep < 0 {
				break
			}
			rest = rest[:sep]
		}
	}
	return last, lastText, nil
}

// trustedAddr reports whether a, which is unmapped and has no zone, is in a
// trusted proxy prefix.
func (c *ClientIP) trustedAddr(a netip.Addr) bool {
	ps := c.trusted6
	if a.Is4() {
		ps = c.trusted4
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseAddr parses an address with optional port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:80",
// optionally with a zone, and, if quoted is set, optionally enclosed in
// double quotes. It returns the address unmapped and without zone, and the
// text of the address proper.
func parseAddr(s string, quoted bool) (netip.Addr, string, bool) {
	if quoted && len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = trimOWS(s[1 : len(s)-1])
	}
	host := s
	if len(s) > 0 && s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, "", false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:])) {
			return netip.Addr{}, "", false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: IPv4 address and port. (An IPv6 address
		// has at least two colons.)
		if !validPort(s[i+1:]) {
			return netip.Addr{}, "", false
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	return a.WithZone("").Unmap(), host, true
}

// validPort reports whether p is a decimal port or an obfuscated RFC 7239
// port ("_" followed by letters, digits, ".", "_" or "-").
func validPort(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	if len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// trimOWS removes leading and trailing spaces and horizontal tabs.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// lastElementSep returns the index of the last comma in s that is not inside
// a quoted string, or -1. It scans from the right; a double quote inside a
// quoted string is escaped if an odd number of backslashes precedes it.
func lastElementSep(s string) int {
	inQuote := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			n := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if inQuote && n%2 == 1 {
				i -= n // escaped quote; skip it and its backslashes
				continue
			}
			inQuote = !inQuote
		case ',':
			if !inQuote {
				return i
			}
		}
	}
	return -1
}

// forwardedFor returns the value of the for parameter of one RFC 7239
// forwarded-element (pairs separated by semicolons), with quotes removed. It
// reports false if the element is malformed, has no for parameter or more
// than one, or if the value contains an escape, which no IP address needs.
func forwardedFor(elem string) (string, bool) {
	var val string
	found := false
	s := elem
	for {
		s = trimOWS(s)
		if s == "" {
			break
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "", false
		}
		name := trimOWS(s[:eq])
		if !validHeaderName(name) {
			return "", false
		}
		s = trimOWS(s[eq+1:])
		var v string
		escaped := false
		if len(s) > 0 && s[0] == '"' {
			j := 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					escaped = true
					j++
				}
			}
			if j >= len(s) {
				return "", false // unterminated quoted string
			}
			v, s = s[1:j], s[j+1:]
		} else {
			j := strings.IndexByte(s, ';')
			if j < 0 {
				j = len(s)
			}
			v, s = trimOWS(s[:j]), s[j:]
		}
		if strings.EqualFold(name, "for") {
			if found || escaped {
				return "", false
			}
			val, found = v, true
		}
		s = trimOWS(s)
		if s == "" {
			break
		}
		if s[0] != ';' {
			return "", false
		}
		s = s[1:]
	}
	return val, found
}

var peerIP, _ = NewClientIP()

// PeerIP is the key function of the TCP peer address with the default
// settings: no proxy header is ever read, IPv6 clients are grouped by /64.
// It is what IP returns without options, for use in one line:
//
//	handler := stdhttp.New(lim, keyfuncs.PeerIP)(mux)
//
// Behind a reverse proxy every client would share the proxy's address:
// there, use IP with TrustedProxies.
func PeerIP(r *http.Request) (string, error) { return peerIP.Key(r) }
