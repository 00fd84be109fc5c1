// Package echoport is the port to package adapter that the Echo v4 and
// Echo v5 adapters share, generic over the request context of either
// major (echo.Context in v4, *echo.Context in v5) so that it imports
// neither: the port's request type [Call], its methods [Port], the view
// of a request that rules match, the mapping of an adapter's
// configuration onto adapter.Config, and the key of Echo's own client
// address under an instance's extractor, checked when the key is made and
// whenever the extractor changes ([ClientIP]).
//
// What differs between the majors stays in the adapters: their public
// API, how a flow is mounted as Echo middleware, and what their ClientIP
// probes and says.
package echoport

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Context is what the port reads of an Echo request context, which both
// majors' contexts have.
type Context interface {
	Request() *http.Request
	RealIP() string
	Path() string
	Get(key string) any
	Set(key string, val any)
}

// A Responder is a Context with its response, of type R: *echo.Response
// in Echo v4, http.ResponseWriter in Echo v5.
type Responder[R http.ResponseWriter] interface {
	Context
	Response() R
}

// A Call is the port's request type: an Echo request context and the
// handler after the middleware.
type Call[C any] struct {
	C    C
	Next func(C) error
}

// Port is Echo's adapter.Port, of the context C whose response is R.
type Port[C Responder[R], R http.ResponseWriter] struct {
	// DecisionKey is the key under which Keep stores a decision with
	// c.Set, and Decision reads it.
	DecisionKey string
}

// Context returns the context of x's request.
func (Port[C, R]) Context(x Call[C]) context.Context { return x.C.Request().Context() }

// Request returns the view of x's request that rules match (see request).
func (Port[C, R]) Request(x Call[C]) rules.Request { return request[C]{x.C} }

// Next calls the handler after the middleware.
func (Port[C, R]) Next(x Call[C]) error { return x.Next(x.C) }

// Stop returns err, the error of a context ended during a shaping hold,
// to e.HTTPErrorHandler, and nil for a request that the kit answers.
func (Port[C, R]) Stop(_ Call[C], err error) error { return err }

// Keep stores d in x's context with c.Set, where Decision reads it.
func (p Port[C, R]) Keep(x Call[C], d core.Decision) Call[C] {
	x.C.Set(p.DecisionKey, &d)
	return x
}

// Offer queues x's request with o.
func (Port[C, R]) Offer(x Call[C], o *queue.Offer, d core.Decision) queue.Reply {
	return o.ReplyTo(x.C.Request(), d)
}

// Header sets or removes a field of x's response header.
// HeaderMap is the response header of x, for adapter.HeaderPort.
func (Port[C, R]) HeaderMap(x Call[C]) http.Header { return x.C.Response().Header() }

func (Port[C, R]) Header(x Call[C], name string, v []string) {
	adapter.SetField(x.C.Response().Header(), name, v)
}

// Write writes the status and body of x's response.
func (Port[C, R]) Write(x Call[C], status int, body []byte) error {
	return adapter.WriteBody(x.C.Response(), status, body)
}

// Decision returns the decision that Keep stored in c, if any: an
// adapter's DecisionFrom.
func (p Port[C, R]) Decision(c C) (core.Decision, bool) {
	return adapter.Kept(c.Get(p.DecisionKey))
}

// Middleware returns the kit's middleware of p configured by cfg, whose
// functions take the context of a Call.
func (p Port[C, R]) Middleware(cfg adapter.Config[C]) *adapter.Middleware[Call[C]] {
	return adapter.New(adapter.Port[Call[C]](p), func(a *adapter.Config[Call[C]]) {
		if skip := cfg.Skip; skip != nil {
			a.Skip = func(x Call[C]) bool { return skip(x.C) }
		}
		if cost := cfg.Cost; cost != nil {
			a.Cost = func(x Call[C]) int { return cost(x.C) }
		}
		if denied := cfg.Denied; denied != nil {
			a.Denied = func(x Call[C], d core.Decision) error { return denied(x.C, d) }
		}
		if onError := cfg.OnError; onError != nil {
			a.OnError = func(x Call[C], err error) error { return onError(x.C, err) }
		}
		a.Queue, a.Headers, a.Logger, a.DecisionInContext = cfg.Queue, cfg.Headers, cfg.Logger, cfg.DecisionInContext
	})
}

// request is the rules.Request of an Echo request: the route is c.Path(),
// and Value reads c.Get for a string key, else the request's context. Of
// a pointer-shaped C (Echo v5), it converts to rules.Request for free.
type request[C Context] struct{ c C }

func (r request[C]) Context() context.Context { return r.c.Request().Context() }
func (r request[C]) Method() string           { return rules.HTTPRequest(r.c.Request()).Method() }
func (r request[C]) Path() string             { return rules.HTTPRequest(r.c.Request()).Path() }
func (r request[C]) EscapedPath() string      { return rules.HTTPRequest(r.c.Request()).EscapedPath() }
func (r request[C]) Route() string            { return r.c.Path() }
func (r request[C]) Values(name string) []string {
	return rules.HTTPRequest(r.c.Request()).Values(name)
}
func (r request[C]) Query(name string) string { return rules.HTTPRequest(r.c.Request()).Query(name) }
func (r request[C]) RemoteAddr() string       { return r.c.Request().RemoteAddr }

