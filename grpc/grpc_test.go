package ratekitgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgrpc "github.com/ratekit/ratekit/grpc"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

var quiet = slog.New(slog.DiscardHandler)

// The test service, registered by hand: unary Echo and Other answer the
// request's value, or "remaining=N" when the call carries a decision;
// Watch (server streaming) answers its request's value three times;
// Upload (client streaming) answers the count of messages received;
// Tally (client streaming) drops the messages that RecvMsg rejects with
// ResourceExhausted and goes on, and answers "admitted/rejected".
var testService = grpc.ServiceDesc{
	ServiceName: "test.Svc",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Echo", Handler: unaryMethod("Echo")}, {MethodName: "Other", Handler: unaryMethod("Other")}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Watch", Handler: watch, ServerStreams: true},
		{StreamName: "Upload", Handler: upload, ClientStreams: true},
		{StreamName: "Tally", Handler: tally, ClientStreams: true},
	},
}

func unaryMethod(name string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			out := req.(*wrapperspb.StringValue).GetValue()
			if d, ok := ratekitgrpc.DecisionFrom(ctx); ok {
				out = fmt.Sprintf("remaining=%d", d.Remaining)
			}
			return wrapperspb.String(out), nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Svc/" + name}, h)
	}
}

func watch(_ any, ss grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	out := in.GetValue()
	if d, ok := ratekitgrpc.DecisionFrom(ss.Context()); ok {
		out = fmt.Sprintf("remaining=%d", d.Remaining)
	}
	for range 3 {
		if err := ss.SendMsg(wrapperspb.String(out)); err != nil {
			return err
		}
	}
	return nil
}

func upload(_ any, ss grpc.ServerStream) error {
	n := int64(0)
	for {
		in := new(wrapperspb.StringValue)
		err := ss.RecvMsg(in)
		if errors.Is(err, io.EOF) {
			return ss.SendMsg(wrapperspb.Int64(n))
		}
		if err != nil {
			return err
		}
		n++
	}
}

func tally(_ any, ss grpc.ServerStream) error {
	admitted, rejected := 0, 0
	for {
		in := new(wrapperspb.StringValue)
		err := ss.RecvMsg(in)
		switch {
		case errors.Is(err, io.EOF):
			return ss.SendMsg(wrapperspb.String(fmt.Sprintf("%d/%d", admitted, rejected)))
		case status.Code(err) == codes.ResourceExhausted:
			rejected++
		case err != nil:
			return err
		default:
			admitted++
		}
	}
}

// serve starts a server with opts on a TCP port of 127.0.0.1 and returns
// a client connection to it, with dial options copts.
func serve(t *testing.T, opts []grpc.ServerOption, copts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&testService, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, copts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func unaryServer(i ...grpc.UnaryServerInterceptor) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(i...)}
}

// echo calls method with value v and returns the reply, the header
// metadata and the error.
func echo(conn *grpc.ClientConn, ctx context.Context, method, v string) (string, metadata.MD, error) {
	out := new(wrapperspb.StringValue)
	var md metadata.MD
	err := conn.Invoke(ctx, "/test.Svc/"+method, wrapperspb.String(v), out, grpc.Header(&md))
	return out.GetValue(), md, err
}

// details returns the RetryInfo and QuotaFailure of err.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v is a status", err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// WithDecisionInContext: the handler reads the decision.
func TestDecisionFrom(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "api", Rate: core.PerMinute(5)})
	conn := serve(t, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP, ratekitgrpc.WithDecisionInContext())),
		grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP, ratekitgrpc.WithDecisionInContext())),
	})
	got, _, err := echo(conn, context.Background(), "Echo", "hi")
	require.NoError(t, err)
	assert.Equal(t, "remaining=4", got)
	replies, _, err := watchCall(conn, context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []string{"remaining=3", "remaining=3", "remaining=3"}, replies)
}

