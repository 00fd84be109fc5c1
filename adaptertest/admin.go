package adaptertest

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// OperatorAuth is the Authorization header an AdminMount's own
// authentication lets through; it answers 401 to anything else.
const OperatorAuth = "Bearer ops"

// An AdminMount builds a server of the framework under test: GET /hello
// limited by lim with the adapter's middleware, keyed by header
// KeyHeader, and ops (package admin's handler) mounted under
// /admin/ratekit/ through the framework's own wrapper, behind the
// framework's own middleware that answers 401 unless the request's
// Authorization header is OperatorAuth.
type AdminMount func(t *testing.T, lim *core.Limiter, ops http.Handler) Serve

// RunAdmin checks that the admin handler, mounted as the framework
// mounts net/http handlers, sees the full path and acts on the limiter
// the framework's middleware decides by: the app's authentication comes
// first; a client over its limit shows as such in its state; a reset lets
// it through again; a grant of 1 lets exactly one more request through;
// another method is 405.
func RunAdmin(t *testing.T, mount AdminMount) {
	clock := storetest.NewClock(storetest.Epoch) // stopped: the window never ends
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(slog.New(slog.DiscardHandler))))
	ops, err := admin.New(map[string]*core.Limiter{"api": lim})
	if err != nil {
		t.Fatal(err)
	}
	serve := mount(t, lim, ops)
	do := func(method, target, body string, operator bool) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set(KeyHeader, "k1")
		req.Header.Set("Content-Type", "application/json")
		if operator {
			req.Header.Set("Authorization", OperatorAuth)
		}
		res := serve(req)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	expect := func(step string, code int, body string, wantCode int, wantBody string) {
		t.Helper()
		if code != wantCode || !strings.Contains(body, wantBody) {
			t.Fatalf("%s: %d %s, want %d and %q", step, code, body, wantCode, wantBody)
		}
	}
	hello := func(step string, codes ...int) {
		t.Helper()
		for i, want := range codes {
			code, body := do(http.MethodGet, "/hello", "", false)
			expect(step+": request "+string(rune('1'+i)), code, body, want, "")
		}
	}
	const state = "/admin/ratekit/state?limiter=api&key=k1"

	hello("use the limit", 200, 200, 429)
	code, body := do(http.MethodGet, state, "", false)
	expect("state without the operator's authorization", code, body, http.StatusUnauthorized, "")
	code, body = do(http.MethodGet, state, "", true)
	expect("state", code, body, http.StatusOK, `"decision":{"name":"api","allowed":false,`)
	code, body = do(http.MethodPost, "/admin/ratekit/reset", `{"limiter":"api","key":"k1","reason":"test"}`, true)
	expect("reset", code, body, http.StatusOK, `"found":true`)
	hello("after the reset", 200, 200, 429)
	code, body = do(http.MethodPost, "/admin/ratekit/grant", `{"limiter":"api","key":"k1","amount":1,"reason":"test"}`, true)
	expect("grant", code, body, http.StatusOK, `"amount":1`)
	hello("after the grant", 200, 429)
	code, body = do(http.MethodPut, "/admin/ratekit/reset", "", true)
	expect("PUT", code, body, http.StatusMethodNotAllowed, "")
}