func (r request[C]) Value(key any) any {
	if k, ok := key.(string); ok {
		if v := r.c.Get(k); v != nil {
			return v
		}
	}
	return r.c.Request().Context().Value(key)
}

// ClientIP is the key of Echo's own client address under one Echo
// instance's e.IPExtractor, checked when it is made (Check) and again on
// the first request after the extractor changes. Its zero value is not
// usable: set every exported field, then call Check.
type ClientIP struct {
	// Package names the adapter's package in log lines.
	Package string
	// Extractor returns e.IPExtractor now.
	Extractor func() func(*http.Request) string
	// Default is the instance's resolution without an extractor (Echo v5:
	// the TCP peer), or nil where that resolution believes any client's
	// header (Echo v4): an instance without an extractor is then refused
	// with NoExtractor.
	Default     func(*http.Request) string
	NoExtractor error
	// Unsafe returns the error of an extractor whose probe failed with
	// err, which names the setting to change.
	Unsafe func(err error) error
	// Missing returns the error, wrapping keyfuncs.ErrMissing, of a client
	// address that is not an address.
	Missing func(ip string) error

	state   atomic.Pointer[extractorState]
	mu      sync.Mutex // held while checking
	refusal episode.Log
}

// An extractorState is the verdict on one extractor: refused is nil where
// it is safe. id identifies the extractor (see identity); keeping x keeps
// its memory, and so its identity, from being reused.
type extractorState struct {
	id      unsafe.Pointer
	x       func(*http.Request) string
	refused error
}

var peer, _ = adapter.NewClientIP()

// identity returns what tells one function value from another: the
// pointer to its closure (its code, for a function without captured
// variables), which is what a func value holds. reflect's Pointer gives
// only the code, the same for every extractor that one of Echo's
// constructors returns whatever its trust options.
func identity(f func(*http.Request) string) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&f))
}

// Check checks the extractor now in force and returns its error, if it
// believes a header from a peer that is no proxy (adapter.ProbeClientIP).
func (ci *ClientIP) Check() error {
	x := ci.Extractor()
	st := &extractorState{id: identity(x), x: x, refused: ci.check(x)}
	ci.state.Store(st)
	return st.refused
}

// check returns the error of the extractor x, or nil.
func (ci *ClientIP) check(x func(*http.Request) string) error {
	if x == nil {
		if ci.Default == nil {
			return ci.NoExtractor
		}
		x = ci.Default
	}
	err := adapter.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
		r, _ := http.NewRequest(http.MethodGet, "/", nil) // cannot fail
		r.RemoteAddr, r.Header = p.String(), h
		return x(r)
	})
	if err != nil {
		return ci.Unsafe(err)
	}
	return nil
}

// Key returns the key of r's client as the instance's extractor finds it,
// made canonical as keyfuncs.PeerIP's; a value that is not an address
// fails with ci.Missing (400), and a RemoteAddr without a port fails as
// adapter.CheckRemoteAddr says. Under an extractor that Check would
// refuse, set after it, the key is the TCP peer's, and the default logger
// receives one line when such an episode starts and one when it ends. It
// does not allocate for an IPv4 client unless the extractor does.
func (ci *ClientIP) Key(r *http.Request) (string, error) {
	st := ci.current()
	if err := adapter.CheckRemoteAddr(r.RemoteAddr); err != nil {
		return "", err // Echo takes a RemoteAddr without port for the peer
	}
	if st.refused != nil {
		if start, _ := ci.refusal.Fail(); start {
			slog.Default().Error(ci.Package+": ClientIP: e.IPExtractor changed and would let clients choose their key; "+
				"keying by the TCP peer until it is replaced by a safe one", "error", st.refused)
		}
		return peer.KeyFrom(r.RemoteAddr, nil)
	}
	x := st.x
	if x == nil {
		x = ci.Default
	}
	ip := strings.TrimSpace(x(r))
	k, err := peer.KeyFrom(ip, nil)
	if err != nil {
		return "", ci.Missing(ip)
	}
	return k, nil
}

// current returns the verdict on the extractor now in force, checking it
// if it changed.
func (ci *ClientIP) current() *extractorState {
	x := ci.Extractor()
	if st := ci.state.Load(); st.id == identity(x) {
		return st
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	x = ci.Extractor()
	if st := ci.state.Load(); st.id == identity(x) {
		return st
	}
	st := &extractorState{id: identity(x), x: x, refused: ci.check(x)}
	ci.state.Store(st)
	if st.refused == nil {
		if end, n := ci.refusal.Recover(); end {
			slog.Default().Info(ci.Package+": ClientIP: e.IPExtractor is safe again; keying by the client address it finds",
				"peer_keyed_requests", n)
		}
	}
	return st
}