// IP reads x-forwarded-for only from a trusted peer: a forged one from an
// untrusted peer is ignored.
func TestIP(t *testing.T) {
	for _, c := range []struct {
		trusted string
		want    string
	}{
		{"10.0.0.0/8", "127.0.0.1"},
		{"127.0.0.1/32", "198.51.100.7"},
	} {
		ip, err := ratekitgrpc.IP(keyfuncs.TrustedProxies(c.trusted))
		require.NoError(t, err)
		keys := make(chan string, 1)
		key := func(ctx context.Context, m string) (string, error) {
			k, err := ip(ctx, m)
			keys <- k
			return k, err
		}
		lim := adaptertest.Limiter(t, nil, core.Limit{Name: "api", Rate: core.PerMinute(5)})
		conn := serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, key)))
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "203.0.113.9, 198.51.100.7")
		_, _, err = echo(conn, ctx, "Echo", "hi")
		require.NoError(t, err)
		assert.Equal(t, c.want, <-keys, "trusted %s", c.trusted)
	}
	_, err := ratekitgrpc.IP(keyfuncs.TrustedProxies("not an address"))
	assert.Error(t, err)
}

// The rules see the full method as the route, and the metadata as header
// fields.
func TestRules(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", Value: "POST /test.Svc/Echo", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1}},
		{Key: "header:x-tenant", Value: "acme", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}})
	conn := serve(t, unaryServer(ratekitgrpc.UnaryRules(e)))
	_, md, err := echo(conn, context.Background(), "Echo", "hi")
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, md.Get("x-ratelimit-limit"))
	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)

	_, md, err = echo(conn, context.Background(), "Other", "hi")
	require.NoError(t, err, "no rule matches Other")
	assert.Empty(t, md.Get("x-ratelimit-limit"))

	acme := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	for range 2 {
		_, md, err = echo(conn, acme, "Other", "hi")
		require.NoError(t, err)
		assert.Equal(t, []string{"2"}, md.Get("x-ratelimit-limit"))
	}
	_, _, err = echo(conn, acme, "Other", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
}

// watchCall opens Watch, sends v and reads the replies.
func watchCall(conn *grpc.ClientConn, ctx context.Context, v string) ([]string, metadata.MD, error) {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Svc/Watch")
	if err != nil {
		return nil, nil, err
	}
	if err := cs.SendMsg(wrapperspb.String(v)); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, nil, err
	}
	var replies []string
	for {
		out := new(wrapperspb.StringValue)
		err := cs.RecvMsg(out)
		if errors.Is(err, io.EOF) {
			md, _ := cs.Header()
			return replies, md, nil
		}
		if err != nil {
			md, _ := cs.Header()
			return replies, md, err
		}
		replies = append(replies, out.GetValue())
	}
}

// A stream is decided when it opens.
func TestStreamOpening(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP))})
	replies, md, err := watchCall(conn, context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []string{"hi", "hi", "hi"}, replies)
	assert.Equal(t, []string{"0"}, md.Get("x-ratelimit-remaining"))

	replies, md, err = watchCall(conn, context.Background(), "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Empty(t, replies)
	ri, qf := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, time.Minute, ri.GetRetryDelay().AsDuration())
	assert.Equal(t, "streams", qf.GetViolations()[0].GetSubject())
	assert.Equal(t, []string{"60"}, md.Get("retry-after"))
}

// StreamMessageInterceptor limits each message at its cost: the message
// past the limit makes RecvMsg return ResourceExhausted.
func TestStreamMessages(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "bytes", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	cost := func(msg any) int { return len(msg.(*wrapperspb.StringValue).GetValue()) }
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamMessageInterceptor(lim, ratekitgrpc.PeerIP, cost))})

	upload := func(msgs ...string) (int64, error) {
		cs, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true}, "/test.Svc/Upload")
		require.NoError(t, err)
		for _, m := range msgs {
			if err := cs.SendMsg(wrapperspb.String(m)); err != nil {
				break // the server ended the stream: its status is RecvMsg's
			}
		}
		out := new(wrapperspb.Int64Value)
		if err := cs.CloseSend(); err != nil {
			return 0, err
		}
		err = cs.RecvMsg(out)
		return out.GetValue(), err
	}
	n, err := upload("abcd", "efgh")
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "8 of 10")
	_, err = upload("ij", "klm")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the second message would make 13: %v", err)
	ri, qf := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, "bytes", qf.GetViolations()[0].GetSubject())
}

