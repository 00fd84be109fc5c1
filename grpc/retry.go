package ratekitgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/client"
)

// SourceRetryInfo is the Source of a Retry's waits: the google.rpc.RetryInfo
// of the status that the call ended with.
const SourceRetryInfo = "retry-info"

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
	cfg *retryConfig // nil: defaults
}

// retryConfig is the settings of a Retry.
type retryConfig struct {
	maxRetries int
	maxWait    time.Duration
	clock      client.Clock
	observe    func(client.Wait)
	log        *slog.Logger
}

var retryDefaults = retryConfig{maxRetries: 3, maxWait: time.Minute, clock: systemClock{}}

// A RetryOption configures a Retry.
type RetryOption func(*retryConfig) error

// NewRetry returns a Retry configured by opts, or the error of the first
// invalid option; a nil option is ignored.
func NewRetry(opts ...RetryOption) (*Retry, error) {
	cfg := retryDefaults
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Retry{&cfg}, nil
}

// WithMaxRetries sets how many times a call is retried (default 3); 0
// never retries.
func WithMaxRetries(n int) RetryOption {
	return func(c *retryConfig) error {
		if n < 0 {
			return fmt.Errorf("ratekitgrpc: max retries %d is negative", n)
		}
		c.maxRetries = n
		return nil
	}
}

// WithMaxWait sets the longest wait (default 60s). When the server asks
// for longer, the call ends with its status at once.
func WithMaxWait(d time.Duration) RetryOption {
	return func(c *retryConfig) error {
		if d < 0 {
			return fmt.Errorf("ratekitgrpc: max wait %s is negative", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithClock sets the clock that waits (default: the system clock), as
// package client's WithClock does, so that tests never sleep; nil keeps
// it. Deadlines are always compared with the system clock.
func WithClock(clock client.Clock) RetryOption {
	return func(c *retryConfig) error {
		if clock != nil {
			c.clock = clock
		}
		return nil
	}
}

// WithObserver sets a function called before every wait, with the wait's
// Host the call's full method and its Source SourceRetryInfo. It must be
// safe for concurrent use.
func WithObserver(observe func(client.Wait)) RetryOption {
	return func(c *retryConfig) error { c.observe = observe; return nil }
}

// WithRetryLogger logs every wait at level Info (default: no logging), as
// package client's WithLogger does.
func WithRetryLogger(log *slog.Logger) RetryOption {
	return func(c *retryConfig) error { c.log = log; return nil }
}

func (r *Retry) settings() *retryConfig {
	if r == nil || r.cfg == nil {
		return &retryDefaults
	}
	return r.cfg
}

// Unary is the unary client interceptor of r: give it to
// grpc.WithChainUnaryInterceptor. It makes the call, and while the call
// ends with a status that invites a retry, waits and makes it again.
func (r *Retry) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := r.settings()
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if again, err := c.wait(ctx, method, attempt, err); !again {
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
	c := r.settings()
	s := &replayStream{ctx: ctx, method: method, cfg: c}
	s.open = func() (grpc.ClientStream, error) {
		for {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil {
				return cs, nil
			}
			s.attempt++ // by one goroutine at a time: Stream, then RecvMsg
			if again, err := c.wait(ctx, method, s.attempt, err); !again {
				return nil, err
			}
		}
	}
	cs, err := s.open()
	if err != nil || desc.ClientStreams || !desc.ServerStreams {
		return cs, err
	}
	s.cs = cs
	return s, nil
}

// wait waits the delay that err, the status of the attempt-th attempt,
// asks for and returns true, if the call is to be made again; otherwise it
// returns false and the call's error: err, or the status of a context that
// ended while it waited.
func (c *retryConfig) wait(ctx context.Context, method string, attempt int, err error) (bool, error) {
	d, ok := retryDelay(err)
	if !ok || attempt > c.maxRetries || d > c.maxWait || beyondDeadline(ctx, d) {
		return false, err
	}
	if c.observe != nil {
		c.observe(client.Wait{Host: method, Duration: d, Attempt: attempt, Source: SourceRetryInfo})
	}
	if c.log != nil {
		c.log.LogAttrs(ctx, slog.LevelInfo, "ratekitgrpc: rate limited, waiting",
			slog.String("method", method), slog.Duration("wait", d),
			slog.Int("attempt", attempt), slog.String("source", SourceRetryInfo))
	}
	if serr := c.clock.Sleep(ctx, d); serr != nil {
		return false, status.FromContextError(serr).Err()
	}
	return true, nil
}

// retryDelay returns the delay of the RetryInfo of err, a status of code
// ResourceExhausted or Unavailable, and whether it has a usable one.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || err == nil || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
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
// request so that it can send it again on a new stream. As a ClientStream
// may be sent to and received from by two goroutines at once, its fields
// are under mu; the current stream is called outside it.
type replayStream struct {
	ctx    context.Context
	method string
	cfg    *retryConfig
	open   func() (grpc.ClientStream, error)

	attempt int // the retries so far, of the opening and of the request

	mu       sync.Mutex
	cs       grpc.ClientStream // the current stream
	req      any
	closed   bool // CloseSend was called
	received bool // a reply was received: no retry
}

// current returns the current stream.
func (s *replayStream) current() grpc.ClientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs
}

// Header returns the header metadata of the current stream.
func (s *replayStream) Header() (metadata.MD, error) { return s.current().Header() }

// Trailer returns the trailer metadata of the current stream.
func (s *replayStream) Trailer() metadata.MD { return s.current().Trailer() }

// Context returns the context of the current stream.
func (s *replayStream) Context() context.Context { return s.current().Context() }

// SendMsg sends m, and keeps it to send again on a new stream.
func (s *replayStream) SendMsg(m any) error {
	s.mu.Lock()
	s.req = m
	cs := s.cs
	s.mu.Unlock()
	return cs.SendMsg(m)
}

// CloseSend closes the sending side of the current stream, and of any
// stream opened again.
func (s *replayStream) CloseSend() error {
	s.mu.Lock()
	s.closed = true
	cs := s.cs
	s.mu.Unlock()
	return cs.CloseSend()
}

// RecvMsg receives the next reply into m. When the first reply fails with
// a status that invites a retry, after the request was sent and the
// sending side closed, it waits, opens the stream again, sends the request
// again and receives from the new stream.
func (s *replayStream) RecvMsg(m any) error {
	for {
		cs := s.current()
		err := cs.RecvMsg(m)
		s.mu.Lock()
		if err == nil {
			s.received = true
			s.mu.Unlock()
			return nil
		}
		if s.received || !s.closed || s.req == nil {
			s.mu.Unlock()
			return err
		}
		req := s.req
		s.mu.Unlock()
		s.attempt++
		if again, err := s.cfg.wait(s.ctx, s.method, s.attempt, err); !again {
			return err
		}
		cs, oerr := s.open()
		if oerr != nil {
			return oerr
		}
		s.mu.Lock()
		s.cs = cs
		s.mu.Unlock()
		if err := cs.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
	}
}

// beyondDeadline reports whether a wait of d would reach the deadline of
// ctx, on the system clock.
func beyondDeadline(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) <= d
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
