package adaptertest_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestStdhttp runs the suite on stdhttp itself, mounted on a ServeMux: the
// reference must agree with itself.
func TestStdhttp(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) adaptertest.Serve {
		opts := []stdhttp.Option{stdhttp.WithHeaders(s.Headers), stdhttp.WithLogger(s.Logger)}
		if s.DecisionInContext {
			opts = append(opts, stdhttp.WithDecisionInContext())
		}
		key := func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
		mux := http.NewServeMux()
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, adaptertest.Body(stdhttp.DecisionFrom(r.Context())))
		})
		return adaptertest.Handler(stdhttp.New(s.Limiter, key, opts...)(mux))
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

// TestStdhttpLimitByIP runs the shorthand's checks on stdhttp.LimitByIP.
func TestStdhttpLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		return adaptertest.Handler(stdhttp.LimitByIP(count, period)(mux))
	})
}
