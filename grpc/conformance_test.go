package ratekitgrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/adaptertest"
	ratekitgrpc "github.com/ratekit/ratekit/grpc"
)

// TestConformance runs the call table of package adaptertest through the
// unary interceptors, on a grpc.Server of 127.0.0.1 and a client
// connection for each peer the calls come from.
func TestConformance(t *testing.T) { adaptertest.RunCalls(t, mountCalls) }

// callsService is adaptertest.CallService, registered by hand: its
// methods reply the text of the decision in the call's context, "ok" when
// there is none.
var callsService = grpc.ServiceDesc{
	ServiceName: adaptertest.CallService,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Echo", Handler: callsMethod("Echo")}, {MethodName: "Other", Handler: callsMethod("Other")}},
}

func callsMethod(name string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) {
			return wrapperspb.String(adaptertest.Body(ratekitgrpc.DecisionFrom(ctx))), nil
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + adaptertest.CallService + "/" + name}, h)
	}
}

// The status messages and the violation description of the package's
// answers, the same for every call: the table checks that they are fixed,
// and these that they are the documented words.
var (
	messages = map[codes.Code]string{
		codes.ResourceExhausted: "ratekit: rate limit exceeded",
		codes.Unavailable:       "ratekit: rate limiter unavailable",
		codes.InvalidArgument:   "ratekit: the call has no value to be rate limited by",
		codes.Internal:          "ratekit: rate limit unavailable for this call",
	}
	description = "rate limit exceeded"
)

// first returns the first value of the call's incoming metadata name, ""
// when it has none.
func first(ctx context.Context, name string) string {
	if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// mountCalls builds the interceptor s says, serves callsService through it
// and returns the caller of the table.
func mountCalls(t *testing.T, s adaptertest.CallScenario) adaptertest.Caller {
	var key ratekitgrpc.Key // a nil s.Key stays nil: the interceptor must panic
	switch s.By {
	case adaptertest.ByKey:
		if s.Key != nil {
			key = func(ctx context.Context, _ string) (string, error) { return s.Key(first(ctx, adaptertest.KeyMetadata)) }
		}
	case adaptertest.ByPeerIP:
		key = ratekitgrpc.PeerIP
	case adaptertest.ByIP:
		var err error
		if key, err = ratekitgrpc.IP(s.IPOptions...); err != nil {
			t.Fatal(err)
		}
	case adaptertest.ByHeader:
		key = ratekitgrpc.Metadata(adaptertest.KeyMetadata)
	default:
		t.Fatalf("no key function for %v", s.By)
	}
	opts := []ratekitgrpc.Option{ratekitgrpc.WithHeaders(s.Headers), ratekitgrpc.WithLogger(s.Logger)}
	if s.Skip != nil {
		opts = append(opts, ratekitgrpc.WithSkipper(func(ctx context.Context, _ string) bool { return s.Skip(first(ctx, adaptertest.SkipMetadata)) }))
	}
	if s.Methods != nil {
		opts = append(opts, ratekitgrpc.WithMethods(s.Methods...))
	}
	if s.Cost != nil {
		opts = append(opts, ratekitgrpc.WithCost(func(ctx context.Context, _ string) int { return s.Cost(first(ctx, adaptertest.CostMetadata)) }))
	}
	if s.DecisionInContext {
		opts = append(opts, ratekitgrpc.WithDecisionInContext())
	}
	var ic grpc.UnaryServerInterceptor
	if s.Rules {
		ic = ratekitgrpc.UnaryRules(s.Engine, opts...)
	} else {
		ic = ratekitgrpc.UnaryServerInterceptor(s.Limiter, key, opts...)
	}

	lis, err := net.Listen("tcp", adaptertest.ClientPeer+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(ic))
	srv.RegisterService(&callsService, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	conn := func(peer string) *grpc.ClientConn {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := conns[peer]; ok {
			return c
		}
		c, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return adaptertest.DialFrom(ctx, peer, addr)
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[peer] = c
		return c
	}

	return func(c adaptertest.Call) adaptertest.Answer {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.NewOutgoingContext(ctx, metadata.MD(c.Metadata).Copy())
		out := new(wrapperspb.StringValue)
		var header metadata.MD
		err := conn(c.Peer).Invoke(ctx, c.Method, wrapperspb.String("hi"), out, grpc.Header(&header))
		st, ok := status.FromError(err)
		if !ok {
			t.Fatalf("call %s: %v is no status", c.Method, err)
		}
		a := adaptertest.Answer{Code: st.Code().String(), Message: st.Message(), Header: header}
		if want, ok := messages[st.Code()]; ok && st.Message() != want {
			t.Errorf("call %s: %s %q, want %q", c.Method, st.Code(), st.Message(), want)
		}
		if err == nil {
			a.Reply = out.GetValue()
		}
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				a.RetryInfo, a.RetryDelay = true, d.GetRetryDelay().AsDuration()
			case *errdetails.QuotaFailure:
				a.QuotaFailure = []adaptertest.Violation{}
				for _, v := range d.GetViolations() {
					a.QuotaFailure = append(a.QuotaFailure, adaptertest.Violation{Subject: v.GetSubject(), Description: v.GetDescription()})
					if v.GetDescription() != description {
						t.Errorf("call %s: violation description %q, want %q", c.Method, v.GetDescription(), description)
					}
				}
			default:
				t.Errorf("call %s: a detail %v", c.Method, d)
			}
		}
		return a
	}
}
