package readme

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ratekit/ratekit/core"
)

// TestFrameworkClientIPs serves the README's framework-native client-IP
// keys on real listeners, at a limit of 3: six requests from one client
// that rotates X-Forwarded-For and X-Real-IP get 3 through, and so do six
// from one client behind the proxy (the proxy at 10.0.0.2 appends it to
// X-Forwarded-For and writes it over X-Real-IP), whatever it forged.
func TestFrameworkClientIPs(t *testing.T) {
	t.Parallel()
	limit := func() *core.Limiter {
		return core.Must(core.NewLimiter(core.Limit{Algorithm: core.FixedWindow, Rate: core.PerHour(3)}))
	}
	forged := func(i int) string { return "198.51.100." + strconv.Itoa(i+1) }
	direct := func(t *testing.T, c *tclient) {
		passed := 0
		for i := range 6 {
			if c.send("GET", "/", "X-Forwarded-For", forged(i), "X-Real-IP", forged(i)).status == http.StatusOK {
				passed++
			}
		}
		if passed != 3 {
			t.Errorf("direct: %d of 6 passed, want 3", passed)
		}
	}
	viaProxy := func(t *testing.T, h http.Handler) {
		passed := 0
		for i := range 6 {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "10.0.0.2:4711"
			r.Header.Set("X-Forwarded-For", forged(i)+", 203.0.113.50")
			r.Header.Set("X-Real-IP", "203.0.113.50")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == http.StatusOK {
				passed++
			}
		}
		if passed != 3 {
			t.Errorf("via proxy: %d of 6 passed, want 3", passed)
		}
	}
	t.Run("gin", func(t *testing.T) {
		r, err := ginClientIP(limit())
		if err != nil {
			t.Fatal(err)
		}
		direct(t, serveHTTP(t, r))
		r, _ = ginClientIP(limit())
		viaProxy(t, r)
	})
	t.Run("echo", func(t *testing.T) {
		e, err := echoClientIP(limit())
		if err != nil {
			t.Fatal(err)
		}
		direct(t, serveHTTP(t, e))
		e, _ = echoClientIP(limit())
		viaProxy(t, e)
	})
	t.Run("fiber", func(t *testing.T) {
		app, err := fiberClientIP(limit())
		if err != nil {
			t.Fatal(err)
		}
		direct(t, serveFiber(t, app))
	})
	t.Run("chi", func(t *testing.T) {
		r, err := chiTrustedIP(limit())
		if err != nil {
			t.Fatal(err)
		}
		direct(t, serveHTTP(t, r))
		r, _ = chiTrustedIP(limit())
		viaProxy(t, r)
	})
}
