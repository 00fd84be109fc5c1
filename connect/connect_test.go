package ratekitconnect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	ratekitconnect "github.com/ratekit/ratekit/connect"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
)

var quiet = slog.New(slog.DiscardHandler)

// The call table (TestConformance) runs clients of the Connect protocol
// over HTTP/2 and of gRPC; over the other protocols, Connect over
// HTTP/1.1 and gRPC-Web (its trailers in the body), the answers reach the
// client too: a rejection with its fields and details, a call without a
// key, a store failing closed.
func TestOtherProtocols(t *testing.T) {
	for _, p := range []protocol{connectHTTP1, grpcWebProtocol} {
		t.Run(p.name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			lim := adaptertest.Limiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
			closed, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
				core.WithStore(adaptertest.DownStore()), core.WithFailClosed(), core.WithLogger(quiet))
			require.NoError(t, err)
			s := serve(t, connect.WithInterceptors(
				ratekitconnect.New(lim, ratekitconnect.Header("X-Api-Key"), ratekitconnect.WithLogger(quiet), ratekitconnect.WithMethods(echoProc)),
				ratekitconnect.New(closed, ratekitconnect.PeerIP, ratekitconnect.WithMethods(otherProc)),
			))
			key := http.Header{"X-Api-Key": {"secret-key-1"}}

			got, h, err := s.echo(p, context.Background(), echoProc, "hi", key)
			require.NoError(t, err)
			assert.Equal(t, "hi", got)
			assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"))
			clock.Advance(15500 * time.Millisecond)
			_, h, err = s.echo(p, context.Background(), echoProc, "hi", key)
			require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
			var cerr *connect.Error
			require.ErrorAs(t, err, &cerr)
			assert.Equal(t, "ratekit: rate limit exceeded", cerr.Message())
			ri, qf := details(t, err)
			require.NotNil(t, ri)
			assert.Equal(t, 44500*time.Millisecond, ri.GetRetryDelay().AsDuration())
			require.NotNil(t, qf)
			assert.Equal(t, "api", qf.GetViolations()[0].GetSubject())
			assert.NotContains(t, fmt.Sprint(err, h, ri, qf), "secret-key-1")
			assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"), "the headers arrive with the error")
			assert.Equal(t, []string{"45"}, h.Values("Retry-After"))
			assert.Empty(t, h.Values("Cache-Control"))

			_, h, err = s.echo(p, context.Background(), echoProc, "hi", nil)
			assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
			assert.Empty(t, h.Values("X-Ratelimit-Limit"))

			_, h, err = s.echo(p, context.Background(), otherProc, "hi", nil)
			assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
			assert.NotContains(t, err.Error(), "store down")
			ri, qf = details(t, err)
			require.NotNil(t, ri)
			assert.Equal(t, time.Second, ri.GetRetryDelay().AsDuration())
			assert.Nil(t, qf)
			assert.Equal(t, []string{"1"}, h.Values("Retry-After"))
		})
	}
}

// On the wire, a rejection over the Connect protocol is HTTP 429 with the
// rate-limit header fields and Connect's JSON error, whose message is
// fixed.
func TestConnectWire(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.Header("X-Api-Key"))))
	post := func() (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, s.url+echoProc, strings.NewReader(`"hi"`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "secret-key-1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	resp, body := post()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"hi"`, body)
	assert.Equal(t, "1", resp.Header.Get("X-Ratelimit-Limit"))
	assert.Equal(t, "0", resp.Header.Get("X-Ratelimit-Remaining"))

	resp, body = post()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "60", resp.Header.Get("Retry-After"))
	assert.Equal(t, "0", resp.Header.Get("X-Ratelimit-Remaining"))
	assert.Contains(t, body, `"code":"resource_exhausted"`)
	assert.Contains(t, body, `"message":"ratekit: rate limit exceeded"`)
	assert.NotContains(t, body, "secret-key-1")
}

// WithDecisionInContext: a stream's handler reads the decision (the call
// table checks unary calls).
func TestDecisionFrom(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "api", Rate: core.PerMinute(5)})
	s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP, ratekitconnect.WithDecisionInContext())))
	replies, _, err := s.watch(grpcProtocol, context.Background(), "hi", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"remaining=4", "remaining=4", "remaining=4"}, replies)
}

