package adaptertest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestCallsOverHTTP runs the call table on a port of its own: stdhttp's
// middleware as an RPC server over HTTP/1.1, a call a POST of its full
// method, its metadata the request's header fields, and its status and
// details written by the denied handler. The table must hold of it as of
// the RPC ports: its expectations agree with the reference.
func TestCallsOverHTTP(t *testing.T) { adaptertest.RunCalls(t, mountCallsOverHTTP) }

// The response header fields of the HTTP port's details.
const (
	retryDelayField   = "Rpc-Retry-Delay"   // the RetryInfo's delay in nanoseconds
	quotaSubjectField = "Rpc-Quota-Subject" // the QuotaFailure's one violation
)

func mountCallsOverHTTP(t *testing.T, s adaptertest.CallScenario) adaptertest.Caller {
	var key func(*http.Request) (string, error) // a nil s.Key stays nil: New must panic
	switch s.By {
	case adaptertest.ByKey:
		if s.Key != nil {
			key = func(r *http.Request) (string, error) { return s.Key(r.Header.Get(adaptertest.KeyMetadata)) }
		}
	case adaptertest.ByPeerIP:
		key = keyfuncs.PeerIP
	case adaptertest.ByIP:
		var err error
		if key, err = keyfuncs.IP(s.IPOptions...); err != nil {
			t.Fatal(err)
		}
	case adaptertest.ByHeader:
		key = keyfuncs.Header(adaptertest.KeyMetadata)
	default:
		t.Fatalf("no key function for %v", s.By)
	}
	opts := []stdhttp.Option{stdhttp.WithHeaders(s.Headers), stdhttp.WithLogger(s.Logger),
		stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			w.Header().Set(retryDelayField, strconv.FormatInt(int64(d.RetryAfter), 10))
			if d.Quota == 0 && d.ResetAfter == 0 { // the store failed, closed
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Header().Set(quotaSubjectField, d.Name)
			w.WriteHeader(http.StatusTooManyRequests)
		})}
	if s.Skip != nil {
		opts = append(opts, stdhttp.WithSkipper(func(r *http.Request) bool { return s.Skip(r.Header.Get(adaptertest.SkipMetadata)) }))
	}
	if s.Methods != nil {
		skip := methodSkipper(s.Methods)
		opts = append(opts, stdhttp.WithSkipper(func(r *http.Request) bool { return skip(r.URL.Path) }))
	}
	if s.Cost != nil {
		opts = append(opts, stdhttp.WithCost(func(r *http.Request) int { return s.Cost(r.Header.Get(adaptertest.CostMetadata)) }))
	}
	if s.DecisionInContext {
		opts = append(opts, stdhttp.WithDecisionInContext())
	}
	var mw func(http.Handler) http.Handler
	if s.Rules {
		mw = stdhttp.Rules(s.Engine, opts...)
	} else {
		mw = stdhttp.New(s.Limiter, key, opts...)
	}

	mux := http.NewServeMux()
	for _, m := range []string{adaptertest.MethodEcho, adaptertest.MethodOther} {
		mux.Handle("POST "+m, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, adaptertest.Body(stdhttp.DecisionFrom(r.Context())))
		})))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	var mu sync.Mutex
	clients := map[string]*http.Client{}
	client := func(peer string) *http.Client {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := clients[peer]; ok {
			return c
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return adaptertest.DialFrom(ctx, peer, addr)
		}}
		t.Cleanup(tr.CloseIdleConnections)
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		clients[peer] = c
		return c
	}

	return func(c adaptertest.Call) adaptertest.Answer {
		req, err := http.NewRequest(http.MethodPost, srv.URL+c.Method, strings.NewReader("hi"))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range c.Metadata {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		res, err := client(c.Peer).Do(req)
		if err != nil {
			t.Fatalf("call %s: %v", c.Method, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("call %s: %v", c.Method, err)
		}
		a := adaptertest.Answer{Code: adaptertest.CodeOf(res.StatusCode), Header: map[string][]string{}}
		if a.Code == "" {
			t.Fatalf("call %s: status %d", c.Method, res.StatusCode)
		}
		if a.Code == adaptertest.CodeOK {
			a.Reply = string(body)
		} else {
			a.Message = http.StatusText(res.StatusCode)
		}
		if v := res.Header.Get(retryDelayField); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("call %s: %s %q", c.Method, retryDelayField, v)
			}
			a.RetryInfo, a.RetryDelay = true, time.Duration(n)
		}
		if v := res.Header.Get(quotaSubjectField); v != "" {
			a.QuotaFailure = []adaptertest.Violation{{Subject: v, Description: "rate limit exceeded"}}
		}
		for k, vs := range res.Header {
			switch k {
			case retryDelayField, quotaSubjectField, "Content-Type", "Content-Length", "Cache-Control", "Date", "X-Content-Type-Options":
			default:
				a.Header[strings.ToLower(k)] = vs
			}
		}
		return a
	}
}

// methodSkipper returns whether a call's full method is none of methods,
// as WithMethods of an RPC port: "/pkg.Service/Method" or
// "pkg.Service/Method" a method, "/pkg.Service/" or "pkg.Service" every
// method of a service, "" none.
func methodSkipper(methods []string) func(method string) bool {
	exact := map[string]bool{}
	var services []string
	for _, m := range methods {
		if m = strings.TrimSpace(m); m == "" {
			continue
		}
		if !strings.HasPrefix(m, "/") {
			m = "/" + m
		}
		switch i := strings.Index(m[1:], "/"); {
		case i < 0:
			services = append(services, m+"/")
		case i == len(m)-2:
			services = append(services, m)
		default:
			exact[m] = true
		}
	}
	return func(method string) bool {
		if exact[method] {
			return false
		}
		for _, s := range services {
			if strings.HasPrefix(method, s) {
				return false
			}
		}
		return true
	}
}
