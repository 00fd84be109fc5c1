package ratekitecho

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
)

// to returns a handler that records id in *got: closures of one
// function literal, told apart only by what they captured.
func to(id int, got *int) echo.HandlerFunc {
	return func(echo.Context) error { *got = id; return nil }
}

// passing is the chains of a middleware that only calls next.
func passing() *chains {
	return &chains{serve: func(c echo.Context, next echo.HandlerFunc) error { return next(c) }}
}

// kept returns the number of handlers cs keeps.
func (cs *chains) kept() int {
	n := 0
	for i := range cs.slots {
		if cs.slots[i].Load() != nil {
			n++
		}
	}
	return n
}

// routed returns a context whose router found h (as Echo's Find sets it).
func routed(method string, h echo.HandlerFunc) echo.Context {
	c := echo.New().NewContext(httptest.NewRequest(method, "/", nil), httptest.NewRecorder())
	c.SetHandler(h)
	return c
}

func TestChainsKeepRouteHandlers(t *testing.T) {
	cs := passing()
	var got int
	a, b := to(1, &got), to(2, &got)
	ca, cb := routed(http.MethodGet, a), routed(http.MethodGet, b)

	first := cs.handler(a)
	if err := first(ca); err != nil || got != 1 {
		t.Fatalf("first request to a: reached %d (%v)", got, err)
	}
	// The first request taught the table that a is a route's handler.
	kept := cs.handler(a)
	if funcAddr(kept) == funcAddr(first) || funcAddr(cs.handler(a)) != funcAddr(kept) {
		t.Fatal("a's handler is not kept after its first request")
	}
	// b, a closure of the same literal and code as a, is never taken for
	// it, whichever slot it hashes to.
	for i := range 4 {
		if err := cs.handler(b)(cb); err != nil || got != 2 {
			t.Fatalf("request %d to b: reached %d (%v)", i, got, err)
		}
		if err := cs.handler(a)(ca); err != nil || got != 1 {
			t.Fatalf("request %d to a after b: reached %d (%v)", i, got, err)
		}
	}
	if n := cs.kept(); n != 1 && n != 2 { // 1 when b's slot is a's
		t.Fatalf("%d handlers kept for two routes", n)
	}
}

// TestChainsKeepNoOneOff: a next handler that is not the router's handler
// of the request (one made for this request only) is never kept, even
// when the collector frees it and the next one takes its address.
func TestChainsKeepNoOneOff(t *testing.T) {
	cs := passing()
	var got int
	route := to(0, &got)
	for i := range 2000 {
		n := func(c echo.Context) error { got = i; return nil }
		c := routed(http.MethodGet, route)
		if err := cs.handler(n)(c); err != nil || got != i {
			t.Fatalf("one-off handler %d: reached %d (%v)", i, got, err)
		}
		if i%50 == 0 {
			runtime.GC()
		}
	}
	// The router's answer to OPTIONS is built for the request too.
	for i := range 100 {
		n := func(c echo.Context) error { got = i; return nil }
		if err := cs.handler(n)(routed(http.MethodOptions, n)); err != nil || got != i {
			t.Fatalf("OPTIONS handler %d: reached %d (%v)", i, got, err)
		}
	}
	if n := cs.kept(); n != 0 {
		t.Fatalf("%d one-off handlers kept", n)
	}
}

// TestChainsOnEcho: on a real Echo, the middleware keeps a handler for
// each route it is the innermost middleware of, and nothing when it is in
// e.Pre or in front of another middleware, whose next handlers Echo
// builds for every request; every request reaches its own route.
func TestChainsOnEcho(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(1_000_000)}))
	noop := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(c) }
	}
	for _, tc := range []struct {
		name  string
		mount func(e *echo.Echo, mw echo.MiddlewareFunc)
		kept  int
	}{
		{"innermost", func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(noop, mw) }, 3},
		{"pre", func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Pre(mw) }, 0},
		{"in front", func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw, noop) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := mount(Config{}.kit().Limit(lim, Key(PeerIP).of))
			e := echo.New()
			tc.mount(e, cs.handler)
			for _, p := range []string{"/a", "/b", "/c"} {
				e.GET(p, func(c echo.Context) error { return c.String(http.StatusOK, p) })
			}
			for i := range 600 {
				p := []string{"/a", "/b", "/c"}[i%3]
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				if rec.Code != http.StatusOK || rec.Body.String() != p || rec.Header().Get("X-Ratelimit-Limit") == "" {
					t.Fatalf("request %d to %s: %d %q, limit %q", i, p, rec.Code, rec.Body.String(), rec.Header().Get("X-Ratelimit-Limit"))
				}
				if i%50 == 0 {
					runtime.GC()
				}
			}
			if n := cs.kept(); n > tc.kept || (tc.kept > 0 && n == 0) {
				t.Fatalf("%d handlers kept, want %d (fewer only if two routes share a slot)", n, tc.kept)
			}
		})
	}
}

// TestChainsConcurrent: many routes, more than the table has slots, and
// one-off handlers, served at once by one middleware; each request
// reaches its own handler. Run with -race.
func TestChainsConcurrent(t *testing.T) {
	cs := passing()
	const routes = 3 * chainSlots
	handlers := make([]echo.HandlerFunc, routes)
	for i := range handlers {
		handlers[i] = func(c echo.Context) error { return fmt.Errorf("%d", i) }
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 4000 {
				i := (g*31 + j*7) % routes
				n := handlers[i]
				if j%5 == 0 { // a one-off handler, as a middleware after ratekit makes
					n = func(c echo.Context) error { return handlers[i](c) }
				}
				c := routed(http.MethodGet, handlers[i])
				if err := cs.handler(n)(c); err == nil || err.Error() != fmt.Sprint(i) {
					t.Errorf("goroutine %d, request %d to route %d: reached %v", g, j, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := cs.kept(); n == 0 || n > chainSlots {
		t.Fatalf("%d handlers kept", n)
	}
}
