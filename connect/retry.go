package ratekitconnect

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/client"
)

// SourceRetryInfo is the Source of a Retry's waits: the
// google.rpc.RetryInfo of the error that the call ended with.
const SourceRetryInfo = adapter.SourceRetryInfo

// Retry is the client half of this package, the Connect counterpart of
// package client's Transport: a client interceptor that, when a call ends
// with connect.CodeResourceExhausted or CodeUnavailable and a
// google.rpc.RetryInfo detail, waits the delay it gives and makes the
// call again, as ratekit's server interceptors invite:
//
//	retry, err := ratekitconnect.NewRetry(ratekitconnect.WithMaxRetries(3))
//	...
//	client := connect.NewClient[greetv1.GreetRequest, greetv1.GreetResponse](
//		http.DefaultClient, url, connect.WithInterceptors(retry))
//
// A call is never retried without RetryInfo (an error without it is the
// server's final word), nor beyond the maximum number of retries, nor when
// the delay is longer than the maximum wait or would reach the call's
// deadline: the call then ends with the server's error, details included.
// A call whose context ends while it waits ends with connect.CodeCanceled
// or CodeDeadlineExceeded. Unary calls are retried; a server-streaming
// call (one request message, then the replies) is opened again and its
// request sent again when its first Receive fails so, before any reply.
// Client- and bidirectional-streaming calls, whose messages may have been
// acted on, are not retried. On a handler, Retry passes every call
// through. The zero Retry is usable, with every default; it is safe for
// concurrent use.
type Retry struct {
	policy *adapter.RetryPolicy // nil: defaults
}

var retryDefaults, _ = adapter.NewRetryPolicy("ratekitconnect")

// A RetryOption configures a Retry.
type RetryOption = adapter.RetryOption

// NewRetry returns a Retry configured by opts, or the error of the first
// invalid option; a nil option is ignored.
func NewRetry(opts ...RetryOption) (*Retry, error) {
	p, err := adapter.NewRetryPolicy("ratekitconnect", opts...)
	if err != nil {
		return nil, err
	}
	return &Retry{p}, nil
}

// WithMaxRetries sets how many times a call is retried (default 3); 0
// never retries.
func WithMaxRetries(n int) RetryOption { return adapter.WithMaxRetries(n) }

// WithMaxWait sets the longest wait (default 60s). When the server asks
// for longer, the call ends with its error at once.
func WithMaxWait(d time.Duration) RetryOption { return adapter.WithMaxWait(d) }

// WithClock sets the clock that waits (default: the system clock), as
// package client's WithClock does, so that tests never sleep; nil keeps
// it. Deadlines are always compared with the system clock.
func WithClock(clock client.Clock) RetryOption { return adapter.WithRetryClock(clock) }

// WithObserver sets a function called before every wait, with the wait's
// Host the call's procedure and its Source SourceRetryInfo. It must be
// safe for concurrent use.
func WithObserver(observe func(client.Wait)) RetryOption { return adapter.WithRetryObserver(observe) }

// WithRetryLogger logs every wait at level Info (default: no logging), as
// package client's WithLogger does.
func WithRetryLogger(log *slog.Logger) RetryOption { return adapter.WithRetryLogger(log) }

func (r *Retry) settings() *adapter.RetryPolicy {
	if r == nil || r.policy == nil {
		return retryDefaults
	}
	return r.policy
}

// WrapUnary makes a client's unary call, and while it ends with an error
// that invites a retry, waits and makes it again. A handler's calls pass.
func (r *Retry) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	p := r.settings()
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if !spec.IsClient {
			return next(ctx, req)
		}
		for attempt := 1; ; attempt++ {
			resp, err := next(ctx, req)
			if again, err := p.Retry(ctx, spec.Procedure, attempt, err, retryDelay, contextError); !again {
				return resp, err
			}
		}
	}
}

