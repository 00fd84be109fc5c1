package keyfuncs

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
// value is not usable. Its configuration is immutable, and it is safe for
// concurrent use.
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
//
// A key that is not a substring of the request's text (the key of an IPv6
// client, of a client given as a [netip.Addr] to [ClientIP.KeyAddr], as
// Fiber's adapters do, or of an address from a header that is not in
// canonical form) is formatted into a new string. A ClientIP keeps such
// keys of recent clients in a table of 1024 slots, by address (by prefix
// for IPv6, so the hosts of one prefix share a slot): a key is kept when
// its address misses its slot twice with no other address missing that
// slot in between, so a hot client's key costs no
// allocation, a flood of new addresses keeps nothing, and memory stays
// bounded whatever the traffic. Clients that share a slot and alternate
// are formatted anew, as without the table.
type ClientIP struct {
	trusted4 []netip.Prefix
	trusted6 []netip.Prefix
	v6bits   int
	header   string
	kind     headerKind
	fast4    bool // no IPv4 address is trusted: KeyFrom may take canonical4
	keys     atomic.Pointer[keyCache]
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
// an error under the same conditions as [NewClientIP]. Like Key, the
// function it returns fails a request whose r.RemoteAddr a middleware
// rewrote to an address without a port (500; see [ClientIP.Key]).
func IP(opts ...IPOption) (Func, error) {
	c, err := NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return c.Key, nil
}

// Key returns the rate-limit key of the client that sent r: the client's
// IPv4 address, or its IPv6 prefix in CIDR notation. It has the signature of
// a [Func]. It is KeyFrom(r.RemoteAddr, r.Header), except for one check.
//
// The net/http server always sets r.RemoteAddr of a TCP connection to
// "IP:port". An IP address without a port ("198.51.100.7") is what a
// middleware leaves there after replacing the peer with an address taken
// from a request header, such as Chi's middleware.RealIP or gorilla's
// handlers.ProxyHeaders: any client can send that header, and choose its
// own key. Key therefore fails such a request with an error wrapping
// [ErrMisconfigured] (500) that says so. Remove that middleware, or mount
// the limiter before it; behind proxies, use [IP] with [TrustedProxies]
// (every adapter's IP), or Chi's middleware.ClientIPFromXFF with
// ratekitchi.ClientIP, none of which rewrites r.RemoteAddr. (A middleware
// that copies a forged value with a port, "198.51.100.7:1", cannot be told
// from a real peer: the check finds the common cases, not every one.) A
// server that itself sets r.RemoteAddr without a port, from a source no
// client controls, can call [ClientIP.KeyFrom], which does not check.
//
// If r.RemoteAddr is not an IP address with optional port, as for
// connections over Unix domain sockets, Key returns an error wrapping
// [ErrMissing].
func (c *ClientIP) Key(r *http.Request) (string, error) {
	if c.fast4 {
		// A canonical IPv4 peer has a port: the check would pass.
		if k, ok := canonical4(r.RemoteAddr); ok {
			return k, nil
		}
	}
	if err := CheckRemoteAddr(r.RemoteAddr); err != nil {
		return "", err
	}
	return c.KeyFrom(r.RemoteAddr, r.Header)
}

// CheckRemoteAddr returns the error of [ClientIP.Key] for an
// http.Request.RemoteAddr that is an IP address without a port, as a
// middleware that rewrote it from a request header leaves it: an error
// wrapping [ErrMisconfigured] that names the cause and the remedy. For any
// other value, an address with a port or no address at all, it returns nil
// without allocating. It is for adapters whose framework resolves the
// client from r.RemoteAddr itself (Gin's c.ClientIP(), Echo's
// extractors, Chi's ClientIPFrom* middlewares).
func CheckRemoteAddr(remoteAddr string) error {
	if !hasPort(remoteAddr) {
		if _, _, ok := parseAddr(remoteAddr, false); ok {
			return rewrittenPeer(remoteAddr)
		}
	}
	return nil
}

// hasPort reports whether the peer address s, as in http.Request.RemoteAddr,
// has a port: "[IPv6]:port" or "IPv4:port" (exactly one colon).
func hasPort(s string) bool {
	if len(s) > 0 && s[0] == '[' {
		return strings.Contains(s, "]:")
	}
	i := strings.IndexByte(s, ':')
	return i >= 0 && strings.IndexByte(s[i+1:], ':') < 0
}

// rewrittenPeer is the error of Key for a RemoteAddr that is an IP address
// without a port.
func rewrittenPeer(remoteAddr string) error {
	return misconfigured("r.RemoteAddr is %q, an address without a port, which net/http never sets: "+
		"a middleware before the limiter (Chi's middleware.RealIP, gorilla's handlers.ProxyHeaders) "+
		"replaced the TCP peer with an address from a request header that any client can send; "+
		"remove that middleware or mount the limiter before it, and behind proxies key with "+
		"keyfuncs.IP(keyfuncs.TrustedProxies(...)) (every adapter's IP) "+
		"or with ratekitchi.ClientIP after Chi's middleware.ClientIPFromXFF", remoteAddr)
}

// KeyFrom is like [ClientIP.Key] but takes the peer address and the request
// headers directly, for adapters to HTTP frameworks other than net/http. It
// returns the same key for the same inputs, and also takes a peer address
// without a port, which Key refuses: an adapter may pass the address its
// framework resolved (the client, not necessarily the peer), once it has
// made sure that the framework reads no header from untrusted peers (see
// [ProbeClientIP]).
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
// A hot client's key costs no allocation (see [ClientIP]).
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

// key returns the key of the client a, which is unmapped and has no zone:
// the one kept for a recent client, or a new one. The clients of one IPv6
// prefix share a key, and so its slot: a client that changes its address
// within its prefix finds its key kept.
func (c *ClientIP) key(a netip.Addr) string {
	if a.Is6() {
		p, _ := a.Prefix(c.v6bits) // cannot fail: a is IPv6, v6bits in 1..128
		a = p.Addr()
	}
	kc := c.keys.Load()
	if kc == nil {
		kc = new(keyCache)
		if !c.keys.CompareAndSwap(nil, kc) {
			kc = c.keys.Load()
		}
	}
	k, s, h := kc.lookup(a)
	if k == "" {
		k = c.format(a)
		s.keep(a, h, k)
	}
	return k
}

// format returns the key of the client a, which is unmapped and has no
// zone and, if IPv6, is the first address of its prefix, in a new string.
func (c *ClientIP) format(a netip.Addr) string {
	if a.Is4() {
		var buf [len("255.255.255.255")]byte
		return string(a.AppendTo(buf[:0]))
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	return string(netip.PrefixFrom(a, c.v6bits).AppendTo(buf[:0]))
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
// there, use IP with TrustedProxies. Never mount PeerIP after a middleware
// that rewrites r.RemoteAddr from request headers, such as Chi's
// middleware.RealIP: the peer would then be whatever the client wrote.
// PeerIP refuses an r.RemoteAddr without a port, which is what such
// middleware leaves (an error wrapping ErrMisconfigured, 500; see
// [ClientIP.Key]).
func PeerIP(r *http.Request) (string, error) { return peerIP.Key(r) }

// probePeers are the peers of ProbeClientIP's requests: addresses reserved
// for documentation (RFC 5737, RFC 3849), which no deployment counts among
// its proxies.
var probePeers = [...]netip.AddrPort{
	netip.MustParseAddrPort("192.0.2.1:1234"),
	netip.MustParseAddrPort("[2001:db8::1]:1234"),
}

// probeHeaders are the forwarding headers that ProbeClientIP forges in
// every request, besides the ones it is given.
var probeHeaders = [...]string{
	"X-Forwarded-For", "X-Real-Ip", "Forwarded", "True-Client-Ip", "Cf-Connecting-Ip",
	"Fastly-Client-Ip", "X-Client-Ip", "X-Cluster-Client-Ip", "Fly-Client-Ip",
	"X-Appengine-Remote-Addr", "X-Original-Forwarded-For",
}

// maxProbeHeaders bounds the headers of a probe, so that each gets a
// distinct three-digit last octet, 100 to 254, in 198.51.100.0/24.
const maxProbeHeaders = 155

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
// returns an error wrapping [ErrMisconfigured] that names the header the
// framework believed (or, if it returned no forged value, the address it
// returned), to which the adapter adds the setting to change. A nil
// resolve is such an error too.
func ProbeClientIP(resolve func(peer netip.AddrPort, h http.Header) string, extra ...string) error {
	if resolve == nil {
		return misconfigured("ProbeClientIP: nil resolve function")
	}
	names := make([]string, 0, len(probeHeaders)+len(extra))
	for _, n := range append(probeHeaders[:len(probeHeaders):len(probeHeaders)], extra...) {
		n = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(n))
		if n != "" && !slices.Contains(names, n) && len(names) < maxProbeHeaders {
			names = append(names, n)
		}
	}
	forged := func(i int) string { return "198.51.100." + strconv.Itoa(100+i) }
	for _, peer := range probePeers {
		h := make(http.Header, len(names))
		for i, n := range names {
			v := forged(i)
			if n == "Forwarded" {
				v = "for=" + v
			}
			h[n] = []string{v}
		}
		got := trimOWS(resolve(peer, h))
		if a, _, ok := parseAddr(got, true); ok && a == peer.Addr() {
			continue
		}
		for i, n := range names {
			if strings.Contains(got, forged(i)) {
				return misconfigured("a request from %s, which is no proxy, had its client address taken from its %s header (%q), which any client can send",
					peer.Addr(), n, got)
			}
		}
		return misconfigured("a request from %s, which is no proxy, was given the client address %q instead of its own", peer.Addr(), got)
	}
	return nil
}
