package ratekitecho

import (
	"net/http"
	"sync/atomic"
	"unsafe"

	"github.com/labstack/echo/v4"
)

// chains keeps the handlers that a middleware built for route handlers,
// so that Echo v4 does not cost it a closure per request.
//
// Echo v4 applies middleware anew for every request (applyMiddleware in
// ServeHTTP, and in each route for group and route middleware): it calls
// every MiddlewareFunc with the handler after it, and the handler that a
// MiddlewareFunc returns must hold that next handler: a closure, one
// allocation per middleware per request. When ratekit is the innermost
// middleware of e.Use (after Logger and Recover, or the only one), its
// next handler is the handler the router found for the request, which
// Echo keeps as long as the route: the same function value for every
// request to that route.
//
// A handler built for a next handler learns this on the request it
// serves: next is c.Handler(). It then keeps a handler for that next
// handler in the table, if its slot is free, and later requests to the
// route get the kept one. Next handlers that Echo builds for one request
// (the closure of a middleware after ratekit's, the chain of e.Pre, the
// answer to OPTIONS for a route without an OPTIONS handler) are never
// the router's handler of a route, so they are never kept and keep
// nothing alive. A kept handler holds its next handler, so the closure
// at that address stays alive and no other can take its place while it
// is kept: the same address is the same function, with the same
// captured variables. A slot, once taken, stays with its route; routes
// whose slot another took get a closure per request, as without the
// table.
type chains struct {
	serve func(c echo.Context, next echo.HandlerFunc) error
	slots [chainSlots]atomic.Pointer[chain]
}

const (
	chainBits  = 8
	chainSlots = 1 << chainBits // 2 KiB per middleware
)

// chain is a kept handler: h serves through the next handler, whose
// closure is at addr. h holds that closure, so no other can take its
// address while the chain is kept.
type chain struct {
	addr uintptr
	h    echo.HandlerFunc
}

// funcAddr returns the address of f's closure.
func funcAddr(f echo.HandlerFunc) uintptr {
	return uintptr(*(*unsafe.Pointer)(unsafe.Pointer(&f)))
}

func (cs *chains) slot(addr uintptr) *atomic.Pointer[chain] {
	return &cs.slots[(uint64(addr)*0x9e3779b97f4a7c15)>>(64-chainBits)] // Fibonacci hashing
}

// handler returns the handler of the middleware in front of next: the one
// kept for next, or a new one that serves through next by cs.serve.
func (cs *chains) handler(next echo.HandlerFunc) echo.HandlerFunc {
	addr := funcAddr(next)
	if k := cs.slot(addr).Load(); k != nil && k.addr == addr {
		return k.h
	}
	return func(c echo.Context) error {
		cs.keep(c, next)
		return cs.serve(c, next)
	}
}

// keep keeps a handler for next, when next is the handler that the router
// found for c and its slot is free.
func (cs *chains) keep(c echo.Context, next echo.HandlerFunc) {
	addr := funcAddr(next)
	s := cs.slot(addr)
	if s.Load() != nil || addr != funcAddr(c.Handler()) || c.Request().Method == http.MethodOptions {
		return // OPTIONS: the router may have built its answer for this request
	}
	k := &chain{addr: addr}
	k.h = func(c echo.Context) error { return cs.serve(c, next) }
	s.CompareAndSwap(nil, k)
}
