package clientip_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/keyfuncs"
)

// The trusted-proxy sets FuzzClientIPHeaders draws from; the fuzzer picks
// one by index. trustedSets[i] must be accepted by TrustedProxies.
var trustedSets = [][]string{
	nil,
	{"10.0.0.0/8", "2001:db8::/32"},
	{"10.0.0.0/8", "192.0.2.0/24", "fe80::/10", "::1", "::ffff:172.16.0.0/108"},
	{"0.0.0.0/0", "::/0"},
}

// The proxy headers FuzzClientIPHeaders draws from, in canonical form.
var proxyHeaders = []string{"X-Forwarded-For", "Forwarded", "X-Real-Ip"}

// fuzzTrusted is the oracle of trust, independent of the package: a, with
// its zone removed and unmapped, is in one of the prefixes.
func fuzzTrusted(a netip.Addr, set []string) bool {
	a = a.WithZone("").Unmap()
	for _, s := range set {
		if !strings.Contains(s, "/") {
			if netip.MustParseAddr(s).Unmap() == a {
				return true
			}
			continue
		}
		p := netip.MustParsePrefix(s)
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// fuzzKey is the oracle of a client's key: the canonical IPv4 address, or
// the canonical IPv6 prefix of length bits.
func fuzzKey(a netip.Addr, bits int) string {
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

// candidateKeys returns the keys of every address written in the texts: of
// each maximal run of hexadecimal digits, dots and colons that parses as an
// address, or does once a trailing ":port" is cut off. The client that
// KeyFrom finds, in a header or the peer, is among them.
func candidateKeys(bits int, texts ...string) map[string]bool {
	keys := map[string]bool{}
	isAddrByte := func(c byte) bool {
		return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':' || c == '.'
	}
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			keys[fuzzKey(a, bits)] = true
		}
	}
	for _, s := range texts {
		for i := 0; i < len(s); {
			if !isAddrByte(s[i]) {
				i++
				continue
			}
			j := i
			for j < len(s) && isAddrByte(s[j]) {
				j++
			}
			run := s[i:j]
			add(run)
			if k := strings.LastIndexByte(run, ':'); k >= 0 {
				add(run[:k])
			}
			i = j
		}
	}
	return keys
}

// checkKeyForm fails unless k is a canonical key: a canonical IPv4 address,
// or a masked IPv6 prefix of length bits in canonical form, which is never
// an IPv4-mapped one.
func checkKeyForm(t *testing.T, k string, bits int) {
	t.Helper()
	if strings.Trim(k, "0123456789abcdef.:/") != "" {
		t.Fatalf("key %q has characters outside an address or prefix", k)
	}
	if a, err := netip.ParseAddr(k); err == nil {
		if !a.Is4() || a.String() != k {
			t.Fatalf("key %q is not a canonical IPv4 address", k)
		}
		return
	}
	p, err := netip.ParsePrefix(k)
	if err != nil {
		t.Fatalf("key %q is neither an address nor a prefix", k)
	}
	if !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != bits || p != p.Masked() || p.String() != k {
		t.Fatalf("key %q is not a canonical IPv6 /%d prefix", k, bits)
	}
}

// recordingHeaders is a HeaderValues that records whether it was read.
type recordingHeaders struct {
	h    http.Header
	read bool
}

func (r *recordingHeaders) Values(name string) []string {
	r.read = true
	return r.h.Values(name)
}

// FuzzClientIPHeaders checks ClientIP against arbitrary peer addresses and
// proxy header lines, for each proxy header kind (X-Forwarded-For,
// Forwarded, X-Real-IP), several sets of trusted proxies and every IPv6
// prefix length:
//
//   - it never panics, and the same input gives the same key, by KeyFrom
//     and by Key (which also refuses, as misconfigured, a parseable peer
//     without a port);
//   - an error comes with no key, only for an unparseable peer, and wraps
//     ErrMissing;
//   - a key is a canonical IPv4 address or a canonical, masked IPv6 prefix
//     of the configured length, and holds the resolved client address;
//   - with an untrusted peer, no header is read and the key is the peer's;
//   - with a trusted peer, the key is that of an address written in the
//     proxy header or in the peer address;
//   - headers other than the configured one never matter;
//   - with a list header, header lines a client forges before the chain
//     never change a client found in the chain; a single-value header on
//     other than exactly one line is ignored.
func FuzzClientIPHeaders(f *testing.F) {
	f.Add("10.0.0.1:80", "6.6.6.6, 198.51.100.7, 10.0.0.2", "1.1.1.1", uint8(0x44), uint8(63))
	f.Add("10.0.0.1:80", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https`, "for=1.1.1.1", uint8(0x47), uint8(47))
	f.Add("[::1]:443", "198.51.100.7", "", uint8(0x48), uint8(63))
	f.Add("[fe80::1%eth0]:1", "[2001:db8::1%25x]:8, unknown", "::ffff:203.0.113.9", uint8(0x88), uint8(127))
	f.Add("[::ffff:10.1.2.3]:5", "::FFFF:C633:6407", "", uint8(0x44), uint8(63))
	f.Add("192.0.2.1", "", "", uint8(0x02), uint8(0))
	f.Add("203.0.113.9:5555", "1.1.1.1", "2.2.2.2", uint8(0x85), uint8(63))
	f.Add("10.0.0.1:80", `for="\"1.2.3.4", for=_hidden, for=unknown`, `for="[::1]:_x"`, uint8(0x4a), uint8(63))
	f.Add("172.16.9.9:1", "198.51.100.7:_obf", "", uint8(0x47), uint8(31))
	f.Add("@", "1.1.1.1", "for=1.1.1.1", uint8(0xff), uint8(255))
	f.Fuzz(func(t *testing.T, peer, line1, line2 string, mode, prefix uint8) {
		header := proxyHeaders[int(mode)%len(proxyHeaders)]
		trusted := trustedSets[int(mode)/len(proxyHeaders)%len(trustedSets)]
		bits := 1 + int(prefix)%128
		var lines []string
		switch (mode >> 6) % 3 {
		case 1:
			lines = []string{line1}
		case 2:
			lines = []string{line1, line2}
		}
		opts := []keyfuncs.IPOption{keyfuncs.ProxyHeader(header), keyfuncs.IPv6Prefix(bits)}
		if trusted != nil {
			opts = append(opts, keyfuncs.TrustedProxies(trusted...))
		}
		c, err := clientip.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		only := http.Header{}
		for _, l := range lines {
			only.Add(header, l)
		}
		// Every other header a client might forge.
		all := only.Clone()
		for _, other := range proxyHeaders {
			if other != header {
				all[other] = []string{"1.1.1.1", "for=1.1.1.1", "[2001:db8:bad::1]:1"}
			}
		}
		all.Set("Cf-Connecting-Ip", "1.1.1.1")

		rec := &recordingHeaders{h: all}
		k, err := c.KeyFrom(peer, rec)
		k2, err2 := c.KeyFrom(peer, all)
		if k != k2 || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("KeyFrom not deterministic: %q, %v then %q, %v", k, err, k2, err2)
		}
		// Key is KeyFrom, but that it refuses a parseable peer without a
		// port, which a header-rewriting middleware left.
		r := &http.Request{Method: http.MethodGet, RemoteAddr: peer, Header: all}
		rk, rerr := c.Key(r)
		if errors.Is(rerr, keyfuncs.ErrMisconfigured) {
			bare := peer // an address, or one in brackets, without a port
			if len(bare) >= 2 && bare[0] == '[' && bare[len(bare)-1] == ']' {
				bare = bare[1 : len(bare)-1]
			}
			if _, perr := netip.ParseAddr(bare); rk != "" || err != nil || perr != nil {
				t.Fatalf("Key(%q) = %q, %v; KeyFrom = %q, %v", peer, rk, rerr, k, err)
			}
		} else if rk != k || fmt.Sprint(rerr) != fmt.Sprint(err) {
			t.Fatalf("Key(%q) = %q, %v; KeyFrom = %q, %v", peer, rk, rerr, k, err)
		}
		peerKey, peerErr := c.KeyFrom(peer, nil)
		if err != nil {
			if k != "" || !errors.Is(err, keyfuncs.ErrMissing) || peerErr == nil {
				t.Fatalf("KeyFrom(%q) = %q, %v (peer alone: %v)", peer, k, err, peerErr)
			}
			return
		}
		if peerErr != nil {
			t.Fatalf("KeyFrom(%q) = %q with headers, %v without", peer, k, peerErr)
		}
		checkKeyForm(t, k, bits)

		a, err := c.Resolve(peer, all)
		if err != nil || !a.IsValid() || a.Zone() != "" || a.Is4In6() {
			t.Fatalf("Resolve = %v, %v", a, err)
		}
		if ka, err := c.KeyAddr(a); err != nil || ka != k || fuzzKey(a, bits) != k {
			t.Fatalf("key %q, but the resolved client %v has key %q, %v (oracle %q)", k, a, ka, err, fuzzKey(a, bits))
		}
		peerAddr, err := c.Resolve(peer, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !fuzzTrusted(peerAddr, trusted) {
			if rec.read || k != peerKey {
				t.Fatalf("untrusted peer %v: key %q (peer's %q), headers read: %v", peerAddr, k, peerKey, rec.read)
			}
			return
		}
		if cands := candidateKeys(bits, append([]string{peer}, lines...)...); !cands[k] {
			t.Fatalf("key %q is of no address in the peer %q or the %s lines %q", k, peer, header, lines)
		}
		if ko, err := c.KeyFrom(peer, only); ko != k || err != nil {
			t.Fatalf("other headers changed the key: %q, without them %q, %v", k, ko, err)
		}
		forged := http.Header{textproto.CanonicalMIMEHeaderKey(header): append([]string{line2}, lines...)}
		kf, err := c.KeyFrom(peer, forged)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case header == "X-Real-Ip":
			if len(lines) != 1 && k != peerKey {
				t.Fatalf("%d lines of %s, key %q, want the peer's %q", len(lines), header, k, peerKey)
			}
			if len(lines) >= 1 && kf != peerKey {
				t.Fatalf("%d lines of %s, key %q, want the peer's %q", len(lines)+1, header, kf, peerKey)
			}
		case !fuzzTrusted(a, trusted) && kf != k:
			t.Fatalf("the client %v was found in the chain %q, but the forged line %q before it changed the key from %q to %q",
				a, lines, line2, k, kf)
		}
	})
}

// FuzzClientIPOptions checks the options of New (keyfuncs.IPOption)
// against arbitrary trusted proxies, proxy header names and IPv6 prefix
// lengths: it never panics; it fails exactly for an invalid address or
// prefix, an invalid header name or a prefix length outside 1 to 128,
// with a message that names the package and is linear in the input's size
// (it quotes the bad value, and netip's error quotes it again); and a peer
// that is one of the trusted addresses has its proxy header read.
func FuzzClientIPOptions(f *testing.F) {
	f.Add("10.0.0.0/8, ::1", "X-Forwarded-For", 64)
	f.Add("::ffff:10.0.0.0/104", "Forwarded", 48)
	f.Add("fe80::1%eth0", "x-real-ip", 128)
	f.Add(" 192.0.2.7 ", "CF-Connecting-IP", 1)
	f.Add("10.0.0.256/8", "X Forwarded For", 0)
	f.Add("2001:db8::/129", "", 129)
	f.Add("", "True-Client-IP", -1)
	f.Add("1.2.3.4/32, ::ffff:1.2.3.4", "forwarded", 64)
	f.Fuzz(func(t *testing.T, list, header string, bits int) {
		trusted := strings.Split(list, ",")
		c, err := clientip.New(keyfuncs.TrustedProxies(trusted...), keyfuncs.ProxyHeader(header), keyfuncs.IPv6Prefix(bits))
		valid := bits >= 1 && bits <= 128 && header != "" && strings.Trim(header, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
		var addrs []netip.Addr
		for _, s := range trusted {
			s = strings.TrimSpace(s)
			if strings.Contains(s, "/") {
				_, perr := netip.ParsePrefix(s)
				valid = valid && perr == nil
				continue
			}
			a, aerr := netip.ParseAddr(s)
			valid = valid && aerr == nil
			addrs = append(addrs, a)
		}
		if err != nil {
			if c != nil || valid {
				t.Fatalf("New(%q, %q, %d) = %v, %v", trusted, header, bits, c, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "keyfuncs: ") || len(msg) > 200+20*(len(list)+len(header)) {
				t.Fatalf("error message %q", msg)
			}
			return
		}
		if !valid {
			t.Fatalf("New(%q, %q, %d) accepted invalid options", trusted, header, bits)
		}
		value := "198.51.100.7"
		if textproto.CanonicalMIMEHeaderKey(header) == "Forwarded" {
			value = "for=" + value
		}
		h := http.Header{}
		h.Set(header, value)
		for _, a := range addrs {
			peer := netip.AddrPortFrom(a.WithZone(""), 4711).String()
			if k, err := c.KeyFrom(peer, h); k != "198.51.100.7" || err != nil {
				t.Fatalf("trusted peer %s, %s: %s: key %q, %v; want the header's 198.51.100.7", peer, header, value, k, err)
			}
		}
	})
}
