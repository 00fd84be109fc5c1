package ratekitfiber3

// The helpers of this file use fasthttp's types and the standard library's,
// never Fiber's: fiber/fasthttp.go and fiber3/fasthttp.go are the same but
// for the package clause. Every string they return is a copy or a constant,
// as fasthttp reuses the memory of a request.

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
)

var peer, _ = keyfuncs.NewClientIP()

// peerKey returns the key of the peer address a, as keyfuncs.PeerIP does,
// without formatting a *net.TCPAddr only to parse it again.
func peerKey(a net.Addr) (string, error) {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP) // not an address: KeyAddr reports it
		return peer.KeyAddr(ip)
	}
	return peer.KeyFrom(remoteAddr(a), nil) // an error wrapping keyfuncs.ErrMissing
}

// remoteAddr returns the peer address a as keyfuncs.ClientIP and
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

// headers is keyfuncs.HeaderValues over a request header, with copies of
// the values: a key may be a substring of one.
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
func setField(h *fasthttp.ResponseHeader, name string, v []string) {
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

// queueRequest returns what a queue.Offer reads of req, which Reply copies.
func queueRequest(req *fasthttp.Request) *queue.Request {
	return &queue.Request{Method: req.Header.Method(), URI: req.RequestURI(), Header: req.Header.PeekAll, Body: req.Body()}
}
