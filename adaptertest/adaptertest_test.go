package adaptertest_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestStdhttp runs the suite on stdhttp itself, mounted on a ServeMux: the
// reference must agree with itself.
func TestStdhttp(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, lim *core.Limiter, header string) adaptertest.Serve {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok")
		})
		return adaptertest.Handler(stdhttp.New(lim, keyfuncs.Header(header))(mux))
	})
}

// TestStdhttpRules runs the rules scenarios on stdhttp.Rules itself, in
// front of a ServeMux.
func TestStdhttpRules(t *testing.T) {
	adaptertest.RunRules(t, func(t *testing.T, e *rules.Engine) adaptertest.Serve {
		mux := http.NewServeMux()
		for _, route := range []string{"GET /{$}", "POST /login", "GET /api/items"} {
			mux.HandleFunc(route, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				_, _ = io.WriteString(w, "ok")
			})
		}
		return adaptertest.Handler(stdhttp.Rules(e)(mux))
	})
}
