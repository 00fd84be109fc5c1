package adapter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
)

// TestRPCStatus: each answer of the kit has its code and fixed message.
func TestRPCStatus(t *testing.T) {
	for _, c := range []struct {
		status  int
		code    uint32
		message string
	}{
		{http.StatusBadRequest, 3, "ratekit: the call has no value to be rate limited by"},
		{http.StatusTooManyRequests, 8, "ratekit: rate limit exceeded"},
		{http.StatusServiceUnavailable, 14, "ratekit: rate limiter unavailable"},
		{http.StatusInternalServerError, 13, "ratekit: rate limit unavailable for this call"},
		{http.StatusTeapot, 13, "ratekit: rate limit unavailable for this call"},
	} {
		code, message := adapter.RPCStatus(c.status)
		assert.Equal(t, c.code, code, "%d", c.status)
		assert.Equal(t, c.message, message, "%d", c.status)
	}

	code, message := adapter.RPCErrorStatus(fmt.Errorf("no header: %w", keyfuncs.ErrMissing))
	assert.Equal(t, adapter.RPCInvalidArgument, code)
	assert.Equal(t, adapter.MessageNoKey, message)
	code, message = adapter.RPCErrorStatus(errors.New("lookup of secret-key-1 failed"))
	assert.Equal(t, adapter.RPCInternal, code)
	assert.Equal(t, adapter.MessageKeyFailed, message)
}

// TestRPCRejection: a store failing closed is Unavailable without a
// quota; a limit of zero calls and a concurrency refusal are rejections
// by a limit.
func TestRPCRejection(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     core.Decision
		code  uint32
		quota bool
	}{
		{"store failed", core.Decision{Name: "api", RetryAfter: time.Second}, adapter.RPCUnavailable, false},
		{"rate", core.Decision{Name: "api", Quota: 10, ResetAfter: time.Minute, RetryAfter: 6 * time.Second}, adapter.RPCResourceExhausted, true},
		{"zero limit", core.Decision{Name: "blocked", Quota: 0, ResetAfter: time.Minute}, adapter.RPCResourceExhausted, true},
		{"concurrency", core.Decision{Name: "inflight", Quota: 1, RetryAfter: time.Second}, adapter.RPCResourceExhausted, true},
	} {
		code, message, quota := adapter.RPCRejection(c.d)
		assert.Equal(t, c.code, code, c.name)
		assert.Equal(t, c.quota, quota, c.name)
		assert.Equal(t, c.code == adapter.RPCUnavailable, adapter.StoreFailed(c.d), c.name)
		want, _ := adapter.RPCStatus(http.StatusTooManyRequests)
		if !c.quota {
			want, _ = adapter.RPCStatus(http.StatusServiceUnavailable)
		}
		assert.Equal(t, want, code, c.name)
		assert.NotEmpty(t, message)
	}
	for code := uint32(0); code <= 16; code++ {
		assert.Equal(t, code == 8 || code == 14, adapter.RPCRetryable(code), "code %d", code)
	}
}

// TestNewRPC: the port's denied handler answers a rejection unless an
// option replaces it; nil options are left out, where New would panic.
func TestNewRPC(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.Rate{Count: 0, Period: time.Minute}})
	errPort, errOption := errors.New("the port's rejection"), errors.New("the option's rejection")
	portDenied := adapter.WithDeniedHandler(func(exchange, core.Decision) error { return errPort })

	_, err := do(adapter.NewRPC(testPort{}, portDenied, nil, quiet, nil).Limit(lim, clientKey), "alice")
	assert.Equal(t, errPort, err)
	_, err = do(adapter.NewRPC(testPort{}, portDenied, adapter.WithDeniedHandler(func(exchange, core.Decision) error { return errOption })).Limit(lim, clientKey), "alice")
	assert.Equal(t, errOption, err, "an option replaces the port's")
}

// TestMethodMatcher: a method exactly, a service by its prefix, with or
// without the leading slash; nothing else.
func TestMethodMatcher(t *testing.T) {
	for _, c := range []struct {
		methods     []string
		echo, other bool // /test.Svc/Echo and /test.Svc/Other named
	}{
		{[]string{"/test.Svc/Echo"}, true, false},
		{[]string{"test.Svc/Other"}, false, true},
		{[]string{"/test.Svc/"}, true, true},
		{[]string{"test.Svc/"}, true, true},
		{[]string{"test.Svc"}, true, true},
		{[]string{"/test.Svc"}, true, true},
		{[]string{" test.Svc/Echo "}, true, false},
		{[]string{"/other.Svc/"}, false, false},
		{[]string{"/test.Svc/Ech"}, false, false},
		{[]string{"/test.Sv"}, false, false},
		{[]string{"", "  "}, false, false},
		{nil, false, false},
		{[]string{"/test.Svc/Echo", "test.Svc/Other"}, true, true},
	} {
		match := adapter.MethodMatcher(c.methods...)
		assert.Equal(t, c.echo, match("/test.Svc/Echo"), "%q: Echo", c.methods)
		assert.Equal(t, c.other, match("/test.Svc/Other"), "%q: Other", c.methods)
		assert.False(t, match("/test.SvcX/Echo"), "%q: another service", c.methods)
		assert.False(t, match(""), "%q: no method", c.methods)
	}
}

