package ratekitecho

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
)

// kept returns the number of handlers cs keeps.
func (cs *chains) kept() (n int) {
	for i := range cs.slots {
		if cs.slots[i].Load() != nil {
			n++
		}
	}
	return n
}

// TestChainsKeepNoOptions: a handler is kept for the route's handler,
// which the router found, but not for its answer to OPTIONS, which it may
// build for the request (TestChainsOnEcho has the rest).
func TestChainsKeepNoOptions(t *testing.T) {
	for method, want := range map[string]int{http.MethodGet: 1, http.MethodOptions: 0} {
		cs := &chains{serve: func(c echo.Context, next echo.HandlerFunc) error { return next(c) }}
		reached := false
		next := func(echo.Context) error { reached = true; return nil }
		c := echo.New().NewContext(httptest.NewRequest(method, "/", nil), httptest.NewRecorder())
		c.SetHandler(next) // as the router's Find does
		if err := cs.handler(next)(c); err != nil || !reached {
			t.Fatalf("%s: next not reached (%v)", method, err)
		}
		if n := cs.kept(); n != want {
			t.Errorf("%s: %d handlers kept, want %d", method, n, want)
		}
	}
}

// TestChainsOnEcho: on a real Echo with more routes than the table has
// slots, one in five with a route middleware after ratekit's, whose next
// handler Echo builds for every request, served from 8 goroutines at once
// (run with -race): every request reaches its own route, under a kept
// handler where ratekit is the innermost middleware. In e.Pre, or in front
// of another middleware, it keeps none.
func TestChainsOnEcho(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(1_000_000)}))
	noop := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(c) }
	}
	for _, tc := range []struct {
		name  string
		mount func(e *echo.Echo, mw echo.MiddlewareFunc)
		keeps bool
	}{
		{"innermost", func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(noop, mw) }, true},
		{"pre", func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Pre(mw) }, false},
		{"in front", func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw, noop) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := mount(Config{}.kit().Limit(lim, Key(PeerIP).of))
			e := echo.New()
			tc.mount(e, cs.handler)
			const routes = 3 * chainSlots
			for i := range routes {
				h := func(c echo.Context) error { return c.String(http.StatusOK, strconv.Itoa(i)) }
				if i%5 == 0 {
					e.GET("/"+strconv.Itoa(i), h, noop)
				} else {
					e.GET("/"+strconv.Itoa(i), h)
				}
			}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 1000 {
						i, rec := strconv.Itoa((g*31+j*7)%routes), httptest.NewRecorder()
						e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+i, nil))
						if rec.Code != http.StatusOK || rec.Body.String() != i || rec.Header().Get("X-Ratelimit-Limit") == "" {
							t.Errorf("request %d to /%s: %d %q, limit %q", j, i, rec.Code, rec.Body.String(), rec.Header().Get("X-Ratelimit-Limit"))
							return
						}
						if j%200 == 0 {
							runtime.GC()
						}
					}
				}()
			}
			wg.Wait()
			if n := cs.kept(); tc.keeps != (n > 0) || n > chainSlots {
				t.Fatalf("%d handlers kept", n)
			}
		})
	}
}