// WrapStreamingClient gives a server-streaming call a stream that is
// opened again, and its request sent again, while its first Receive fails
// with an error that invites a retry; other streams pass.
func (r *Retry) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	p := r.settings()
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if spec.StreamType != connect.StreamTypeServer {
			return conn
		}
		s := &replayConn{ctx: ctx, spec: spec, open: next, policy: p}
		s.replay.Replace(conn)
		return s
	}
}

// WrapStreamingHandler returns next: a handler's streams pass.
func (*Retry) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// retryInfo is the name of the RetryInfo detail (connect.ErrorDetail.Type).
var retryInfo = string((*errdetails.RetryInfo)(nil).ProtoReflect().Descriptor().FullName())

// retryDelay returns the delay of the first RetryInfo of err, an error of
// code ResourceExhausted or Unavailable, and whether it has a usable one.
func retryDelay(err error) (time.Duration, bool) {
	var cerr *connect.Error
	if err == nil || !errors.As(err, &cerr) || !adapter.RPCRetryable(uint32(cerr.Code())) {
		return 0, false
	}
	for _, d := range cerr.Details() {
		if d.Type() != retryInfo {
			continue
		}
		v, derr := d.Value()
		ri, ok := v.(*errdetails.RetryInfo)
		if derr != nil || !ok || ri.GetRetryDelay() == nil {
			continue
		}
		if ri.GetRetryDelay().CheckValid() != nil {
			return 0, false
		}
		delay := ri.GetRetryDelay().AsDuration()
		return delay, delay >= 0
	}
	return 0, false
}

// replayConn is a server-streaming call's stream, which keeps its request
// so that it can send it again on a new stream (adapter.Replay).
type replayConn struct {
	ctx    context.Context
	spec   connect.Spec
	open   connect.StreamingClientFunc
	policy *adapter.RetryPolicy
	replay adapter.Replay[connect.StreamingClientConn]
}

// Spec returns the call's description.
func (s *replayConn) Spec() connect.Spec { return s.spec }

// Peer returns the server of the current stream.
func (s *replayConn) Peer() connect.Peer { return s.replay.Current().Peer() }

// RequestHeader returns the request header of the current stream.
func (s *replayConn) RequestHeader() http.Header { return s.replay.Current().RequestHeader() }

// Send sends msg, and keeps it to send again on a new stream.
func (s *replayConn) Send(msg any) error { return s.replay.Send(msg).Send(msg) }

// CloseRequest closes the sending side of the current stream; a stream
// opened again is closed as soon as its request is sent.
func (s *replayConn) CloseRequest() error { return s.replay.CloseSend().CloseRequest() }

// Receive receives the next reply into msg. When the first reply fails
// with an error that invites a retry, after the request was sent and the
// sending side closed, it waits, opens the stream again with the request
// header of the first, sends the request again and receives from the new
// stream.
func (s *replayConn) Receive(msg any) error {
	for {
		conn := s.replay.Current()
		err := conn.Receive(msg)
		req, ok := s.replay.Received(err)
		if !ok {
			return err
		}
		if again, err := s.policy.Retry(s.ctx, s.spec.Procedure, s.replay.Attempt(), err, retryDelay, contextError); !again {
			return err
		}
		_ = conn.CloseResponse()
		fresh := s.open(s.ctx, s.spec)
		header := fresh.RequestHeader()
		for name, v := range conn.RequestHeader() {
			if _, ok := header[name]; !ok { // the protocol's own are fresh
				header[name] = slices.Clone(v)
			}
		}
		s.replay.Replace(fresh)
		if err := fresh.Send(req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := fresh.CloseRequest(); err != nil {
			return err
		}
	}
}

// ResponseHeader returns the response header of the current stream.
func (s *replayConn) ResponseHeader() http.Header { return s.replay.Current().ResponseHeader() }

// ResponseTrailer returns the response trailer of the current stream.
func (s *replayConn) ResponseTrailer() http.Header { return s.replay.Current().ResponseTrailer() }

// CloseResponse closes the receiving side of the current stream.
func (s *replayConn) CloseResponse() error { return s.replay.Current().CloseResponse() }
