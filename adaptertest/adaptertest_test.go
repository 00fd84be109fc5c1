package adaptertest_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestStdhttp runs the scenarios, the conformance table and the rules
// scenarios included, on stdhttp itself, mounted on a ServeMux: the
// reference must agree with itself, and the scenarios' expectations with
// the reference.
func TestStdhttp(t *testing.T) {
	adaptertest.RunScenarios(t, mountStdhttp(func(_ *testing.T, h http.Handler) adaptertest.Serve { return adaptertest.Handler(h) }))
}

// TestWire runs the scenarios on stdhttp served through Wire, by a server
// that reads the request from the connection (the peer its RemoteAddr):
// Wire hands over the peer, every header line and the body.
func TestWire(t *testing.T) {
	adaptertest.RunScenarios(t, mountStdhttp(func(t *testing.T, h http.Handler) adaptertest.Serve {
		return adaptertest.Wire(t, func(c net.Conn) error {
			r, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return err
			}
			r.RemoteAddr = c.RemoteAddr().String()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Result().Write(c)
		})
	}))
}

// mountStdhttp returns the mount of stdhttp whose app serve serves.
func mountStdhttp(serve func(*testing.T, http.Handler) adaptertest.Serve) adaptertest.ScenarioMount {
	return func(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
		var key func(*http.Request) (string, error)
		switch s.By {
		case adaptertest.ByKey:
			if s.Key != nil {
				key = func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyHeader)) }
			}
		case adaptertest.ByPeerIP:
			key = keyfuncs.PeerIP
		case adaptertest.ByIP:
			var err error
			if key, err = keyfuncs.IP(s.IPOptions...); err != nil {
				t.Fatal(err)
			}
		case adaptertest.ByHeader:
			key = keyfuncs.Header(adaptertest.KeyHeader)
		case adaptertest.ByUser:
			key = keyfuncs.User(adaptertest.UserKey)
		}
		opts := []stdhttp.Option{stdhttp.WithHeaders(s.Headers), stdhttp.WithLogger(s.Logger)}
		if s.Skip != nil {
			opts = append(opts, stdhttp.WithSkipper(func(r *http.Request) bool { return s.Skip(r.Header.Get(adaptertest.SkipHeader)) }))
		}
		if s.Cost != nil {
			opts = append(opts, stdhttp.WithCost(func(r *http.Request) int { return s.Cost(r.Header.Get(adaptertest.CostHeader)) }))
		}
		if s.Denied != nil {
			opts = append(opts, stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
				status, body := s.Denied(d)
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			}))
		}
		if s.OnError != nil {
			opts = append(opts, stdhttp.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				status, body := s.OnError(err)
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			}))
		}
		if s.Queue != nil {
			opts = append(opts, stdhttp.WithQueue(s.Queue))
		}
		if s.NilOptions {
			opts = append(opts, stdhttp.WithSkipper(nil), stdhttp.WithCost(nil), stdhttp.WithDeniedHandler(nil), stdhttp.WithErrorHandler(nil))
		}
		if s.DecisionInContext {
			opts = append(opts, stdhttp.WithDecisionInContext())
		}
		var limit func(http.Handler) http.Handler
		if s.Rules {
			limit = stdhttp.Rules(s.Engine, opts...)
		} else {
			limit = stdhttp.New(s.Limiter, key, opts...)
		}

		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, adaptertest.Body(stdhttp.DecisionFrom(r.Context())))
		})
		mux := http.NewServeMux()
		for _, rt := range adaptertest.Routes {
			pattern := rt.Method + " " + rt.Path
			if rt.Path == "/" {
				pattern += "{$}" // the root alone
			}
			mux.Handle(pattern, handler)
		}
		if s.Group != nil {
			mux.Handle("GET "+adaptertest.GroupPrefix+"/items", stdhttp.New(s.Group, key, opts...)(handler))
		}
		app := limit(mux)
		return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { // the app's middleware
			ctx := r.Context()
			if u := r.Header.Get(adaptertest.UserHeader); u != "" {
				//lint:ignore SA1029 the scenarios' key, a string as Gin's and Echo's keys are
				ctx = context.WithValue(ctx, adaptertest.UserKey, u)
			}
			if s.Context != nil {
				ctx = s.Context(ctx)
			}
			app.ServeHTTP(w, r.WithContext(ctx))
		}))
	}
}

// TestStdhttpLimitByIP runs the shorthand's checks on stdhttp.LimitByIP.
func TestStdhttpLimitByIP(t *testing.T) {
	adaptertest.RunLimitByIP(t, func(t *testing.T, count int, period time.Duration) adaptertest.Serve {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		return adaptertest.Handler(stdhttp.LimitByIP(count, period)(mux))
	})
}
