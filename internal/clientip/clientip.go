// Package clientip is the client-IP resolver behind keyfuncs.IP and
// keyfuncs.PeerIP, the adapter kit's NewClientIP, ProbeClientIP and
// CheckRemoteAddr (package adapter), and the rules' remote_address: it
// finds the client of a request from its peer address and, behind trusted
// proxies, a proxy header, and turns it into a rate-limit key. The rules
// it follows are documented at keyfuncs.IP, and its methods at
// adapter.ClientIP.
package clientip

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"sync/atomic"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keyval"
)

// HeaderValues is the read-only view of request headers that a ClientIP
// needs: Values returns all values of the named header (in canonical
// form), one per header line, in the order received, or nil if the header
// is absent. http.Header implements it. It is an alias, as
// adapter.HeaderValues is, of one interface type: an adapter's headers
// reach the resolver with no conversion.
type HeaderValues = interface {
	Values(name string) []string
}

// Config is what the options of a ClientIP set; keyfuncs.IPOption is a
// function of it. Its zero value is not the default: New starts from the
// default.
type Config struct {
	trusted []netip.Prefix
	v6bits  int
	header  string
	err     error
}

func (c *Config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// TrustedProxies returns the option that adds cidrs, each a CIDR prefix or
// a single address, to the trusted proxies (keyfuncs.TrustedProxies).
func TrustedProxies(cidrs ...string) func(*Config) {
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
	return func(c *Config) {
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

// IPv6Prefix returns the option that sets the length in bits, 1 to 128,
// of the prefix that identifies an IPv6 client (keyfuncs.IPv6Prefix).
func IPv6Prefix(bits int) func(*Config) {
	return func(c *Config) {
		if bits < 1 || bits > 128 {
			c.fail(fmt.Errorf("keyfuncs: IPv6Prefix(%d): prefix length must be between 1 and 128", bits))
			return
		}
		c.v6bits = bits
	}
}

// ProxyHeader returns the option that sets the header from which the
// client address is taken when the peer is a trusted proxy
// (keyfuncs.ProxyHeader).
func ProxyHeader(name string) func(*Config) {
	return func(c *Config) {
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
// turns it into a rate-limit key, by the rules of keyfuncs.IP. Create it
// with New or NewPeer; the zero value is not usable. Its configuration is
// immutable, and it is safe for concurrent use.
//
// A key that is not a substring of the request's text (the key of an IPv6
// client, of a client given as a netip.Addr to KeyAddr, or of an address
// from a header that is not in canonical form) is formatted into a new
// string. A ClientIP keeps such keys of recent clients in a table of 1024
// slots, by address (by prefix for IPv6, so the hosts of one prefix share
// a slot): a key is kept when its address misses its slot twice with no
// other address missing that slot in between, so a hot client's key costs
// no allocation, a flood of new addresses keeps nothing, and memory stays
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

// New returns a ClientIP configured by opts, applied in order (nil ones
// skipped), or the error of the first invalid option. Without options,
// the client is always the TCP peer and IPv6 clients are keyed by their
// /64.
func New[O ~func(*Config)](opts ...O) (*ClientIP, error) {
	cfg := Config{v6bits: 64, header: "X-Forwarded-For"}
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

// NewPeer returns a ClientIP without options: the client is always the
// TCP peer, and IPv6 clients are keyed by their /64.
func NewPeer() *ClientIP {
	c, _ := New[func(*Config)]() // cannot fail: no options
	return c
}

// Key returns the rate-limit key of the client that sent r: that of
// KeyFrom with r.RemoteAddr and r.Header, except that an r.RemoteAddr
// that is an IP address without a port, which net/http never sets, is the
// error of CheckRemoteAddr.
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

// CheckRemoteAddr returns, for an http.Request.RemoteAddr that is an IP
// address without a port, as a middleware that rewrote it from a request
// header leaves it, an error wrapping keyval.ErrMisconfigured that names
// the cause and the remedy; for any other value, nil, without allocating.
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
	return keyval.Misconfigured("r.RemoteAddr is %q, an address without a port, which net/http never sets: "+
		"a middleware before the limiter (Chi's middleware.RealIP, gorilla's handlers.ProxyHeaders) "+
		"replaced the TCP peer with an address from a request header that any client can send; "+
		"remove that middleware or mount the limiter before it, and behind proxies key with "+
		"keyfuncs.IP(keyfuncs.TrustedProxies(...)) (every adapter's IP) "+
		"or with ratekitchi.ClientIP after Chi's middleware.ClientIPFromXFF", remoteAddr)
}

// KeyFrom returns the key of the client of a request from the peer
// remoteAddr, with or without a port, with the request headers h (nil for
// none). If remoteAddr cannot be parsed, it returns an error wrapping
// core.ErrMissingKey. If the peer is an IPv4 client and needs no
// conversion, the key is a substring of remoteAddr and KeyFrom does not
// allocate.
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

// KeyAddr returns the key of the client at address a, taken to be the
// client: neither the trusted proxies nor any header are consulted. If a
// is the zero Addr, it returns an error wrapping core.ErrMissingKey.
func (c *ClientIP) KeyAddr(a netip.Addr) (string, error) {
	if !a.IsValid() {
		return "", errInvalidAddr
	}
	return c.key(a.WithZone("").Unmap()), nil
}

var errInvalidAddr = fmt.Errorf("keyfuncs: client address is not an IP address: %w", core.ErrMissingKey)

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

// Resolve returns the address of the client, as KeyFrom finds it,
// unmapped, without zone and not masked. If remoteAddr cannot be parsed,
// it returns an error wrapping core.ErrMissingKey.
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
		return netip.Addr{}, "", fmt.Errorf("keyfuncs: peer address %q: %w", remoteAddr, core.ErrMissingKey)
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
