// Package keyfuncs provides functions that extract the rate-limit key of an
// HTTP request: the client IP address, a header or query parameter, a value
// set in the request context by an authentication middleware, the route, or
// combinations of these.
//
// A key function returns either a non-empty key or an error; it never returns
// an empty key with a nil error, because an empty key would silently put
// every such request in one shared bucket. When a request lacks the value a
// key function needs, the returned error wraps [ErrMissing], which the
// middleware reports to the client as 400 Bad Request. Any other error is a
// server-side failure.
//
// The client IP address is the TCP peer address unless the peer is a proxy
// listed with [TrustedProxies]; see [IP] for the rules. Headers such as
// X-Forwarded-For are never read from untrusted peers, so clients cannot
// choose their own bucket. Nor can a middleware mounted before the limiter
// that replaced r.RemoteAddr with a header's address (Chi's
// middleware.RealIP) choose it for them: the key functions of the client
// IP refuse such a request (see [IP]).
//
// The authors of adapters to other HTTP frameworks find the same logic
// over their framework's request (the client-IP resolver, the conversion
// of header and stored values to keys) in package adapter.
//
// All functions in this package are safe for concurrent use.
package keyfuncs

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keyval"
)

// Func extracts the rate-limit key of a request.
//
// A Func returns a non-empty key and a nil error, or an empty key and a
// non-nil error. If the request does not carry the value the Func needs,
// the error wraps [ErrMissing].
type Func func(r *http.Request) (string, error)

// ErrMissing reports that a request does not carry the value a key function
// needs: the header, query parameter or context value is absent or empty, or
// the peer address cannot be parsed. Key functions return errors that wrap
// ErrMissing; test for it with [errors.Is].
//
// It is core.ErrMissingKey, so middleware answers such requests with 400
// Bad Request and a problem-details body.
var ErrMissing = core.ErrMissingKey

// ErrMisconfigured is wrapped by the errors of key functions built with
// bad arguments (an empty header name, a nil function), and of client-IP
// keys used where they cannot be safe: after a middleware that rewrote
// r.RemoteAddr from a request header (see [IP]), or on a framework
// configured to take the client address from headers that any client can
// send (the adapters' ClientIP keys). They fail the request (500) rather
// than panic, and their text names the setting to change.
var ErrMisconfigured = keyval.ErrMisconfigured

// broken returns a Func that fails every request with a configuration
// error.
func broken(format string, args ...any) Func {
	err := keyval.Misconfigured(format, args...)
	return func(*http.Request) (string, error) { return "", err }
}

// Header returns a Func whose key is the value of the named request header,
// for example an API key. Surrounding white space is removed. If the header
// occurs more than once, the first value is used. If the header is absent or
// its value is empty or blank, the Func returns an error wrapping
// [ErrMissing].
//
// The name is matched case-insensitively, as by [http.Header.Get].
// An empty name gives a Func that fails with ErrMisconfigured.
func Header(name string) Func {
	key := textproto.CanonicalMIMEHeaderKey(name)
	toKey := keyval.HeaderKey(name)
	return func(r *http.Request) (string, error) {
		var v string
		if vs := r.Header[key]; len(vs) > 0 {
			v = vs[0]
		}
		return toKey(v)
	}
}

// Query returns a Func whose key is the value of the named URL query
// parameter. Surrounding white space is removed. If the parameter occurs more
// than once, the first occurrence is used, as by [url.Values.Get]; pairs that
// [url.ParseQuery] would reject (bad escapes, semicolons) are skipped. If the
// parameter is absent or its value is empty or blank, the Func returns an
// error wrapping [ErrMissing].
//
// An empty name gives a Func that fails with ErrMisconfigured.
func Query(name string) Func {
	if name == "" {
		return broken("Query: empty parameter name")
	}
	errMissing := fmt.Errorf("keyfuncs: query parameter %q: %w", name, ErrMissing)
	return func(r *http.Request) (string, error) {
		if r.URL != nil {
			if v, ok := queryValue(r.URL.RawQuery, name); ok {
				if v = strings.TrimSpace(v); v != "" {
					return v, nil
				}
			}
		}
		return "", errMissing
	}
}

// queryValue returns the value of the first well-formed occurrence of name in
// the raw query q. It decodes only the pairs it needs to look at, and
// allocates only when a key or the value contains escapes.
func queryValue(q, name string) (string, bool) {
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		v, err := url.QueryUnescape(v)
		if err != nil {
			continue
		}
		return v, true
	}
	return "", false
}

// ContextValue returns a Func whose key is the value stored in the request
// context under ctxKey, typically by an authentication middleware.
//
// The value may be a string, a [fmt.Stringer], any integer type, or any type
// whose underlying type is a string or integer type; integers are formatted
// in decimal. If the value is absent, nil (including a nil pointer), or a
// blank string, the Func returns an error wrapping [ErrMissing]. A value of
// any other type is a programming error; the Func then returns an error that
// does not wrap ErrMissing.
//
// A nil ctxKey gives a Func that fails with ErrMisconfigured.
func ContextValue(ctxKey any) Func {
	if ctxKey == nil {
		return broken("ContextValue: nil context key")
	}
	toKey := keyval.ValueKey(fmt.Sprintf("keyfuncs: context value %#v", ctxKey))
	return func(r *http.Request) (string, error) {
		return toKey(r.Context().Value(ctxKey))
	}
}

