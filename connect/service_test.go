package ratekitconnect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratekitconnect "github.com/ratekit/ratekit/connect"
)

// The test service, of generic messages, without generated code: unary
// Echo and Other answer the request's value, or "remaining=N" when the
// call carries a decision; Watch (server streaming) answers its request's
// value three times; Upload (client streaming) answers the count of
// messages received; Tally (client streaming) drops the messages that
// Receive rejects with ResourceExhausted and goes on, and answers
// "admitted/rejected".
const (
	echoProc   = "/test.Svc/Echo"
	otherProc  = "/test.Svc/Other"
	watchProc  = "/test.Svc/Watch"
	uploadProc = "/test.Svc/Upload"
	tallyProc  = "/test.Svc/Tally"
)

func unary(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	out := req.Msg.GetValue()
	if d, ok := ratekitconnect.DecisionFrom(ctx); ok {
		out = fmt.Sprintf("remaining=%d", d.Remaining)
	}
	return connect.NewResponse(wrapperspb.String(out)), nil
}

func watch(ctx context.Context, req *connect.Request[wrapperspb.StringValue], ss *connect.ServerStream[wrapperspb.StringValue]) error {
	out := req.Msg.GetValue()
	if d, ok := ratekitconnect.DecisionFrom(ctx); ok {
		out = fmt.Sprintf("remaining=%d", d.Remaining)
	}
	for range 3 {
		if err := ss.Send(wrapperspb.String(out)); err != nil {
			return err
		}
	}
	return nil
}

func upload(_ context.Context, cs *connect.ClientStream[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
	n := int64(0)
	for cs.Receive() {
		n++
	}
	if err := cs.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(wrapperspb.Int64(n)), nil
}

// tally reads from the stream's conn: connect.ClientStream's Receive
// stops at the first error, where a rejected message is one to drop.
func tally(_ context.Context, cs *connect.ClientStream[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	admitted, rejected := 0, 0
	for {
		err := cs.Conn().Receive(new(wrapperspb.StringValue))
		switch {
		case errors.Is(err, io.EOF):
			return connect.NewResponse(wrapperspb.String(fmt.Sprintf("%d/%d", admitted, rejected))), nil
		case connect.CodeOf(err) == connect.CodeResourceExhausted:
			rejected++
		case err != nil:
			return nil, err
		default:
			admitted++
		}
	}
}

// mux returns the test service's handlers, each with opts.
func mux(opts ...connect.HandlerOption) *http.ServeMux {
	m := http.NewServeMux()
	m.Handle(echoProc, connect.NewUnaryHandler(echoProc, unary, opts...))
	m.Handle(otherProc, connect.NewUnaryHandler(otherProc, unary, opts...))
	m.Handle(watchProc, connect.NewServerStreamHandler(watchProc, watch, opts...))
	m.Handle(uploadProc, connect.NewClientStreamHandler(uploadProc, upload, opts...))
	m.Handle(tallyProc, connect.NewClientStreamHandler(tallyProc, tally, opts...))
	return m
}

// startServer serves h on a free port of 127.0.0.1, over HTTP/1.1 and
// unencrypted HTTP/2, until stop is called.
func startServer(h http.Handler) (url string, stop func()) {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	return srv.URL, srv.Close
}

// A protocol is a way for a client to call: Connect over HTTP/2 and over
// HTTP/1.1, gRPC and gRPC-Web over HTTP/2.
type protocol struct {
	name  string
	opts  []connect.ClientOption
	http1 bool
}

var protocols = []protocol{
	{name: "connect"},
	{name: "connect-http1", http1: true},
	{name: "grpc", opts: []connect.ClientOption{connect.WithGRPC()}},
	{name: "grpc-web", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
}

var connectProtocol, connectHTTP1, grpcProtocol, grpcWebProtocol = protocols[0], protocols[1], protocols[2], protocols[3]

// httpClient returns a client of p's HTTP version.
func (p protocol) httpClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if p.http1 {
		tr.Protocols.SetHTTP1(true)
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr}
}

// A server is the test service on a real server, and its clients.
type server struct {
	t   *testing.T
	url string
}

// serve starts the test service with opts, stopped when t ends.
func serve(t *testing.T, opts ...connect.HandlerOption) *server {
	t.Helper()
	url, stop := startServer(mux(opts...))
	t.Cleanup(stop)
	return &server{t: t, url: url}
}

// newClient returns a client of p for procedure proc, with copts.
func newClient[Req, Res any](s *server, p protocol, proc string, copts ...connect.ClientOption) *connect.Client[Req, Res] {
	hc := p.httpClient()
	s.t.Cleanup(hc.CloseIdleConnections)
	return connect.NewClient[Req, Res](hc, s.url+proc, append(p.opts[:len(p.opts):len(p.opts)], copts...)...)
}

// echo calls the unary procedure proc over p with value v and the request
// header fields of h, and returns the reply, the response header (the
// error's metadata when it fails) and the error.
func (s *server) echo(p protocol, ctx context.Context, proc, v string, h http.Header, copts ...connect.ClientOption) (string, http.Header, error) {
	req := connect.NewRequest(wrapperspb.String(v))
	for name, vs := range h {
		req.Header()[name] = vs
	}
	resp, err := newClient[wrapperspb.StringValue, wrapperspb.StringValue](s, p, proc, copts...).CallUnary(ctx, req)
	if err != nil {
		return "", meta(err), err
	}
	return resp.Msg.GetValue(), resp.Header(), nil
}

// watch calls Watch over p with value v and the request header fields of
// h, and returns the replies, the response header (with the error's
// metadata when it fails) and the error.
func (s *server) watch(p protocol, ctx context.Context, v string, h http.Header, copts ...connect.ClientOption) ([]string, http.Header, error) {
	req := connect.NewRequest(wrapperspb.String(v))
	for name, vs := range h {
		req.Header()[name] = vs
	}
	stream, err := newClient[wrapperspb.StringValue, wrapperspb.StringValue](s, p, watchProc, copts...).CallServerStream(ctx, req)
	if err != nil {
		return nil, meta(err), err
	}
	defer func() { _ = stream.Close() }()
	var replies []string
	for stream.Receive() {
		replies = append(replies, stream.Msg().GetValue())
	}
	if err := stream.Err(); err != nil {
		return replies, meta(err), err
	}
	return replies, stream.ResponseHeader(), nil
}

// clientStream calls the client-streaming procedure proc over p, with
// copts, sends msgs, and returns the reply, the response header (the error's metadata
// when it fails) and the error.
func clientStream[Res any](s *server, p protocol, ctx context.Context, proc string, msgs []string, copts ...connect.ClientOption) (*Res, http.Header, error) {
	stream := newClient[wrapperspb.StringValue, Res](s, p, proc, copts...).CallClientStream(ctx)
	for _, m := range msgs {
		if err := stream.Send(wrapperspb.String(m)); err != nil {
			break // the server ended the stream: its error is CloseAndReceive's
		}
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, meta(err), err
	}
	return resp.Msg, resp.Header(), nil
}

// meta returns the metadata of err, a *connect.Error: the response header
// and trailer of the call.
func meta(err error) http.Header {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr.Meta()
	}
	return nil
}

// details returns the RetryInfo and QuotaFailure of err.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var cerr *connect.Error
	require.ErrorAs(t, err, &cerr)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			ri = v
		case *errdetails.QuotaFailure:
			qf = v
		}
	}
	return ri, qf
}