// The rules see the procedure as the route of a POST, and the request
// header as header fields.
func TestRules(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", Value: "POST /test.Svc/Echo", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1}},
		{Key: "header:x-tenant", Value: "acme", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}})
	s := serve(t, connect.WithInterceptors(ratekitconnect.Rules(e)))
	_, h, err := s.echo(grpcProtocol, context.Background(), echoProc, "hi", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, h.Values("X-Ratelimit-Limit"))
	_, _, err = s.echo(connectProtocol, context.Background(), echoProc, "hi", nil)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)

	_, h, err = s.echo(connectProtocol, context.Background(), otherProc, "hi", nil)
	require.NoError(t, err, "no rule matches Other")
	assert.Empty(t, h.Values("X-Ratelimit-Limit"))

	acme := http.Header{"X-Tenant": {"acme"}}
	for range 2 {
		_, h, err = s.echo(connectProtocol, context.Background(), otherProc, "hi", acme)
		require.NoError(t, err)
		assert.Equal(t, []string{"2"}, h.Values("X-Ratelimit-Limit"))
	}
	_, _, err = s.echo(grpcProtocol, context.Background(), otherProc, "hi", acme)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
}

// The rules see the peer as the remote address and the context's values:
// descriptor keys remote_address and user.
func TestRulesPeerAndUser(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Path: echoProc}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1}},
		{Key: "user", Match: &rules.Match{Path: otherProc}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1}},
	}}, rules.WithUserKey(userKey{}))
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if u := req.Header().Get("X-User"); u != "" {
				ctx = context.WithValue(ctx, userKey{}, u)
			}
			return next(ctx, req)
		}
	})
	s := serve(t, connect.WithInterceptors(auth, ratekitconnect.Rules(e, ratekitconnect.WithDecisionInContext(), ratekitconnect.WithLogger(quiet))))
	got, _, err := s.echo(grpcProtocol, context.Background(), echoProc, "hi", nil)
	require.NoError(t, err)
	assert.Equal(t, "remaining=0", got, "the rules' decision, kept")
	_, _, err = s.echo(connectProtocol, context.Background(), echoProc, "hi", nil)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "one call a minute from 127.0.0.1: %v", err)

	for _, user := range []string{"alice", "bob"} {
		_, _, err = s.echo(connectProtocol, context.Background(), otherProc, "hi", http.Header{"X-User": {user}})
		require.NoError(t, err, user)
	}
	_, _, err = s.echo(connectProtocol, context.Background(), otherProc, "hi", http.Header{"X-User": {"alice"}})
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	got, _, err = s.echo(connectProtocol, context.Background(), otherProc, "hi", nil)
	require.NoError(t, err, "a call without a user: the rule does not apply")
	assert.Equal(t, "hi", got, "no decision")
}

// A stream is decided when it opens, over every protocol.
func TestStreamOpening(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
			s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP)))
			replies, h, err := s.watch(p, context.Background(), "hi", nil)
			require.NoError(t, err)
			assert.Equal(t, []string{"hi", "hi", "hi"}, replies)
			assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"))

			replies, h, err = s.watch(p, context.Background(), "hi", nil)
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
			assert.Empty(t, replies)
			ri, qf := details(t, err)
			require.NotNil(t, ri)
			assert.Equal(t, time.Minute, ri.GetRetryDelay().AsDuration())
			require.NotNil(t, qf)
			assert.Equal(t, "streams", qf.GetViolations()[0].GetSubject())
			assert.Equal(t, []string{"60"}, h.Values("Retry-After"))
			assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"))
		})
	}
}

// countHandlers counts the streams that reach the handlers after it.
type countHandlers struct{ n atomic.Int32 }

func (c *countHandlers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (c *countHandlers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (c *countHandlers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c.n.Add(1)
		return next(ctx, conn)
	}
}

// A client stream rejected when it opens never reaches its handler, and
// its headers reach the client with the error.
func TestStreamRejectedAtOpen(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	count := new(countHandlers)
	s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP), count))
	n, _, err := clientStream[wrapperspb.Int64Value](s, grpcProtocol, context.Background(), uploadProc, []string{"a", "b"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), n.GetValue())
	_, h, err := clientStream[wrapperspb.Int64Value](s, grpcProtocol, context.Background(), uploadProc, []string{"a", "b"})
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	assert.Equal(t, int32(1), count.n.Load(), "the rejected stream's handler never ran")
	assert.Equal(t, []string{"1"}, h.Values("X-Ratelimit-Limit"))
	assert.Equal(t, []string{"0"}, h.Values("X-Ratelimit-Remaining"))
	assert.Equal(t, []string{"60"}, h.Values("Retry-After"))
}