// clientStream opens the client-streaming method, sends msgs, closes the
// sending side and returns the reply and the status.
func clientStream(conn *grpc.ClientConn, ctx context.Context, method string, reply proto.Message, msgs ...string) (metadata.MD, error) {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/test.Svc/"+method)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if err := cs.SendMsg(wrapperspb.String(m)); err != nil {
			break // the server ended the stream: its status is RecvMsg's
		}
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	err = cs.RecvMsg(reply)
	md, _ := cs.Header()
	return md, err
}

// A stream rejected when it opens never reaches its handler, and its
// header metadata reaches the client with the status.
func TestStreamRejectedAtOpen(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	var handled atomic.Int32
	count := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		handled.Add(1)
		return h(srv, ss)
	}
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP), count)})
	n := new(wrapperspb.Int64Value)
	_, err := clientStream(conn, context.Background(), "Upload", n, "a", "b")
	require.NoError(t, err)
	assert.Equal(t, int64(2), n.GetValue())
	md, err := clientStream(conn, context.Background(), "Upload", n, "a", "b")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, int32(1), handled.Load(), "the rejected stream's handler never ran")
	assert.Equal(t, []string{"1"}, md.Get("x-ratelimit-limit"))
	assert.Equal(t, []string{"0"}, md.Get("x-ratelimit-remaining"))
	assert.Equal(t, []string{"60"}, md.Get("retry-after"))
}

// A handler that drops a rejected message and calls RecvMsg again reads
// the next one; a message under the limit again is admitted.
func TestStreamMessagesContinue(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "bytes", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	cost := func(msg any) int { return len(msg.(*wrapperspb.StringValue).GetValue()) }
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamMessageInterceptor(lim, ratekitgrpc.PeerIP, cost))})
	out := new(wrapperspb.StringValue)
	_, err := clientStream(conn, context.Background(), "Tally", out, "abc", "defg", "h", "", "ijk")
	require.NoError(t, err)
	assert.Equal(t, "3/2", out.GetValue(), "abc, h and the empty message admitted (4 of 5); defg and ijk rejected")
}

// Costs out of range, from WithCost or a message's cost, are Internal with
// a fixed message, never a panic; a nil message cost counts 1; a nil
// option is left out.
func TestCostOutOfRange(t *testing.T) {
	lim := adaptertest.Limiter(t, nil, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	negative := func(context.Context, string) int { return -1 }
	conn := serve(t, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP, nil, ratekitgrpc.WithCost(negative), ratekitgrpc.WithLogger(quiet), ratekitgrpc.WithMethods("/test.Svc/Echo")),
			ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP, ratekitgrpc.WithCost(func(context.Context, string) int { return 4 }), ratekitgrpc.WithLogger(quiet), ratekitgrpc.WithMethods("/test.Svc/Other")),
		),
		grpc.ChainStreamInterceptor(
			ratekitgrpc.StreamMessageInterceptor(lim, ratekitgrpc.PeerIP, func(any) int { return 1 << 40 }, ratekitgrpc.WithLogger(quiet), ratekitgrpc.WithMethods("/test.Svc/Upload")),
			ratekitgrpc.StreamMessageInterceptor(lim, ratekitgrpc.PeerIP, nil, nil, ratekitgrpc.WithMethods("/test.Svc/Tally")),
		),
	})
	for _, m := range []string{"Echo", "Other"} {
		_, _, err := echo(conn, context.Background(), m, "hi")
		assert.Equal(t, codes.Internal, status.Code(err), "%s: %v", m, err)
		assert.Equal(t, "ratekit: rate limit unavailable for this call", status.Convert(err).Message())
	}
	_, err := clientStream(conn, context.Background(), "Upload", new(wrapperspb.Int64Value), "a")
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	out := new(wrapperspb.StringValue)
	_, err = clientStream(conn, context.Background(), "Tally", out, "aaaaaaaa", "b", "c", "d")
	require.NoError(t, err)
	assert.Equal(t, "3/1", out.GetValue(), "a nil cost counts each message 1, whatever its size")
}

