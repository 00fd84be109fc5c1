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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
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
	_, err = adapter.FirstKeys[string](nil)(ctx, "")
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
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
	p := adapter.NewRetryPolicy("ratekitx")
	assert.Equal(t, 3, p.MaxRetries)
	assert.Equal(t, time.Minute, p.MaxWait)
	assert.EqualError(t, p.SetMaxRetries(-1), "ratekitx: max retries -1 is negative")
	assert.EqualError(t, p.SetMaxWait(-time.Second), "ratekitx: max wait -1s is negative")
	require.NoError(t, p.SetMaxRetries(2))
	require.NoError(t, p.SetMaxWait(30*time.Second))

	clock := &recordClock{}
	var seen []client.Wait
	var logs bytes.Buffer
	p.Clock = clock
	p.Observe = func(w client.Wait) { seen = append(seen, w) }
	p.Logger = slog.New(slog.NewTextHandler(&logs, nil))

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
	sys := adapter.NewRetryPolicy("ratekitx")
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