// StreamMessages limits each message at its cost: the message past the
// limit makes Receive return ResourceExhausted, which ends the stream.
func TestStreamMessages(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "bytes", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
			cost := func(msg any) int { return len(msg.(*wrapperspb.StringValue).GetValue()) }
			s := serve(t, connect.WithInterceptors(ratekitconnect.StreamMessages(lim, ratekitconnect.PeerIP, cost)))
			n, h, err := clientStream[wrapperspb.Int64Value](s, p, context.Background(), uploadProc, []string{"abcd", "efgh"})
			require.NoError(t, err)
			assert.Equal(t, int64(2), n.GetValue(), "8 of 10")
			assert.Empty(t, h.Values("X-Ratelimit-Remaining"), "a message's decision sets no header")
			_, _, err = clientStream[wrapperspb.Int64Value](s, p, context.Background(), uploadProc, []string{"ij", "klm"})
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "the second message would make 13: %v", err)
			ri, qf := details(t, err)
			require.NotNil(t, ri)
			require.NotNil(t, qf)
			assert.Equal(t, "bytes", qf.GetViolations()[0].GetSubject())

			got, _, err := s.echo(p, context.Background(), echoProc, "a long unary request", nil)
			require.NoError(t, err, "unary calls pass")
			assert.Equal(t, "a long unary request", got)
			_, _, err = s.watch(p, context.Background(), "nopqrstuvw", nil)
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "a server stream's request is a message: %v", err)
		})
	}
}

// A handler that drops a rejected message and receives again reads the
// next one; a message under the limit again is admitted.
func TestStreamMessagesContinue(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "bytes", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	cost := func(msg any) int { return len(msg.(*wrapperspb.StringValue).GetValue()) }
	s := serve(t, connect.WithInterceptors(ratekitconnect.StreamMessages(lim, ratekitconnect.PeerIP, cost)))
	out, _, err := clientStream[wrapperspb.StringValue](s, grpcProtocol, context.Background(), tallyProc, []string{"abc", "defg", "h", "", "ijk"})
	require.NoError(t, err)
	assert.Equal(t, "3/2", out.GetValue(), "abc, h and the empty message admitted (4 of 5); defg and ijk rejected")
}

// Costs out of range, from WithCost or a message's cost, are Internal with
// a fixed message, never a panic; a nil message cost counts 1; a nil
// option is left out.
func TestCostOutOfRange(t *testing.T) {
	lim := adaptertest.Limiter(t, nil, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	negative := func(context.Context, ratekitconnect.Call) int { return -1 }
	four := func(context.Context, ratekitconnect.Call) int { return 4 }
	s := serve(t, connect.WithInterceptors(
		ratekitconnect.New(lim, ratekitconnect.PeerIP, nil, ratekitconnect.WithCost(negative), ratekitconnect.WithLogger(quiet), ratekitconnect.WithMethods(echoProc)),
		ratekitconnect.New(lim, ratekitconnect.PeerIP, ratekitconnect.WithCost(four), ratekitconnect.WithLogger(quiet), ratekitconnect.WithMethods(otherProc)),
		ratekitconnect.StreamMessages(lim, ratekitconnect.PeerIP, func(any) int { return 1 << 40 }, ratekitconnect.WithLogger(quiet), ratekitconnect.WithMethods(uploadProc)),
		ratekitconnect.StreamMessages(lim, ratekitconnect.PeerIP, nil, nil, ratekitconnect.WithMethods(tallyProc)),
	))
	for _, proc := range []string{echoProc, otherProc} {
		_, _, err := s.echo(connectProtocol, context.Background(), proc, "hi", nil)
		assert.Equal(t, connect.CodeInternal, connect.CodeOf(err), "%s: %v", proc, err)
		var cerr *connect.Error
		require.ErrorAs(t, err, &cerr)
		assert.Equal(t, "ratekit: rate limit unavailable for this call", cerr.Message())
	}
	_, _, err := clientStream[wrapperspb.Int64Value](s, grpcProtocol, context.Background(), uploadProc, []string{"a"})
	assert.Equal(t, connect.CodeInternal, connect.CodeOf(err), "%v", err)
	out, _, err := clientStream[wrapperspb.StringValue](s, grpcProtocol, context.Background(), tallyProc, []string{"aaaaaaaa", "b", "c", "d"})
	require.NoError(t, err)
	assert.Equal(t, "3/1", out.GetValue(), "a nil cost counts each message 1, whatever its size")
}

// A denied handler or an error handler that returns nil does not let the
// call pass: the call ends with the default error. One that returns an
// error ends the call with it.
func TestHandlers(t *testing.T) {
	lim := adaptertest.Limiter(t, nil, core.Limit{Name: "api", Rate: core.Rate{Count: 0, Period: time.Minute}})
	var denied, failed atomic.Int32
	s := serve(t, connect.WithInterceptors(
		ratekitconnect.New(lim, ratekitconnect.PeerIP, ratekitconnect.WithMethods(echoProc),
			ratekitconnect.WithDeniedHandler(func(_ context.Context, call ratekitconnect.Call, d core.Decision) error {
				denied.Add(1)
				if call.Header.Get("X-Teapot") != "" {
					return connect.NewError(connect.CodePermissionDenied, errors.New("blocked: "+d.Name))
				}
				return nil
			})),
		ratekitconnect.New(lim, ratekitconnect.Header("X-Api-Key"), ratekitconnect.WithMethods(otherProc), ratekitconnect.WithLogger(quiet),
			ratekitconnect.WithErrorHandler(func(_ context.Context, call ratekitconnect.Call, err error) error {
				failed.Add(1)
				if call.Header.Get("X-Teapot") != "" {
					return connect.NewError(connect.CodeUnauthenticated, errors.New("sign in"))
				}
				return nil
			})),
	))
	_, h, err := s.echo(grpcProtocol, context.Background(), echoProc, "hi", nil)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	ri, _ := details(t, err)
	assert.NotNil(t, ri)
	assert.Equal(t, []string{"60"}, h.Values("Retry-After"), "the headers are set before the denied handler runs")
	_, _, err = s.echo(grpcProtocol, context.Background(), echoProc, "hi", http.Header{"X-Teapot": {"1"}})
	assert.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "blocked: api")

	_, _, err = s.echo(grpcProtocol, context.Background(), otherProc, "hi", nil)
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	_, _, err = s.echo(grpcProtocol, context.Background(), otherProc, "hi", http.Header{"X-Teapot": {"1"}})
	assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
	assert.Equal(t, int32(2), denied.Load())
	assert.Equal(t, int32(2), failed.Load())
}

