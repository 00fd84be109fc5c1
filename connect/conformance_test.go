package ratekitconnect_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitconnect "github.com/ratekit/ratekit/connect"
)

// TestConformance runs the call table of package adaptertest through the
// interceptor, on a server of 127.0.0.1 that speaks HTTP/1.1 and
// unencrypted HTTP/2, once for clients of each protocol that the table's
// answers differ by: Connect's (its errors an HTTP status and a JSON
// body, its metadata HTTP headers) and gRPC's (a status in the trailers,
// or a trailers-only response).
func TestConformance(t *testing.T) {
	for _, p := range []protocol{connectProtocol, grpcProtocol} {
		t.Run(p.name, func(t *testing.T) { adaptertest.RunCalls(t, mountCalls(p)) })
	}
}

// callsHandler is the handler of adaptertest.CallService's method full
// (MethodEcho, MethodOther): it replies the text of the decision in the
// call's context, "ok" when there is none.
func callsHandler(full string, opts ...connect.HandlerOption) (string, http.Handler) {
	return full, connect.NewUnaryHandler(full, func(ctx context.Context, _ *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		return connect.NewResponse(wrapperspb.String(adaptertest.Body(ratekitconnect.DecisionFrom(ctx)))), nil
	}, opts...)
}

// The error messages and the violation description of the package's
// answers, the same for every call: the table checks that they are fixed,
// and these that they are the documented words.
var (
	callMessages = map[connect.Code]string{
		connect.CodeResourceExhausted: "ratekit: rate limit exceeded",
		connect.CodeUnavailable:       "ratekit: rate limiter unavailable",
		connect.CodeInvalidArgument:   "ratekit: the call has no value to be rate limited by",
		connect.CodeInternal:          "ratekit: rate limit unavailable for this call",
	}
	callDescription = "rate limit exceeded"
)

// codeName returns the name of code as gRPC spells it, the names of
// adaptertest's Code constants: connect.CodeResourceExhausted's
// "resource_exhausted" is "ResourceExhausted".
func codeName(code connect.Code) string {
	words := strings.Split(code.String(), "_")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, "")
}

// lowerKeys returns h with its keys in lower case, every value of each.
func lowerKeys(h http.Header) map[string][]string {
	m := make(map[string][]string, len(h))
	for k, vs := range h {
		k = strings.ToLower(k)
		m[k] = append(m[k], vs...)
	}
	return m
}

