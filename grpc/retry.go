package ratekitgrpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/client"
)

// SourceRetryInfo is the Source of a Retry's waits: the google.rpc.RetryInfo
// of the status that the call ended with.
const SourceRetryInfo = adapter.SourceRetryInfo

// Retry is the client half of this package, the gRPC counterpart of
// package client's Transport: client interceptors that, when a call ends
// with codes.ResourceExhausted or codes.Unavailable and a
// google.rpc.RetryInfo detail, wait the delay it gives and make the call
// again, as ratekit's server interceptors invite:
//
//	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithMaxRetries(3))
//	...
//	conn, err := grpc.NewClient(target, creds,
//		grpc.WithChainUnaryInterceptor(retry.Unary),
//		grpc.WithChainStreamInterceptor(retry.Stream))
//
// A call is never retried without RetryInfo (a status without it is the
// server's final word), nor beyond the maximum number of retries, nor when
// the delay is longer than the maximum wait or would reach the call's
// deadline: the call then ends with the server's status, details
// included. A call whose context ends while it waits ends with the
// context's status. The zero Retry is usable, with every default; it is
// safe for concurrent use.
type Retry struct {
	policy *adapter.RetryPolicy // nil: defaults
}

var retryDefaults, _ = adapter.NewRetryPolicy("ratekitgrpc")

// A RetryOption configures a Retry.
type RetryOption = adapter.RetryOption

// NewRetry returns a Retry configured by opts, or the error of the first
// invalid option; a nil option is ignored.
func NewRetry(opts ...RetryOption) (*Retry, error) {
	p, err := adapter.NewRetryPolicy("ratekitgrpc", opts...)
	if err != nil {
		return nil, err
	}
	return &Retry{p}, nil
}

// WithMaxRetries sets how many times a call is retried (default 3); 0
// never retries.
func WithMaxRetries(n int) RetryOption { return adapter.WithMaxRetries(n) }

// WithMaxWait sets the longest wait (default 60s). When the server asks
// for longer, the call ends with its status at once.
func WithMaxWait(d time.Duration) RetryOption { return adapter.WithMaxWait(d) }

// WithClock sets the clock that waits (default: the system clock), as
// package client's WithClock does, so that tests never sleep; nil keeps
// it. Deadlines are always compared with the system clock.
func WithClock(clock client.Clock) RetryOption { return adapter.WithRetryClock(clock) }

// WithObserver sets a function called before every wait, with the wait's
// Host the call's full method and its Source SourceRetryInfo. It must be
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

// Unary is the unary client interceptor of r: give it to
// grpc.WithChainUnaryInterceptor. It makes the call, and while the call
// ends with a status that invites a retry, waits and makes it again.
func (r *Retry) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p := r.settings()
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if again, err := p.Retry(ctx, method, attempt, err, retryDelay, contextStatus); !again {
			return err
		}
	}
}

// Stream is the stream client interceptor of r: give it to
// grpc.WithChainStreamInterceptor. It opens the stream again while the
// opening fails with a status that invites a retry, before any message
// was sent. A stream that the server rejects after it opened ends with
// the status in its first RecvMsg, which is not retried for a client- or
// bidirectional-streaming call, whose messages may have been acted on.
// A server-streaming call (one request message, then the replies) is
// opened again and its request sent again when its first RecvMsg, after
// CloseSend, fails so, before any reply. The retries of the opening and of
// the request count together against the maximum.
func (r *Retry) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	p := r.settings()
	s := &replayStream{ctx: ctx, method: method, policy: p}
	s.open = func() (grpc.ClientStream, error) {
		for {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil {
				return cs, nil
			}
			if again, err := p.Retry(ctx, method, s.replay.Attempt(), err, retryDelay, contextStatus); !again {
				return nil, err
			}
		}
	}
	cs, err := s.open()
	if err != nil || desc.ClientStreams || !desc.ServerStreams {
		return cs, err
	}
	s.replay.Replace(cs)
	return s, nil
}

// contextStatus returns the status of a call whose context ended with
// err while it waited.
func contextStatus(err error) error { return status.FromContextError(err).Err() }

// retryDelay returns the delay of the RetryInfo of err, a status of code
// ResourceExhausted or Unavailable, and whether it has a usable one.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || err == nil || !adapter.RPCRetryable(uint32(st.Code())) {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if ri.GetRetryDelay().CheckValid() != nil {
				return 0, false
			}
			if delay := ri.GetRetryDelay().AsDuration(); delay >= 0 {
				return delay, true
			}
			return 0, false
		}
	}
	return 0, false
}

// replayStream is a server-streaming call's stream, which keeps its
// request so that it can send it again on a new stream (adapter.Replay).
type replayStream struct {
	ctx    context.Context
	method string
	policy *adapter.RetryPolicy
	open   func() (grpc.ClientStream, error)
	replay adapter.Replay[grpc.ClientStream]
}

// Header returns the header metadata of the current stream.
func (s *replayStream) Header() (metadata.MD, error) { return s.replay.Current().Header() }

// Trailer returns the trailer metadata of the current stream.
func (s *replayStream) Trailer() metadata.MD { return s.replay.Current().Trailer() }

// Context returns the context of the current stream.
func (s *replayStream) Context() context.Context { return s.replay.Current().Context() }

// SendMsg sends m, and keeps it to send again on a new stream.
func (s *replayStream) SendMsg(m any) error { return s.replay.Send(m).SendMsg(m) }

// CloseSend closes the sending side of the current stream, and of any
// stream opened again.
func (s *replayStream) CloseSend() error { return s.replay.CloseSend().CloseSend() }

// RecvMsg receives the next reply into m. When the first reply fails with
// a status that invites a retry, after the request was sent and the
// sending side closed, it waits, opens the stream again, sends the request
// again and receives from the new stream.
func (s *replayStream) RecvMsg(m any) error {
	for {
		err := s.replay.Current().RecvMsg(m)
		req, ok := s.replay.Received(err)
		if !ok {
			return err
		}
		if again, err := s.policy.Retry(s.ctx, s.method, s.replay.Attempt(), err, retryDelay, contextStatus); !again {
			return err
		}
		cs, err := s.open()
		if err != nil {
			return err
		}
		s.replay.Replace(cs)
		if err := cs.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
	}
}