// blocker holds the calls of Other and the streams of Watch until
// released, each once it has told entered.
type blocker struct {
	entered chan string
	release chan struct{}
}

func newBlocker() *blocker { return &blocker{make(chan string, 2), make(chan struct{})} }

func (b *blocker) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().Procedure == otherProc {
			b.entered <- otherProc
			<-b.release
		}
		return next(ctx, req)
	}
}

func (b *blocker) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (b *blocker) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().Procedure == watchProc {
			b.entered <- watchProc
			<-b.release
		}
		return next(ctx, conn)
	}
}

// A concurrency limit rejects a call over its slots with
// ResourceExhausted, RetryInfo and Retry-After, and no rate-limit fields;
// a unary call and a stream hold their slots until their handlers return.
func TestConcurrency(t *testing.T) {
	for _, held := range []string{otherProc, watchProc} {
		lim, err := concurrency.NewLimiter(1, concurrency.WithName("inflight"), concurrency.WithRetryAfter(2*time.Second))
		require.NoError(t, err)
		b := newBlocker()
		s := serve(t, connect.WithInterceptors(ratekitconnect.Concurrency(lim, ratekitconnect.PeerIP), b))
		done := make(chan error, 1)
		go func() {
			var err error
			if held == otherProc {
				_, _, err = s.echo(connectProtocol, context.Background(), otherProc, "hi", nil)
			} else {
				_, _, err = s.watch(grpcProtocol, context.Background(), "hi", nil)
			}
			done <- err
		}()
		assert.Equal(t, held, <-b.entered)
		for _, p := range protocols {
			_, h, err := s.echo(p, context.Background(), echoProc, "hi", nil)
			assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%s, %s: %v", held, p.name, err)
			ri, qf := details(t, err)
			require.NotNil(t, ri)
			assert.Equal(t, 2*time.Second, ri.GetRetryDelay().AsDuration())
			require.NotNil(t, qf)
			assert.Equal(t, "inflight", qf.GetViolations()[0].GetSubject())
			assert.Equal(t, []string{"2"}, h.Values("Retry-After"))
			assert.Empty(t, h.Values("X-Ratelimit-Limit"))
		}
		close(b.release)
		require.NoError(t, <-done)
		_, _, err = s.echo(connectProtocol, context.Background(), echoProc, "hi", nil)
		assert.NoError(t, err, "the slot is free again")
	}
}