// A denied handler or an error handler that returns nil does not let the
// call pass: the call ends with the default status.
func TestHandlersReturningNil(t *testing.T) {
	lim := adaptertest.Limiter(t, nil, core.Limit{Name: "api", Rate: core.Rate{Count: 0, Period: time.Minute}})
	var denied, failed atomic.Int32
	conn := serve(t, unaryServer(
		ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP, ratekitgrpc.WithMethods("/test.Svc/Echo"),
			ratekitgrpc.WithDeniedHandler(func(context.Context, string, core.Decision) error { denied.Add(1); return nil })),
		ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.Metadata("x-api-key"), ratekitgrpc.WithMethods("/test.Svc/Other"), ratekitgrpc.WithLogger(quiet),
			ratekitgrpc.WithErrorHandler(func(context.Context, string, error) error { failed.Add(1); return nil })),
	))
	_, _, err := echo(conn, context.Background(), "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	ri, _ := details(t, err)
	assert.NotNil(t, ri)
	_, _, err = echo(conn, context.Background(), "Other", "hi")
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Equal(t, int32(1), denied.Load())
	assert.Equal(t, int32(1), failed.Load())
}

// A concurrency limit rejects a call over its slots with
// ResourceExhausted, RetryInfo and retry-after, and no rate-limit fields.
func TestUnaryConcurrency(t *testing.T) {
	lim, err := concurrency.NewLimiter(1, concurrency.WithName("inflight"), concurrency.WithRetryAfter(2*time.Second))
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == "/test.Svc/Other" {
			close(entered)
			<-release
		}
		return h(ctx, req)
	}
	conn := serve(t, unaryServer(ratekitgrpc.UnaryConcurrency(lim, ratekitgrpc.PeerIP), block))
	done := make(chan error, 1)
	go func() { _, _, err := echo(conn, context.Background(), "Other", "hi"); done <- err }()
	<-entered
	_, md, err := echo(conn, context.Background(), "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	ri, qf := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, 2*time.Second, ri.GetRetryDelay().AsDuration())
	require.NotNil(t, qf)
	assert.Equal(t, "inflight", qf.GetViolations()[0].GetSubject())
	assert.Equal(t, []string{"2"}, md.Get("retry-after"))
	assert.Empty(t, md.Get("x-ratelimit-limit"))
	close(release)
	require.NoError(t, <-done)
	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	assert.NoError(t, err, "the slot is free again")
}

// Under two interceptors that decide a call, each field has one value per
// interceptor, in the order they ran.
func TestChainedHeaders(t *testing.T) {
	outer := adaptertest.Limiter(t, nil, core.Limit{Name: "outer", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	inner := adaptertest.Limiter(t, nil, core.Limit{Name: "inner", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	conn := serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(outer, ratekitgrpc.PeerIP), ratekitgrpc.UnaryServerInterceptor(inner, ratekitgrpc.PeerIP)))
	_, md, err := echo(conn, context.Background(), "Echo", "hi")
	require.NoError(t, err)
	assert.Equal(t, []string{"10", "3"}, md.Get("x-ratelimit-limit"))
}

// Every style's fields are valid metadata: a stream's header, which grpc-go
// validates, carries them all.
func TestStreamHeaderStyles(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP, ratekitgrpc.WithHeaders(answer.Both)))})
	_, md, err := watchCall(conn, context.Background(), "hi")
	require.NoError(t, err)
	for _, k := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit", "ratelimit-policy"} {
		assert.Len(t, md.Get(k), 1, k)
	}
	assert.Equal(t, []string{`"streams";r=4;t=60`}, md.Get("ratelimit"))
}