// mountCalls returns the mount of the table for clients of protocol p: it
// builds the interceptor s says, serves adaptertest.CallService through it
// and returns the caller of the table.
func mountCalls(p protocol) adaptertest.CallMount {
	return func(t *testing.T, s adaptertest.CallScenario) adaptertest.Caller {
		var key ratekitconnect.Key // a nil s.Key stays nil: New must panic
		switch s.By {
		case adaptertest.ByKey:
			if s.Key != nil {
				key = func(_ context.Context, call ratekitconnect.Call) (string, error) {
					return s.Key(call.Header.Get(adaptertest.KeyMetadata))
				}
			}
		case adaptertest.ByPeerIP:
			key = ratekitconnect.PeerIP
		case adaptertest.ByIP:
			var err error
			if key, err = ratekitconnect.IP(s.IPOptions...); err != nil {
				t.Fatal(err)
			}
		case adaptertest.ByHeader:
			key = ratekitconnect.Header(adaptertest.KeyMetadata)
		default:
			t.Fatalf("no key function for %v", s.By)
		}
		opts := []ratekitconnect.Option{ratekitconnect.WithHeaders(s.Headers), ratekitconnect.WithLogger(s.Logger)}
		if s.Skip != nil {
			opts = append(opts, ratekitconnect.WithSkipper(func(_ context.Context, call ratekitconnect.Call) bool {
				return s.Skip(call.Header.Get(adaptertest.SkipMetadata))
			}))
		}
		if s.Methods != nil {
			opts = append(opts, ratekitconnect.WithMethods(s.Methods...))
		}
		if s.Cost != nil {
			opts = append(opts, ratekitconnect.WithCost(func(_ context.Context, call ratekitconnect.Call) int {
				return s.Cost(call.Header.Get(adaptertest.CostMetadata))
			}))
		}
		if s.DecisionInContext {
			opts = append(opts, ratekitconnect.WithDecisionInContext())
		}
		var ic connect.Interceptor
		if s.Rules {
			ic = ratekitconnect.Rules(s.Engine, opts...)
		} else {
			ic = ratekitconnect.New(s.Limiter, key, opts...)
		}

		mux := http.NewServeMux()
		mux.Handle(callsHandler(adaptertest.MethodEcho, connect.WithInterceptors(ic)))
		mux.Handle(callsHandler(adaptertest.MethodOther, connect.WithInterceptors(ic)))
		srv := httptest.NewUnstartedServer(mux)
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
		t.Cleanup(srv.Close)
		if host, _, _ := net.SplitHostPort(srv.Listener.Addr().String()); host != adaptertest.ClientPeer {
			t.Fatalf("the server listens on %s, not %s", host, adaptertest.ClientPeer)
		}

		var mu sync.Mutex
		clients := map[string]*http.Client{}
		client := func(peer string) *http.Client {
			mu.Lock()
			defer mu.Unlock()
			if c, ok := clients[peer]; ok {
				return c
			}
			tr := &http.Transport{
				Protocols: new(http.Protocols),
				DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
					return adaptertest.DialFrom(ctx, peer, addr)
				},
			}
			tr.Protocols.SetUnencryptedHTTP2(true)
			t.Cleanup(tr.CloseIdleConnections)
			clients[peer] = &http.Client{Transport: tr}
			return clients[peer]
		}

		return func(c adaptertest.Call) adaptertest.Answer {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := connect.NewRequest(wrapperspb.String("hi"))
			for name, vs := range c.Metadata {
				for _, v := range vs {
					req.Header().Add(name, v)
				}
			}
			cl := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](client(c.Peer), srv.URL+c.Method, p.opts...)
			resp, err := cl.CallUnary(ctx, req)
			if err == nil {
				return adaptertest.Answer{Code: adaptertest.CodeOK, Reply: resp.Msg.GetValue(), Header: lowerKeys(resp.Header())}
			}
			var cerr *connect.Error
			if !errors.As(err, &cerr) || !connect.IsWireError(err) {
				t.Fatalf("call %s: %v is not the server's error", c.Method, err)
			}
			a := adaptertest.Answer{Code: codeName(cerr.Code()), Message: cerr.Message(), Header: lowerKeys(cerr.Meta())}
			if want, ok := callMessages[cerr.Code()]; ok && cerr.Message() != want {
				t.Errorf("call %s: %s %q, want %q", c.Method, cerr.Code(), cerr.Message(), want)
			}
			for _, d := range cerr.Details() {
				v, derr := d.Value()
				if derr != nil {
					t.Errorf("call %s: detail %s: %v", c.Method, d.Type(), derr)
					continue
				}
				switch v := v.(type) {
				case *errdetails.RetryInfo:
					a.RetryInfo, a.RetryDelay = true, v.GetRetryDelay().AsDuration()
				case *errdetails.QuotaFailure:
					a.QuotaFailure = []adaptertest.Violation{}
					for _, qv := range v.GetViolations() {
						a.QuotaFailure = append(a.QuotaFailure, adaptertest.Violation{Subject: qv.GetSubject(), Description: qv.GetDescription()})
						if qv.GetDescription() != callDescription {
							t.Errorf("call %s: violation description %q, want %q", c.Method, qv.GetDescription(), callDescription)
						}
					}
				default:
					t.Errorf("call %s: a detail %v", c.Method, v)
				}
			}
			return a
		}
	}
}