type rpcCtxKey struct{}

// TestJoinFirstKeys: the keys of JoinKeys and FirstKeys are keyfuncs'
// keys of the same parts, with the same errors.
func TestJoinFirstKeys(t *testing.T) {
	method := func(_ context.Context, m string) (string, error) { return m, nil }
	user := func(ctx context.Context, _ string) (string, error) {
		if u, _ := ctx.Value(rpcCtxKey{}).(string); u != "" {
			return u, nil
		}
		return "", fmt.Errorf("no user: %w", keyfuncs.ErrMissing)
	}
	broken := func(context.Context, string) (string, error) { return "", errors.New("lookup failed") }
	ctx := context.WithValue(context.Background(), rpcCtxKey{}, "alice|7:x")

	join := keyfuncs.Join(keyfuncs.Header("M"), keyfuncs.User(rpcCtxKey{}))
	r := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)
	r.Header.Set("M", "/pkg.Svc/Get")
	want, err := join(r)
	require.NoError(t, err)
	got, err := adapter.JoinKeys(method, user)(ctx, "/pkg.Svc/Get")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, "12:/pkg.Svc/Get|9:alice|7:x", got)

	_, err = adapter.JoinKeys(method, user)(context.Background(), "/pkg.Svc/Get")
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	_, err = adapter.JoinKeys(method, broken)(ctx, "/pkg.Svc/Get")
	assert.EqualError(t, err, "lookup failed")
	_, err = adapter.JoinKeys[string](method, nil)(ctx, "/pkg.Svc/Get")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)

	first := adapter.FirstKeys(user, method)
	got, err = first(ctx, "/pkg.Svc/Get")
	require.NoError(t, err)
	assert.Equal(t, "0:alice|7:x", got)
	got, err = first(context.Background(), "/pkg.Svc/Get")
	require.NoError(t, err)
	assert.Equal(t, "1:/pkg.Svc/Get", got)
	_, err = adapter.FirstKeys(user)(context.Background(), "")
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	_, err = adapter.FirstKeys(broken, method)(ctx, "/pkg.Svc/Get")
	assert.EqualError(t, err, "lookup failed", "only a missing key passes on")
	_, err = adapter.FirstKeys[string, adapter.KeyOf[string]](nil)(ctx, "")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)

	// A port's key type stays its own: the functions are of it.
	type portKey func(ctx context.Context, fullMethod string) (string, error)
	var k portKey = adapter.JoinKeys[string, portKey](method, user)
	got, err = k(ctx, "/pkg.Svc/Get")
	require.NoError(t, err)
	assert.Equal(t, "12:/pkg.Svc/Get|9:alice|7:x", got)
}

// TestJoinFirstKeysConcurrent: calls at once each get their own call's
// parts, never another's.
func TestJoinFirstKeysConcurrent(t *testing.T) {
	part := func(ctx context.Context, m string) (string, error) { return ctx.Value(rpcCtxKey{}).(string) + m, nil }
	join, first := adapter.JoinKeys(part, part), adapter.FirstKeys(part)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				u, m := fmt.Sprint("u", g), fmt.Sprint("/m", i)
				ctx := context.WithValue(context.Background(), rpcCtxKey{}, u)
				j, err := join(ctx, m)
				if assert.NoError(t, err) {
					assert.Equal(t, fmt.Sprintf("%d:%s|%d:%s", len(u+m), u+m, len(u+m), u+m), j)
				}
				f, err := first(ctx, m)
				if assert.NoError(t, err) {
					assert.Equal(t, "0:"+u+m, f)
				}
			}
		}()
	}
	wg.Wait()
}

// TestJoinFirstKeysAllocs: the key is all a call allocates.
func TestJoinFirstKeysAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts: under the race detector, sync.Pool drops pooled values at random")
	}
	method := func(_ context.Context, m string) (string, error) { return m, nil }
	user := func(context.Context, string) (string, error) { return "alice", nil }
	join, first := adapter.JoinKeys(method, user), adapter.FirstKeys(method, user)
	ctx := context.Background()
	assert.Equal(t, 1.0, testing.AllocsPerRun(1000, func() { _, _ = join(ctx, "/pkg.Svc/Get") }), "Join: the key")
	assert.Equal(t, 1.0, testing.AllocsPerRun(1000, func() { _, _ = first(ctx, "/pkg.Svc/Get") }), "First: the prefixed key")
}

