package rules

import (
	"context"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/ratekit/ratekit/keyfuncs"
)

// A Request is the request data that rules match and key on. Adapters
// implement it over their framework's request: [HTTPRequest] for net/http
// (and Gin, Echo and Chi, whose requests are net/http requests), and the
// Fiber adapter over fasthttp. Implementations must not retain the
// strings they return beyond the request, unless they are immutable.
type Request interface {
	// Context is the request's context.
	Context() context.Context
	// Method is the request method, such as "GET".
	Method() string
	// Path is the request's URL path, unescaped.
	Path() string
	// EscapedPath is the path as the client sent it, percent-encoded, if
	// that differs from Path, as for "/users/1%2Fx"; "" if it does not.
	// Rules match both forms, since some routers route by one and some by
	// the other.
	EscapedPath() string
	// Route is the pattern of the route that matched, such as
	// "/items/{id}", or "" if the router has not told.
	Route() string
	// Values returns the values of the named header, in canonical form,
	// one per header line, or nil if it is absent.
	Values(name string) []string
	// Query returns the first value of the named query parameter, or ""
	// if it is absent.
	Query(name string) string
	// RemoteAddr is the network address of the peer, "IP:port".
	RemoteAddr() string
	// Value returns a value the application stored for the request, as
	// by an authentication middleware: in the context, or where the
	// framework keeps such values (Gin's and Echo's c.Get, Fiber's
	// c.Locals); nil if there is none.
	Value(key any) any
}

// HTTPRequest returns r as a Request. It does not allocate. Route is the
// pattern of the http.ServeMux route that matched (Request.Pattern, less
// any method and host), which is known only to middleware wrapping the
// handler, not the mux; Value reads the request context.
func HTTPRequest(r *http.Request) Request { return httpRequest{r} }

// httpRequest is pointer-shaped, so that converting it to Request does not
// allocate.
type httpRequest struct{ r *http.Request }

func (h httpRequest) Context() context.Context { return h.r.Context() }
func (h httpRequest) Route() string            { return PatternPath(h.r.Pattern) }
func (h httpRequest) RemoteAddr() string       { return h.r.RemoteAddr }
func (h httpRequest) Value(key any) any        { return h.r.Context().Value(key) }

func (h httpRequest) Method() string {
	if h.r.Method == "" {
		return http.MethodGet
	}
	return h.r.Method
}

func (h httpRequest) Path() string {
	if h.r.URL == nil {
		return ""
	}
	return h.r.URL.Path
}

func (h httpRequest) EscapedPath() string {
	if h.r.URL == nil || h.r.URL.RawPath == "" {
		return ""
	}
	return h.r.URL.EscapedPath()
}

func (h httpRequest) Values(name string) []string { return h.r.Header.Values(name) }

func (h httpRequest) Query(name string) string {
	v, err := keyfuncs.Query(name)(h.r)
	if err != nil {
		return ""
	}
	return v
}

// PatternPath returns the path of an http.ServeMux pattern
// "[METHOD ][HOST]/PATH": "GET example.com/items/{id}" gives
// "/items/{id}".
func PatternPath(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " \t")
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:]
	}
	return pattern
}

func textprotoCanonical(s string) string { return textproto.CanonicalMIMEHeaderKey(s) }
