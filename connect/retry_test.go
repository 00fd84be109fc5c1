package ratekitconnect_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/client"
	ratekitconnect "github.com/ratekit/ratekit/connect"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// serverClock is a client.Clock whose Sleep moves the server's clock
// instead of waiting, and records each wait.
type serverClock struct {
	clock *storetest.Clock
	move  bool  // Sleep advances clock
	err   error // Sleep's error

	mu    sync.Mutex
	waits []time.Duration
}

func (c *serverClock) Now() time.Time { return c.clock.Now() }

func (c *serverClock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	if c.move {
		c.clock.Advance(d)
	}
	return c.err
}

func (c *serverClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// Over every protocol, the client waits the RetryInfo's delay and the
// retried call passes; it gives up after the maximum retries, with the
// server's error.
func TestRetryUnary(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(20 * time.Second))
			lim := adaptertest.Limiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
			sc := &serverClock{clock: clock, move: true}
			var logs adaptertest.SyncBuffer
			var mu sync.Mutex
			var seen []client.Wait
			retry, err := ratekitconnect.NewRetry(ratekitconnect.WithClock(sc), ratekitconnect.WithRetryLogger(adaptertest.NewLogger(&logs)),
				ratekitconnect.WithObserver(func(w client.Wait) { mu.Lock(); seen = append(seen, w); mu.Unlock() }))
			require.NoError(t, err)
			s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP), retry))
			withRetry := connect.WithInterceptors(retry)

			_, _, err = s.echo(p, context.Background(), echoProc, "hi", nil, withRetry)
			require.NoError(t, err)
			got, h, err := s.echo(p, context.Background(), echoProc, "again", nil, withRetry)
			require.NoError(t, err, "retried after the wait")
			assert.Equal(t, "again", got)
			assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"))
			assert.Equal(t, []time.Duration{40 * time.Second}, sc.recorded(), "RetryInfo's delay: the rest of the window")
			assert.Equal(t, []client.Wait{{Host: echoProc, Duration: 40 * time.Second, Attempt: 1, Source: ratekitconnect.SourceRetryInfo}}, seen)
			assert.Equal(t, 1, strings.Count(logs.String(), "ratekitconnect: rate limited, waiting"), logs.String())

			// A clock that does not move: every retry is rejected again.
			stuck := &serverClock{clock: clock}
			retry, err = ratekitconnect.NewRetry(ratekitconnect.WithClock(stuck), ratekitconnect.WithMaxRetries(2))
			require.NoError(t, err)
			_, _, err = s.echo(p, context.Background(), echoProc, "hi", nil, connect.WithInterceptors(retry))
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
			ri, _ := details(t, err)
			assert.NotNil(t, ri, "the server's error, details included")
			assert.Len(t, stuck.recorded(), 2, "two retries, then the server's error")
		})
	}
}

// plain answers Other with ResourceExhausted and no RetryInfo; when
// flaky, it answers every second call of Echo, from the first, with
// Unavailable and a RetryInfo of 0.
type plain struct {
	flaky bool
	calls atomic.Int32
}

func (p *plain) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().Procedure == otherProc {
			return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("no RetryInfo"))
		}
		if p.flaky && p.calls.Add(1)%2 == 1 {
			err := connect.NewError(connect.CodeUnavailable, errors.New("try again"))
			d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(0)})
			if derr != nil {
				return nil, derr
			}
			err.AddDetail(d)
			return nil, err
		}
		return next(ctx, req)
	}
}