// BenchmarkJoinFirstKeys: the cost of the kit's Join and First of two
// keys.
func BenchmarkJoinFirstKeys(b *testing.B) {
	method := func(_ context.Context, m string) (string, error) { return m, nil }
	user := func(context.Context, string) (string, error) { return "alice", nil }
	ctx := context.Background()
	for name, k := range map[string]adapter.KeyOf[string]{"join": adapter.JoinKeys(method, user), "first": adapter.FirstKeys(method, user)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = k(ctx, "/pkg.Svc/Get")
			}
		})
	}
}

type accountID int

// TestContextValueKey: the value is keyed as keyfuncs.ContextValue keys
// it; an absent value is missing, named with the port's prefix; a key
// that context.WithValue refuses is a configuration error.
func TestContextValueKey(t *testing.T) {
	key := adapter.ContextValueKey("ratekitx", rpcCtxKey{})
	got, err := key(context.WithValue(context.Background(), rpcCtxKey{}, accountID(42)))
	require.NoError(t, err)
	assert.Equal(t, "42", got)
	got, err = key(context.WithValue(context.Background(), rpcCtxKey{}, " alice "))
	require.NoError(t, err)
	assert.Equal(t, " alice ", got, "as keyfuncs.ContextValue: not trimmed")

	_, err = key(context.Background())
	require.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.True(t, strings.HasPrefix(err.Error(), "ratekitx: context value adapter_test.rpcCtxKey{}"), err.Error())
	_, err = key(context.WithValue(context.Background(), rpcCtxKey{}, 1.5))
	require.Error(t, err)
	assert.NotErrorIs(t, err, keyfuncs.ErrMissing, "an unsupported type is a programming error")

	for _, k := range []any{nil, []string{"x"}} {
		_, err = adapter.ContextValueKey("ratekitx", k)(context.Background())
		assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured, "%#v", k)
	}
}

// recordClock is a client.Clock that records each wait instead of
// sleeping, and fails with err.
type recordClock struct {
	waits []time.Duration
	err   error
}

func (c *recordClock) Now() time.Time { return time.Time{} }

func (c *recordClock) Sleep(_ context.Context, d time.Duration) error {
	c.waits = append(c.waits, d)
	return c.err
}

// TestRetryPolicy: a wait within the limits is observed, logged and
// waited; past the retries, the maximum wait or the deadline, none is.
func TestRetryPolicy(t *testing.T) {
	p, err := adapter.NewRetryPolicy("ratekitx")
	require.NoError(t, err)
	assert.Equal(t, 3, p.MaxRetries)
	assert.Equal(t, time.Minute, p.MaxWait)
	assert.Nil(t, p.Clock)
	_, err = adapter.NewRetryPolicy("ratekitx", adapter.WithMaxRetries(-1))
	assert.EqualError(t, err, "ratekitx: max retries -1 is negative")
	_, err = adapter.NewRetryPolicy("ratekitx", nil, adapter.WithMaxWait(-time.Second))
	assert.EqualError(t, err, "ratekitx: max wait -1s is negative")

	clock := &recordClock{}
	var seen []client.Wait
	var logs bytes.Buffer
	p, err = adapter.NewRetryPolicy("ratekitx", nil, adapter.WithMaxRetries(2), adapter.WithMaxWait(30*time.Second),
		adapter.WithRetryClock(clock), adapter.WithRetryClock(nil),
		adapter.WithRetryObserver(func(w client.Wait) { seen = append(seen, w) }),
		adapter.WithRetryLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	assert.Equal(t, 2, p.MaxRetries)
	assert.Equal(t, 30*time.Second, p.MaxWait)
	assert.Same(t, clock, p.Clock, "a nil clock keeps the one set")

	again, err := p.Wait(context.Background(), "/pkg.Svc/Get", 1, 1500*time.Millisecond)
	require.NoError(t, err)
	assert.True(t, again)
	again, err = p.Wait(context.Background(), "/pkg.Svc/Get", 2, 0)
	require.NoError(t, err)
	assert.True(t, again, "a delay of 0 is a retry at once")
	assert.Equal(t, []time.Duration{1500 * time.Millisecond, 0}, clock.waits)
	assert.Equal(t, client.Wait{Host: "/pkg.Svc/Get", Duration: 1500 * time.Millisecond, Attempt: 1, Source: adapter.SourceRetryInfo}, seen[0])
	assert.Equal(t, 2, strings.Count(logs.String(), "ratekitx: rate limited, waiting"), logs.String())
	assert.Contains(t, logs.String(), "method=/pkg.Svc/Get wait=1.5s attempt=1 source=retry-info")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		attempt int
		delay   time.Duration
	}{
		{"retries spent", context.Background(), 3, time.Second},
		{"past the maximum wait", context.Background(), 1, 31 * time.Second},
		{"past the deadline", ctx, 1, 10 * time.Second},
	} {
		again, err = p.Wait(c.ctx, "/pkg.Svc/Get", c.attempt, c.delay)
		assert.NoError(t, err, c.name)
		assert.False(t, again, c.name)
	}
	assert.Len(t, clock.waits, 2, "no wait refused was waited")
	assert.Len(t, seen, 2)

	clock.err = context.Canceled
	again, err = p.Wait(context.Background(), "/pkg.Svc/Get", 1, time.Second)
	assert.False(t, again)
	assert.ErrorIs(t, err, context.Canceled, "the clock's error")

	// The system clock: a wait whose context has ended returns at once.
	sys, err := adapter.NewRetryPolicy("ratekitx")
	require.NoError(t, err)
	done, stop := context.WithCancel(context.Background())
	stop()
	again, err = sys.Wait(done, "/pkg.Svc/Get", 1, time.Minute)
	assert.False(t, again)
	assert.ErrorIs(t, err, context.Canceled)
	again, err = sys.Wait(context.Background(), "/pkg.Svc/Get", 1, 0)
	assert.NoError(t, err)
	assert.True(t, again)
	_, err = sys.Wait(context.Background(), "/pkg.Svc/Get", 4, 0)
	assert.NoError(t, err)
}