// User returns a Func whose key is the user ID that your authentication
// middleware stored in the request context under ctxKey. It is
// [ContextValue] under a name that documents intent: requests are limited
// per authenticated user, and unauthenticated requests yield an error
// wrapping [ErrMissing]. Combine it with [First] to fall back to the client
// IP address for anonymous requests.
//
// A nil ctxKey gives a Func that fails with ErrMisconfigured.
func User(ctxKey any) Func {
	return ContextValue(ctxKey)
}

// Route returns a Func whose key is the request method and route, separated
// by a space, for example "GET /items/{id}".
//
// If the request was routed by an [http.ServeMux], the route is the pattern
// that matched ([http.Request.Pattern]), so all requests to "/items/{id}"
// share a key whatever the item. A method in the pattern is replaced by the
// request's method: pattern "GET /items/{id}" gives "GET /items/{id}" for GET
// and "HEAD /items/{id}" for HEAD requests, never "GET GET /items/{id}".
//
// Otherwise the route is the request's URL path. Every distinct path is then
// a distinct key, and clients can create keys at will by varying the path;
// prefer routing through a ServeMux, or combine Route with [PeerIP] or
// [IP] using [Join].
func Route() Func {
	return route
}

func route(r *http.Request) (string, error) {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	if p := r.Pattern; p != "" {
		// A ServeMux pattern is "[METHOD ][HOST]/[PATH]"; the method is
		// separated by spaces or tabs.
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i+1:], " \t")
		}
		return method + " " + p, nil
	}
	if r.URL == nil {
		return "", errNoURL
	}
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	return method + " " + path, nil
}

var errNoURL = fmt.Errorf("keyfuncs: route: request has no URL: %w", ErrMissing)

// Constant returns a Func whose key is always key, which places all requests
// in one bucket: a single global limit. Constant("") behaves like
// Constant("global").
func Constant(key string) Func {
	if key == "" {
		key = "global"
	}
	return func(*http.Request) (string, error) {
		return key, nil
	}
}

// First returns a Func whose key comes from the first of fs that finds one.
//
// The functions are called in order. A function that returns an error
// wrapping [ErrMissing], or an empty key, is skipped; any other error is
// returned as is. If every function is skipped (or fs is empty), First's Func
// returns an error wrapping ErrMissing.
//
// The key is prefixed with the index of the function that produced it and a
// colon: First(User(k), PeerIP) yields "0:alice" for a user and
// "1:192.0.2.1" for an anonymous client, so a user whose ID happens to equal
// an IP address never shares a bucket with that address.
//
// A nil function in fs gives a Func that fails with ErrMisconfigured.
func First(fs ...Func) Func {
	fs = slices.Clone(fs)
	prefixes := make([]string, len(fs))
	for i, f := range fs {
		if f == nil {
			return broken("First: function %d is nil", i)
		}
		prefixes[i] = strconv.Itoa(i) + ":"
	}
	errNone := fmt.Errorf("keyfuncs: none of %d key functions found a key: %w", len(fs), ErrMissing)
	return func(r *http.Request) (string, error) {
		for i, f := range fs {
			k, err := f(r)
			if err != nil {
				if errors.Is(err, ErrMissing) {
					continue
				}
				return "", err
			}
			if k == "" {
				continue
			}
			return prefixes[i] + k, nil
		}
		return "", errNone
	}
}

// Join returns a Func whose key combines the keys of all fs, for example
// Join(Route(), ip.Key) for a limit per route and client.
//
// Each part is written as its length in bytes, a colon and the part itself,
// and parts are separated by "|": the parts "GET /a" and "192.0.2.1" give
// "6:GET /a|9:192.0.2.1". The encoding is unambiguous: different sequences
// of parts never produce the same key, whatever bytes the parts contain.
//
// If any function returns an error, Join's Func returns that error. If a
// function returns an empty key with a nil error, or fs is empty, Join's Func
// returns an error wrapping [ErrMissing].
//
// A nil function in fs gives a Func that fails with ErrMisconfigured.
func Join(fs ...Func) Func {
	fs = slices.Clone(fs)
	for i, f := range fs {
		if f == nil {
			return broken("Join: function %d is nil", i)
		}
	}
	errEmpty := fmt.Errorf("keyfuncs: join: empty key part: %w", ErrMissing)
	if len(fs) == 0 {
		return func(*http.Request) (string, error) { return "", errEmpty }
	}
	return func(r *http.Request) (string, error) {
		var buf [8]string
		parts := buf[:0]
		size := 0
		for _, f := range fs {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if k == "" {
				return "", errEmpty
			}
			parts = append(parts, k)
			size += decimalLen(len(k)) + 1 + len(k) + 1
		}
		var b strings.Builder
		b.Grow(size - 1)
		for i, p := range parts {
			if i > 0 {
				b.WriteByte('|')
			}
			var nb [20]byte
			b.Write(strconv.AppendUint(nb[:0], uint64(len(p)), 10))
			b.WriteByte(':')
			b.WriteString(p)
		}
		return b.String(), nil
	}
}

// decimalLen returns the number of decimal digits of n >= 0.
func decimalLen(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}
