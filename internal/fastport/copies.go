package fastport

// The helpers of this file copy what they return out of fasthttp's
// memory, which serves the next request, or return a constant.

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/ratekit/ratekit/adapter"
)

var peer, _ = adapter.NewClientIP()

// PeerKey returns the key of the peer address a, as keyfuncs.PeerIP does,
// without formatting a *net.TCPAddr only to parse it again: an adapter's
// PeerIP.
func PeerKey(a net.Addr) (string, error) {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP) // not an address: KeyAddr reports it
		return peer.KeyAddr(ip)
	}
	return peer.KeyFrom(remoteAddr(a), nil) // an error wrapping keyfuncs.ErrMissing
}

// remoteAddr returns the peer address a as adapter.ClientIP and
// rules.Request take it, "IP:port", in one allocation (net.TCPAddr.String
// takes three).
func remoteAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String() // not an IP peer: KeyFrom reports it
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return ""
	}
	var buf [len("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")]byte
	return string(netip.AddrPortFrom(ip.Unmap().WithZone(ta.Zone), uint16(ta.Port)).AppendTo(buf[:0]))
}

// headers is adapter.HeaderValues over a request header, with copies of
// the values: a key may be a substring of one. Of one field, it is
// pointer-shaped when Q is, as fasthttp's *RequestHeader: it converts to
// adapter.HeaderValues without allocating.
type headers[Q RequestHeader] struct{ h Q }

func (h headers[Q]) Values(name string) []string {
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

// method returns m, as a constant when it is a standard method, else a copy.
func method(m string) string {
	for _, s := range [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace} {
		if m == s {
			return s
		}
	}
	return strings.Clone(m)
}

// setField sets the response field name to v[0] with SetCanonical, which
// copies both (the kit's names are canonical in fasthttp's sense too), or
// removes it when v is empty.
func setField(h ResponseHeader, name string, v []string) {
	if len(v) == 0 {
		h.Del(name)
		return
	}
	h.SetCanonical(unsafe.Slice(unsafe.StringData(name), len(name)), unsafe.Slice(unsafe.StringData(v[0]), len(v[0])))
}

// pathCopy returns a copy of path p, lower-cased (in ASCII, as Fiber
// compares paths) when fold is set.
func pathCopy(p string, fold bool) string {
	b := []byte(p)
	for i := 0; fold && i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is this string's alone
}