// errLimited is a status that invites a retry after its delay, as a port's
// delayOf reads it.
type errLimited struct{ delay time.Duration }

func (e errLimited) Error() string { return "limited" }

func delayOf(err error) (time.Duration, bool) {
	var l errLimited
	if errors.As(err, &l) {
		return l.delay, true
	}
	return 0, false
}

// stopped is a port's error of a call whose context ended.
func stopped(err error) error { return fmt.Errorf("stopped: %w", err) }

// TestRetryPolicyRetry: a retry is for an error that invites one, within
// the policy; the call otherwise ends with its error, or the port's error
// of an ended context.
func TestRetryPolicyRetry(t *testing.T) {
	clock := &recordClock{}
	p, err := adapter.NewRetryPolicy("ratekitx", adapter.WithMaxRetries(1), adapter.WithRetryClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	limited := errLimited{2 * time.Second}
	for _, c := range []struct {
		name    string
		attempt int
		err     error
		again   bool
	}{
		{"success", 1, nil, false},
		{"an error without a delay", 1, errors.New("final"), false},
		{"limited", 1, limited, true},
		{"limited, retries spent", 2, limited, false},
	} {
		again, got := p.Retry(ctx, "/pkg.Svc/Get", c.attempt, c.err, delayOf, stopped)
		assert.Equal(t, c.again, again, c.name)
		if c.again {
			assert.NoError(t, got, c.name)
		} else {
			assert.Equal(t, c.err, got, c.name+": the call's own error")
		}
	}
	assert.Equal(t, []time.Duration{2 * time.Second}, clock.waits)

	clock.err = context.Canceled
	again, err := p.Retry(ctx, "/pkg.Svc/Get", 1, limited, delayOf, stopped)
	assert.False(t, again)
	assert.EqualError(t, err, "stopped: context canceled")
}

// stream is a framework's stream of a Replay.
type stream struct{ n int }

// TestReplay: a call of one request, its sending side closed, is replayed
// when its first reply fails; not once a reply arrived, nor with another
// count of requests, nor before the sending side is closed.
func TestReplay(t *testing.T) {
	fail := errors.New("limited")
	var r adapter.Replay[*stream]
	first := &stream{1}
	r.Replace(first)
	_, ok := r.Received(fail)
	assert.False(t, ok, "nothing sent")
	assert.Same(t, first, r.Send("req"))
	_, ok = r.Received(fail)
	assert.False(t, ok, "the sending side is open")
	assert.Same(t, first, r.CloseSend())
	req, ok := r.Received(fail)
	assert.True(t, ok)
	assert.Equal(t, "req", req)
	assert.Equal(t, 1, r.Attempt())
	assert.Equal(t, 2, r.Attempt(), "the retries so far")

	second := &stream{2}
	r.Replace(second)
	assert.Same(t, second, r.Current())
	_, ok = r.Received(nil)
	assert.False(t, ok)
	_, ok = r.Received(fail)
	assert.False(t, ok, "a reply arrived: the call is under way")

	var two adapter.Replay[*stream]
	two.Replace(first)
	two.Send("a")
	two.Send("b")
	two.CloseSend()
	_, ok = two.Received(fail)
	assert.False(t, ok, "two requests: not a server-streaming call's")
}