func (*plain) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (*plain) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// No retry without RetryInfo, past the maximum wait, or past the
// deadline; a bad option is an error; the zero Retry retries at once
// when told to, on the system clock.
func TestRetryRefuses(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	sc := &serverClock{clock: clock}
	retry, err := ratekitconnect.NewRetry(ratekitconnect.WithClock(sc), ratekitconnect.WithMaxWait(30*time.Second), nil)
	require.NoError(t, err)
	withRetry := connect.WithInterceptors(retry)
	s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP, ratekitconnect.WithMethods(echoProc)), &plain{}))

	_, _, err = s.echo(grpcProtocol, context.Background(), otherProc, "hi", nil, withRetry)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
	_, _, err = s.echo(grpcProtocol, context.Background(), echoProc, "hi", nil)
	require.NoError(t, err)
	_, _, err = s.echo(grpcProtocol, context.Background(), echoProc, "hi", nil, withRetry)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "60 s is past the maximum wait")
	assert.Empty(t, sc.recorded())

	retry, err = ratekitconnect.NewRetry(ratekitconnect.WithClock(sc))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = s.echo(connectProtocol, ctx, echoProc, "hi", nil, connect.WithInterceptors(retry))
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "the wait would reach the deadline")
	assert.Empty(t, sc.recorded())

	// A context that ends while the client waits ends the call.
	retry, err = ratekitconnect.NewRetry(ratekitconnect.WithClock(&serverClock{clock: clock, err: context.Canceled}))
	require.NoError(t, err)
	_, _, err = s.echo(connectProtocol, context.Background(), echoProc, "hi", nil, connect.WithInterceptors(retry))
	assert.Equal(t, connect.CodeCanceled, connect.CodeOf(err), "%v", err)

	_, err = ratekitconnect.NewRetry(ratekitconnect.WithMaxRetries(-1))
	assert.EqualError(t, err, "ratekitconnect: max retries -1 is negative")
	_, err = ratekitconnect.NewRetry(ratekitconnect.WithMaxWait(-time.Second))
	assert.EqualError(t, err, "ratekitconnect: max wait -1s is negative")

	zero := serve(t, connect.WithInterceptors(&plain{flaky: true}))
	got, _, err := zero.echo(grpcProtocol, context.Background(), echoProc, "hi", nil, connect.WithInterceptors(&ratekitconnect.Retry{}))
	require.NoError(t, err, "a RetryInfo of 0: retried at once")
	assert.Equal(t, "hi", got)
	_, _, err = zero.echo(grpcProtocol, context.Background(), echoProc, "hi", nil)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "without the client interceptor")
}

// A server-streaming call rejected when it opens is opened again, with its
// request and request header, after the wait; a client stream is not.
func TestRetryStreams(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(50 * time.Second))
			lim := adaptertest.Limiter(t, clock, core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
			sc := &serverClock{clock: clock, move: true}
			retry, err := ratekitconnect.NewRetry(ratekitconnect.WithClock(sc))
			require.NoError(t, err)
			s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.Header("X-Api-Key"))))
			key := http.Header{"X-Api-Key": {"k1"}}

			replies, _, err := s.watch(p, context.Background(), "first", key, connect.WithInterceptors(retry))
			require.NoError(t, err)
			assert.Equal(t, []string{"first", "first", "first"}, replies)
			replies, h, err := s.watch(p, context.Background(), "second", key, connect.WithInterceptors(retry))
			require.NoError(t, err, "opened again after the wait, with the key in its header")
			assert.Equal(t, []string{"second", "second", "second"}, replies)
			assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"), "the header of the stream opened again")
			assert.Equal(t, []time.Duration{10 * time.Second}, sc.recorded())

			ctx, info := connect.NewClientContext(context.Background())
			info.RequestHeader().Set("X-Api-Key", "k1")
			_, _, err = clientStream[wrapperspb.Int64Value](s, p, ctx, uploadProc, []string{"a"}, connect.WithInterceptors(retry))
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
			assert.Len(t, sc.recorded(), 1, "a client stream is not retried")
		})
	}
}

// On a handler, Retry passes every call, as on a client the server
// interceptors do.
func TestRetryOnHandler(t *testing.T) {
	retry, err := ratekitconnect.NewRetry()
	require.NoError(t, err)
	s := serve(t, connect.WithInterceptors(retry, &plain{flaky: true}))
	_, _, err = s.echo(connectProtocol, context.Background(), echoProc, "hi", nil)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "not retried by the server")
	replies, _, err := s.watch(connectProtocol, context.Background(), "hi", nil)
	require.NoError(t, err)
	assert.Len(t, replies, 3)
}
