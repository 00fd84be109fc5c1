// Package fastport is the port to package adapter that the Fiber v2 and
// Fiber v3 adapters share, generic over the request context of either
// major (*fiber.Ctx in v2, fiber.Ctx in v3) and over fasthttp's request
// header, so that it imports neither Fiber nor fasthttp: the port [Port],
// the view of a request that rules match ([ViewOf]), the key functions
// that read a request alike in both majors ([IP], [Header],
// [ContextValue], [ClientIP], [PeerKey]) and the route pattern of
// [Routes].
//
// What differs between the majors, or sits in a field (fasthttp keeps a
// request's header in one), stays in the adapters: their public API,
// their [Framework], and what their ClientIP checks and says.
//
// fasthttp reuses the memory of a request for the next one, and the rules
// engine keeps the values it is given as keys: every string this package
// returns is a copy, or a constant.
package fastport

import (
	"bytes"
	"context"
	"net"
	"strings"
	"unsafe"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Reader is what the package reads of a Fiber request context, with the
// same signatures in both majors.
type Reader interface {
	Locals(key any, value ...any) any
	Method(override ...string) string
	Path(override ...string) string
	Query(key string, defaultValue ...string) string
}

// A Ctx is the request context C of a Fiber major, as the port drives it:
// a Reader whose Status returns C again (Fiber's chaining).
type Ctx[C any] interface {
	Reader
	Next() error
	Status(status int) C
	Send(body []byte) error
}

// A RequestHeader is what the package reads of fasthttp's
// *RequestHeader, of type Q.
type RequestHeader interface {
	PeekAll(name string) [][]byte
	Method() []byte
}

// A ResponseHeader is what the port writes of fasthttp's *ResponseHeader.
type ResponseHeader interface {
	SetCanonical(key, value []byte)
	Del(key string)
}

// A Request is what the port reads of fasthttp's *Request to queue it.
type Request interface {
	RequestURI() []byte
	Body() []byte
}

// A Framework is an adapter's reading of its request context C where the
// majors differ or fasthttp keeps a field. The package calls the methods
// of its zero value, which must not keep what they are given; Header
// returns the request header, of type Q.
type Framework[C any, Q RequestHeader] interface {
	Context(c C) context.Context // the store's, whose end ends a shaping hold
	Peer(c C) net.Addr           // the TCP peer
	Header(c C) Q
	Response(c C) ResponseHeader
	Request(c C) Request
	PathOriginal(c C) []byte // the path as sent
	CaseSensitive(c C) bool  // the app's fiber.Config.CaseSensitive
	Route(c C) string        // the pattern, "" in the middleware of app.Use or a group (see Routes)
}

// Port is the adapter.Port of a Fiber major whose request context is C,
// read by F. Its methods take C by value and keep nothing.
type Port[C Ctx[C], F Framework[C, Q], Q RequestHeader] struct{}

// Context returns the context that the store is called with.
func (Port[C, F, Q]) Context(c C) context.Context {
	var f F
	return f.Context(c)
}

// Request returns the view of c that rules match (see ViewOf).
func (Port[C, F, Q]) Request(c C) rules.Request { return ViewOf[F](c) }

// Next calls the handlers after the middleware.
func (Port[C, F, Q]) Next(c C) error { return c.Next() }

// Stop returns err, the error of a context ended during a shaping hold,
// for the app's ErrorHandler; nil for a request that the kit answers.
func (Port[C, F, Q]) Stop(_ C, err error) error { return err }

// Keep stores d in c.Locals under DecisionKey, where Decision reads it.
// Locals' variadic argument escapes through a call on a type parameter: a
// port over a concrete C, whose call would keep it on the stack (Fiber
// v2's), overrides Keep.
func (Port[C, F, Q]) Keep(c C, d core.Decision) C {
	c.Locals(DecisionKey{}, &d)
	return c
}

// Write writes the status and body of c's response.
func (Port[C, F, Q]) Write(c C, status int, body []byte) error {
	return c.Status(status).Send(body)
}

// Header sets the response field name to v[0], or removes it when v is
// empty.
func (Port[C, F, Q]) Header(c C, name string, v []string) {
	var f F
	setField(f.Response(c), name, v)
}

// Offer queues c's request with o, which copies what it reads.
func (Port[C, F, Q]) Offer(c C, o *queue.Offer, d core.Decision) queue.Reply {
	var f F
	h, r := f.Header(c), f.Request(c)
	req := queue.Request{Method: h.Method(), URI: r.RequestURI(), Header: h.PeekAll, Body: r.Body()}
	return o.Reply(f.Context(c), &req, d)
}

// DecisionKey is the c.Locals key of a decision: a value of a type of
// this internal package, which no application can write.
type DecisionKey struct{}

// Decision returns the decision that Port.Keep stored in c, if any: an
// adapter's DecisionFrom.
func Decision[C Reader](c C) (core.Decision, bool) {
	return adapter.Kept(c.Locals(DecisionKey{}))
}

// ViewOf returns the rules.Request of c, read by F. Of a pointer-shaped C
// (*fiber.Ctx, or Fiber v3's *fiber.DefaultCtx) it converts to
// rules.Request without allocating; of an interface, such as fiber.Ctx,
// it is boxed.
func ViewOf[F Framework[C, Q], C Reader, Q RequestHeader](c C) rules.Request {
	return view[C, F, Q]{c}
}

// view is the rules.Request of a Fiber request, of one field so that it
// is pointer-shaped when C is. Every string it returns is a copy, or a
// constant.
type view[C Reader, F Framework[C, Q], Q RequestHeader] struct{ c C }

func (r view[C, F, Q]) Context() context.Context { return r.f().Context(r.c) }
func (r view[C, F, Q]) Values(name string) []string {
	return headers[Q]{r.f().Header(r.c)}.Values(name)
}
func (r view[C, F, Q]) Query(name string) string { return strings.Clone(r.c.Query(name)) }
func (r view[C, F, Q]) RemoteAddr() string       { return remoteAddr(r.f().Peer(r.c)) }
func (r view[C, F, Q]) Method() string           { return method(r.c.Method()) }
func (r view[C, F, Q]) Path() string             { return r.lower(r.c.Path()) }
func (r view[C, F, Q]) Route() string            { return r.f().Route(r.c) } // the app's: not request memory

// f returns the zero F, whose methods read r.c.
func (view[C, F, Q]) f() F {
	var f F
	return f
}

// EscapedPath returns the path as sent, lower-cased as Path is; "" if it
// has no escapes.
func (r view[C, F, Q]) EscapedPath() string {
	if p := r.f().PathOriginal(r.c); bytes.IndexByte(p, '%') >= 0 {
		return r.lower(unsafe.String(unsafe.SliceData(p), len(p))) // lower copies it
	}
	return ""
}

// lower returns a copy of path p, lower-cased unless the app is
// case-sensitive, as Fiber compares paths.
func (r view[C, F, Q]) lower(p string) string { return pathCopy(p, !r.f().CaseSensitive(r.c)) }

// Value returns the value of c.Locals(key), else of the context; a string
// is copied, as a middleware may have stored one read from the request.
func (r view[C, F, Q]) Value(key any) any {
	v := r.c.Locals(key)
	if v == nil {
		v = r.f().Context(r.c).Value(key)
	}
	if s, ok := v.(string); ok {
		return strings.Clone(s)
	}
	return v
}
