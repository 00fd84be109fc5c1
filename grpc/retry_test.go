package ratekitgrpc_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgrpc "github.com/ratekit/ratekit/grpc"
)

// serverClock is a client.Clock whose Sleep moves the server's clock
// instead of waiting, and records each wait.
type serverClock struct {
	clock *storetest.Clock
	move  bool // Sleep advances clock

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
	return nil
}

// The client waits the RetryInfo's delay and the retried call passes; it
// gives up after the maximum retries, with the server's status.
func TestRetryUnary(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch.Add(20 * time.Second))
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	sc := &serverClock{clock: clock, move: true}
	var logs adaptertest.SyncBuffer
	var seen []client.Wait
	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithClock(sc), ratekitgrpc.WithRetryLogger(adaptertest.NewLogger(&logs)),
		ratekitgrpc.WithObserver(func(w client.Wait) { seen = append(seen, w) }))
	require.NoError(t, err)
	conn := serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)), grpc.WithChainUnaryInterceptor(retry.Unary))

	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	require.NoError(t, err)
	got, md, err := echo(conn, context.Background(), "Echo", "again")
	require.NoError(t, err, "retried after the wait")
	assert.Equal(t, "again", got)
	assert.Equal(t, []string{"0"}, md.Get("x-ratelimit-remaining"))
	assert.Equal(t, []time.Duration{40 * time.Second}, sc.waits, "RetryInfo's delay: the rest of the window")
	assert.Equal(t, []client.Wait{{Host: "/test.Svc/Echo", Duration: 40 * time.Second, Attempt: 1, Source: ratekitgrpc.SourceRetryInfo}}, seen)
	assert.Equal(t, 1, strings.Count(logs.String(), "rate limited, waiting"), logs.String())

	// A clock that does not move: every retry is rejected again.
	stuck := &serverClock{clock: clock}
	retry, err = ratekitgrpc.NewRetry(ratekitgrpc.WithClock(stuck), ratekitgrpc.WithMaxRetries(2))
	require.NoError(t, err)
	conn = serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)), grpc.WithChainUnaryInterceptor(retry.Unary))
	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Len(t, stuck.waits, 2, "two retries, then the server's status")
}

// No retry without RetryInfo, past the maximum wait, or past the
// deadline; a bad option is an error.
func TestRetryRefuses(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	plain := func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.ResourceExhausted, "no RetryInfo")
	}
	sc := &serverClock{clock: clock}
	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithClock(sc), ratekitgrpc.WithMaxWait(30*time.Second))
	require.NoError(t, err)
	conn := serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP, ratekitgrpc.WithMethods("/test.Svc/Echo")),
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == "/test.Svc/Other" {
				return plain(ctx, req, info, h)
			}
			return h(ctx, req)
		}), grpc.WithChainUnaryInterceptor(retry.Unary))

	_, _, err = echo(conn, context.Background(), "Other", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	require.NoError(t, err)
	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "60 s is past the maximum wait")
	assert.Empty(t, sc.waits)

	retry, err = ratekitgrpc.NewRetry(ratekitgrpc.WithClock(sc))
	require.NoError(t, err)
	conn = serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)), grpc.WithChainUnaryInterceptor(retry.Unary))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = echo(conn, ctx, "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the wait would reach the deadline")
	assert.Empty(t, sc.waits)

	_, err = ratekitgrpc.NewRetry(ratekitgrpc.WithMaxRetries(-1))
	assert.EqualError(t, err, "ratekitgrpc: max retries -1 is negative")
	_, err = ratekitgrpc.NewRetry(ratekitgrpc.WithMaxWait(-time.Second))
	assert.Error(t, err)
	_, err = ratekitgrpc.NewRetry(nil, ratekitgrpc.WithClock(nil), ratekitgrpc.WithObserver(nil))
	assert.NoError(t, err, "nil options are ignored")
}

// A server-streaming call rejected when it opens is opened again after
// the wait, its request sent again.
func TestRetryStream(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	sc := &serverClock{clock: clock, move: true}
	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithClock(sc))
	require.NoError(t, err)
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP))},
		grpc.WithChainStreamInterceptor(retry.Stream))
	_, _, err = watchCall(conn, context.Background(), "one")
	require.NoError(t, err)
	replies, _, err := watchCall(conn, context.Background(), "two")
	require.NoError(t, err)
	assert.Equal(t, []string{"two", "two", "two"}, replies)
	assert.Equal(t, []time.Duration{time.Minute}, sc.waits)
}

// A client-streaming call that the server rejects is never retried: its
// messages may have been acted on.
func TestRetryNotClientStreams(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	sc := &serverClock{clock: clock, move: true}
	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithClock(sc))
	require.NoError(t, err)
	conn := serve(t, []grpc.ServerOption{grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP))},
		grpc.WithChainStreamInterceptor(retry.Stream))
	n := new(wrapperspb.Int64Value)
	_, err = clientStream(conn, context.Background(), "Upload", n, "a")
	require.NoError(t, err)
	_, err = clientStream(conn, context.Background(), "Upload", n, "a")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Empty(t, sc.waits)
}

// A call whose context ends while it waits, on the system clock, ends at
// once with the context's status, and leaves no goroutine behind; the
// zero Retry is usable.
func TestRetryCancel(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := adaptertest.Limiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits atomic.Int32
	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithObserver(func(w client.Wait) {
		waits.Add(1)
		cancel() // while the call waits the minute the server asked for
	}))
	require.NoError(t, err)
	conn := serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)), grpc.WithChainUnaryInterceptor(retry.Unary))
	_, _, err = echo(conn, context.Background(), "Echo", "hi")
	require.NoError(t, err)

	before := runtime.NumGoroutine()
	_, _, err = echo(conn, ctx, "Echo", "hi")
	assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	assert.Equal(t, int32(1), waits.Load())
	for i := 0; runtime.NumGoroutine() > before && i < 100; i++ {
		time.Sleep(10 * time.Millisecond) // the call's own goroutines ending, not a timing
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "no goroutine left behind")

	var zero ratekitgrpc.Retry
	conn = serve(t, unaryServer(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)), grpc.WithChainUnaryInterceptor(zero.Unary))
	short, cancelShort := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelShort()
	_, _, err = echo(conn, short, "Echo", "hi")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the minute's wait would pass the deadline: %v", err)
}
