package ratekitecho

import (
	"sync/atomic"
	"unsafe"

	"github.com/labstack/echo/v4"
)

// Echo v4 applies middleware anew for every request (applyMiddleware in
// ServeHTTP, and in each route for group and route middleware): it calls
// every MiddlewareFunc with the handler after it, and the handler that a
// MiddlewareFunc returns must hold that next handler, which costs a
// closure, one allocation per middleware per request.
//
// Yet the next handler is often the same function value request after
// request: the route's handler when ratekit is the innermost middleware
// (after Logger and Recover, or the only one), since Echo keeps each
// route's handler for the life of the route. A chains remembers the
// handlers it built for such next handlers and returns the one built
// before, so that a request costs no allocation of ratekit's. A next
// handler built anew for every request (a middleware after ratekit's)
// is never the same twice, and gets a new closure each time, as without
// the cache.
//
// A function value is a pointer to its closure (code and captured
// variables). A built chain holds its next handler, so the closure at
// that address stays alive and cannot be replaced by another while the
// chain is kept: the same address is the same function, with the same
// captured variables.
type chains struct {
	slots [chainSlots]chainSlot
}

const chainSlots = 64 // a power of two; 1 KiB per middleware

type chainSlot struct {
	built atomic.Pointer[chain]
	// seen is the address of the last next handler that missed this
	// slot: a hint, never dereferenced. A handler is kept when its next
	// handler misses twice in a row, so that next handlers built for one
	// request only do not take slots (each would cost an allocation).
	seen atomic.Uintptr
}

type chain struct {
	next echo.HandlerFunc // keeps the closure at addr alive
	addr uintptr
	h    echo.HandlerFunc
}

// funcAddr returns the address of f's closure.
func funcAddr(f echo.HandlerFunc) uintptr {
	return uintptr(*(*unsafe.Pointer)(unsafe.Pointer(&f)))
}

// handler returns build(next), or the handler that build returned for
// this next handler before.
func (cs *chains) handler(next echo.HandlerFunc, build func(next echo.HandlerFunc) echo.HandlerFunc) echo.HandlerFunc {
	a := funcAddr(next)
	s := &cs.slots[(uint64(a)*0x9e3779b97f4a7c15)>>58%chainSlots] // Fibonacci hashing: the top 6 bits
	if c := s.built.Load(); c != nil && c.addr == a {
		return c.h
	}
	h := build(next)
	if s.seen.Load() == a {
		s.built.Store(&chain{next: next, addr: a, h: h})
	} else {
		s.seen.Store(a)
	}
	return h
}
