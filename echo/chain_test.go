package ratekitecho

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
)

// next returns a handler that records id in *got: closures of one
// function literal, told apart only by what they captured.
func next(id int, got *int) echo.HandlerFunc {
	return func(echo.Context) error { *got = id; return nil }
}

func TestChainsReuseOnlyTheSameNext(t *testing.T) {
	var cs chains
	builds := 0
	build := func(n echo.HandlerFunc) echo.HandlerFunc {
		builds++
		return func(c echo.Context) error { return n(c) }
	}
	var got int
	a, b := next(1, &got), next(2, &got)
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())

	// a is built on its first two requests, and kept on the second.
	for i, want := range []int{1, 2, 2, 2} {
		h := cs.handler(a, build)
		if err := h(c); err != nil || got != 1 {
			t.Fatalf("request %d to a: reached %d (%v)", i, got, err)
		}
		if builds != want {
			t.Fatalf("request %d to a: %d builds, want %d", i, builds, want)
		}
	}
	// b, a closure of the same literal and code as a, is never taken for it,
	// whichever slot it hashes to; a stays kept unless b takes its slot.
	for i := range 4 {
		if err := cs.handler(b, build)(c); err != nil || got != 2 {
			t.Fatalf("request %d to b: reached %d (%v)", i, got, err)
		}
		if err := cs.handler(a, build)(c); err != nil || got != 1 {
			t.Fatalf("request %d to a after b: reached %d (%v)", i, got, err)
		}
	}
	// Handlers made for one request only are built every time.
	builds = 0
	for i := range 100 {
		n := next(100+i, &got)
		if err := cs.handler(n, build)(c); err != nil || got != 100+i {
			t.Fatalf("one-off handler %d: reached %d (%v)", i, got, err)
		}
	}
	if builds != 100 {
		t.Fatalf("100 one-off handlers: %d builds", builds)
	}
}

// TestChainsConcurrent: many routes, kept and one-off handlers, served
// at once by one middleware; each request reaches its own handler. Run
// with -race.
func TestChainsConcurrent(t *testing.T) {
	var cs chains
	build := func(n echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return n(c) }
	}
	const routes = 200 // more than chainSlots: slots are shared and replaced
	handlers := make([]echo.HandlerFunc, routes)
	for i := range handlers {
		handlers[i] = func(c echo.Context) error { return fmt.Errorf("%d", i) }
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 2000 {
				i := (g*31 + j*7) % routes
				n := handlers[i]
				if j%5 == 0 { // a one-off handler, as a middleware after ratekit makes
					n = func(c echo.Context) error { return handlers[i](c) }
				}
				if err := cs.handler(n, build)(nil); err == nil || err.Error() != fmt.Sprint(i) {
					t.Errorf("goroutine %d, request %d to route %d: reached %v", g, j, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
