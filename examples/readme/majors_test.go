package readme

import (
	"net"
	"net/http"
	"testing"

	fiber3 "github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
)

func init() {
	frameworks = append(frameworks,
		framework{"echo5", func(t *testing.T, lim, login *core.Limiter) *tclient { return serveHTTP(t, echo5Server(lim, login)) }, jsonRemaining},
		framework{"fiber3", func(t *testing.T, lim, login *core.Limiter) *tclient { return serveFiber3(t, fiber3App(lim, login)) }, jsonRemaining},
	)
}

// serveFiber3 serves a Fiber v3 app on a real listener for the test.
func serveFiber3(t *testing.T, app *fiber3.App) *tclient {
	listen := func(ln net.Listener) error {
		return app.Listener(ln, fiber3.ListenConfig{DisableStartupMessage: true})
	}
	return serveListener(t, listen, app.ShutdownWithTimeout)
}

// TestOneLine serves the one-line quick start of every framework on a real
// listener: 100 requests a minute from the client, then 429.
func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T) *tclient
	}{
		{"net/http", func(t *testing.T) *tclient { return serveHTTP(t, onelineStdhttp()) }},
		{"gin", func(t *testing.T) *tclient { return serveHTTP(t, onelineGin()) }},
		{"echo", func(t *testing.T) *tclient { return serveHTTP(t, onelineEcho()) }},
		{"echo5", func(t *testing.T) *tclient { return serveHTTP(t, onelineEcho5()) }},
		{"fiber", func(t *testing.T) *tclient { return serveFiber(t, onelineFiber()) }},
		{"fiber3", func(t *testing.T) *tclient { return serveFiber3(t, onelineFiber3()) }},
		{"chi", func(t *testing.T) *tclient { return serveHTTP(t, onelineChi()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.serve(t)
			clearOfMinute() // a sliding window counter: 100 within one window
			for i := range 100 {
				r := c.send("GET", "/")
				if got := admitted(t, "GET /", r, 100); got != 99-i || r.body != hello {
					t.Fatalf("request %d: remaining %d, body %q; want %d, %q", i+1, got, r.body, 99-i, hello)
				}
			}
			r := c.send("GET", "/")
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("request 101: status %d, want 429", r.status)
			}
			rejected(t, "request 101", r, 100)
		})
	}
}