// Under two interceptors that decide a call, the one that runs last (the
// inner) sets each field, as an HTTP middleware does.
func TestChainedHeaders(t *testing.T) {
	outer := adaptertest.Limiter(t, nil, core.Limit{Name: "outer", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	inner := adaptertest.Limiter(t, nil, core.Limit{Name: "inner", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	s := serve(t, connect.WithInterceptors(ratekitconnect.New(outer, ratekitconnect.PeerIP), ratekitconnect.New(inner, ratekitconnect.PeerIP)))
	for _, p := range []protocol{connectProtocol, grpcProtocol} {
		_, h, err := s.echo(p, context.Background(), echoProc, "hi", nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"3"}, h.Values("X-Ratelimit-Limit"), p.name)
	}
}

// Every style's fields reach the client of a stream.
func TestStreamHeaderStyles(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "streams", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	s := serve(t, connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP, ratekitconnect.WithHeaders(answer.Both))))
	_, h, err := s.watch(grpcProtocol, context.Background(), "hi", nil)
	require.NoError(t, err)
	for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Ratelimit-Policy"} {
		assert.Len(t, h.Values(k), 1, k)
	}
	assert.Equal(t, []string{`"streams";r=4;t=60`}, h.Values("Ratelimit"))
}

// Called as a plain UnaryFunc, outside a Connect handler, the interceptor
// puts the headers on the response or the error; a call held by a
// shaping bucket whose context ends meanwhile ends with Canceled, and
// never reaches its handler. On a client, it passes every call.
func TestUnaryFunc(t *testing.T) {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch),
		core.Limit{Name: "shaped", Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 5, Shaping: true})
	var handled atomic.Int32
	fn := ratekitconnect.New(lim, ratekitconnect.Header("X-Api-Key"), ratekitconnect.WithLogger(quiet)).WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		handled.Add(1)
		return connect.NewResponse(wrapperspb.String("ok")), nil
	})
	req := connect.NewRequest(wrapperspb.String("hi"))
	req.Header().Set("X-Api-Key", "k1")

	resp, err := fn(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, "5", resp.Header().Get("X-Ratelimit-Limit"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = fn(ctx, req)
	assert.Equal(t, connect.CodeCanceled, connect.CodeOf(err), "%v", err)
	assert.Equal(t, "5", meta(err).Get("X-Ratelimit-Limit"))
	assert.Equal(t, int32(1), handled.Load(), "the held call never reached its handler")

	_, err = fn(context.Background(), connect.NewRequest(wrapperspb.String("hi")))
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	assert.Empty(t, meta(err).Get("X-Ratelimit-Limit"))

	// A client's calls pass: the server interceptors are for handlers.
	block := adaptertest.Limiter(t, nil, core.Limit{Name: "blocked", Rate: core.Rate{Count: 0, Period: time.Minute}})
	s := serve(t)
	got, _, err := s.echo(grpcProtocol, context.Background(), echoProc, "hi", nil,
		connect.WithInterceptors(ratekitconnect.New(block, ratekitconnect.PeerIP), ratekitconnect.StreamMessages(block, ratekitconnect.PeerIP, nil)))
	require.NoError(t, err)
	assert.Equal(t, "hi", got)
	replies, _, err := s.watch(grpcProtocol, context.Background(), "hi", nil, connect.WithInterceptors(ratekitconnect.New(block, ratekitconnect.PeerIP)))
	require.NoError(t, err)
	assert.Len(t, replies, 3)
}

// The constructors refuse what they cannot run with.
func TestConstructorsPanic(t *testing.T) {
	lim := adaptertest.Limiter(t, nil, core.Limit{Rate: core.PerMinute(1)})
	cl, err := concurrency.NewLimiter(1)
	require.NoError(t, err)
	assert.PanicsWithValue(t, "ratekitconnect: New needs a limiter and a key function", func() { ratekitconnect.New(nil, ratekitconnect.PeerIP) })
	assert.Panics(t, func() { ratekitconnect.New(lim, nil) })
	assert.Panics(t, func() { ratekitconnect.Rules(nil) })
	assert.Panics(t, func() { ratekitconnect.Concurrency(cl, nil) })
	assert.Panics(t, func() { ratekitconnect.StreamMessages(nil, ratekitconnect.PeerIP, nil) })
	assert.Panics(t, func() { ratekitconnect.LimitByIP(-1, time.Minute) })
}
