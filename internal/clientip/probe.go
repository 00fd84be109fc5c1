package clientip

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/ratekit/ratekit/internal/keyval"
)

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
// address, resolve, with requests from peers that are no proxy carrying a
// forged address in each common forwarding header and in each header named
// in extra: nil if resolve returns the peer's address every time, else an
// error wrapping keyval.ErrMisconfigured that names the header believed
// (see adapter.ProbeClientIP).
func ProbeClientIP(resolve func(peer netip.AddrPort, h http.Header) string, extra ...string) error {
	if resolve == nil {
		return keyval.Misconfigured("ProbeClientIP: nil resolve function")
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
				return keyval.Misconfigured("a request from %s, which is no proxy, had its client address taken from its %s header (%q), which any client can send",
					peer.Addr(), n, got)
			}
		}
		return keyval.Misconfigured("a request from %s, which is no proxy, was given the client address %q instead of its own", peer.Addr(), got)
	}
	return nil
}
