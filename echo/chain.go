package ratekitecho

import (
	"net/http"
	"sync/atomic"
	"unsafe"

	"github.com/labstack/echo/v4"
)

// chains keeps the handlers that a middleware built for route handlers,
// so that Echo v4, which applies middleware anew for every request, does
// not cost it a closure (holding next) per request.
//
// When ratekit is the innermost middleware, its next handler is the
// handler the router found, c.Handler(): the same function value for
// every request to the route. A handler learns this on the request it
// serves, and keeps a handler for that next handler in the table if its
// slot is free. Next handlers that Echo builds for one request are never
// c.Handler(), so they are never kept. A kept handler holds its next
// handler, so no other closure can take that address while it is kept. A
// slot, once taken, stays with its route; routes whose slot another took
// get a closure per request, as without the table.
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
