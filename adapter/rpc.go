package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keyval"
	"github.com/ratekit/ratekit/keyfuncs"
)

// The names of this file are for ports to RPC frameworks (grpc-go,
// Connect), whose calls end with a status code and a fixed message
// rather than an HTTP status and a problem body: what such ports share
// beyond the flows, so that every RPC port answers a call alike.

// The status codes of an RPC port's answers: gRPC's codes, which Connect's
// share (codes.Code(c) and connect.Code(c) convert them).
const (
	RPCInvalidArgument   uint32 = 3  // a call without a key
	RPCResourceExhausted uint32 = 8  // a rejection
	RPCInternal          uint32 = 13 // a failing key function, a cost out of range
	RPCUnavailable       uint32 = 14 // a store failing under a fail-closed limiter
)

// The fixed messages of an RPC port's answers: never the client's key,
// nor an error's text.
const (
	MessageNoKey       = "ratekit: the call has no value to be rate limited by"
	MessageKeyFailed   = "ratekit: rate limit unavailable for this call"
	MessageExhausted   = "ratekit: rate limit exceeded"
	MessageUnavailable = "ratekit: rate limiter unavailable"

	// QuotaViolation is the description of the violation in the
	// google.rpc.QuotaFailure of a rejection, whose subject is the
	// limit's name.
	QuotaViolation = "rate limit exceeded"
)

// RPCStatus returns the code and message of a call that the kit answers
// with the HTTP status httpStatus (Port.Write's): InvalidArgument for 400,
// ResourceExhausted for 429, Unavailable for 503, Internal otherwise.
func RPCStatus(httpStatus int) (code uint32, message string) {
	switch httpStatus {
	case http.StatusBadRequest:
		return RPCInvalidArgument, MessageNoKey
	case http.StatusTooManyRequests:
		return RPCResourceExhausted, MessageExhausted
	case http.StatusServiceUnavailable:
		return RPCUnavailable, MessageUnavailable
	}
	return RPCInternal, MessageKeyFailed
}

// RPCErrorStatus returns the code and message of a call whose key or cost
// failed with err (Config.OnError's): InvalidArgument when err wraps
// core.ErrMissingKey (keyfuncs.ErrMissing), Internal otherwise.
func RPCErrorStatus(err error) (code uint32, message string) {
	if errors.Is(err, core.ErrMissingKey) {
		return RPCStatus(http.StatusBadRequest)
	}
	return RPCStatus(http.StatusInternalServerError)
}

// RPCRejection returns the code and message of a call rejected with
// decision d (Config.Denied's), and whether its status names the limit in
// a google.rpc.QuotaFailure: ResourceExhausted with a QuotaFailure, or
// Unavailable without one when the store failed under a fail-closed
// limiter (StoreFailed). Both carry a google.rpc.RetryInfo of
// d.RetryAfter.
func RPCRejection(d core.Decision) (code uint32, message string, quota bool) {
	if StoreFailed(d) {
		code, message = RPCStatus(http.StatusServiceUnavailable)
		return code, message, false
	}
	code, message = RPCStatus(http.StatusTooManyRequests)
	return code, message, true
}

// StoreFailed reports whether the rejection d was the store's failure
// under a fail-closed limiter, which the kit answers 503: such a decision
// has neither a quota nor a reset time. Every rejection by a limit has a
// reset time (a limit of zero requests, whose quota is 0, too), and every
// concurrency refusal has a quota.
func StoreFailed(d core.Decision) bool { return d.Quota == 0 && d.ResetAfter == 0 }

// RPCRetryable reports whether a status of code invites a client to retry
// after the delay of its google.rpc.RetryInfo: ResourceExhausted and
// Unavailable, the codes of a rejection.
func RPCRetryable(code uint32) bool {
	return code == RPCResourceExhausted || code == RPCUnavailable
}

// NewRPC returns the middleware of an RPC port: New of port with denied
// first, the port's default denied handler, which answers a rejection with
// the port's status (Rejection) where an HTTP port's default writes a
// problem body, then opts, which may replace it. A nil option is left out,
// as the ports document.
func NewRPC[C any](port Port[C], denied Option[C], opts ...Option[C]) *Middleware[C] {
	all := make([]Option[C], 1, 1+len(opts))
	all[0] = denied
	for _, o := range opts {
		if o != nil {
			all = append(all, o)
		}
	}
	return New(port, all...)
}

// MethodMatcher returns the function that reports whether a full method
// ("/pkg.Service/Method") is one of methods, the names of an RPC port's
// WithMethods: "/pkg.Service/Method" (or "pkg.Service/Method") names a
// method, "/pkg.Service/" (or "pkg.Service", or "/pkg.Service") every
// method of a service. Surrounding white space is removed; an empty name
// names none, so that no name at all matches nothing.
func MethodMatcher(methods ...string) func(fullMethod string) bool {
	exact := make(map[string]bool, len(methods))
	var services []string
	for _, m := range methods {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		m = "/" + strings.TrimPrefix(m, "/")
		slash := strings.IndexByte(m[1:], '/') + 1 // 0: none after the leading one
		switch {
		case slash == 0:
			services = append(services, m+"/")
		case slash == len(m)-1:
			services = append(services, m)
		default:
			exact[m] = true
		}
	}
	return func(fullMethod string) bool {
		if exact[fullMethod] {
			return true
		}
		for _, s := range services {
			if strings.HasPrefix(fullMethod, s) {
				return true
			}
		}
		return false
	}
}

// A KeyOf is the key function of an RPC port, of a call's context and of
// what else the port knows of the call (A: the full method for grpc-go, a
// description of the call for Connect). A port's own key type, such as
// ratekitgrpc.Key, is of this type.
type KeyOf[A any] = func(ctx context.Context, call A) (string, error)

// JoinKeys returns the key function, of the type of keys (a port's key
// type), that combines the keys of keys by the rules of keyfuncs.Join,
// which it runs: each part preceded by its length, so that no two lists
// of parts give the same key, and any error returned as is. A nil key
// gives a function that fails with keyfuncs.ErrMisconfigured. A call
// allocates the key it returns, and what keys allocate: no request, as
// keyfuncs' functions take, of its own.
func JoinKeys[A any, K ~KeyOf[A]](keys ...K) K {
	return overRequest[A, K](keyfuncs.Join(requestKeys(keys)...))
}

// FirstKeys returns the key function, of the type of keys (a port's key
// type), whose key comes from the first of keys that finds one, by the
// rules of keyfuncs.First, which it runs: a key error wrapping
// keyfuncs.ErrMissing passes on to the next, and the key is prefixed with
// the index of the one that found it ("0:alice", "1:192.0.2.1"). A nil
// key gives a function that fails with keyfuncs.ErrMisconfigured. A call
// allocates as JoinKeys' does.
func FirstKeys[A any, K ~KeyOf[A]](keys ...K) K {
	return overRequest[A, K](keyfuncs.First(requestKeys(keys)...))
}

// A keyCarrier carries a call to the functions of requestKeys, as the
// context of the http.Request that keyfuncs' functions take: the request
// r, made once, whose context is the carrier itself, so that a call needs
// no request of its own. Only requestKeys' functions see r: never the
// application's code, which gets the call's own context.
type keyCarrier[A any] struct {
	context.Context
	call A
	r    *http.Request
}

// requestKeys returns keys as keyfuncs' functions of a request whose
// context is a keyCarrier; a nil key stays nil, for keyfuncs to report.
func requestKeys[A any, K ~KeyOf[A]](keys []K) []keyfuncs.Func {
	fs := make([]keyfuncs.Func, len(keys))
	for i, k := range keys {
		if k != nil {
			fs[i] = func(r *http.Request) (string, error) {
				c := r.Context().(*keyCarrier[A])
				return k(c.Context, c.call)
			}
		}
	}
	return fs
}

// blankRequest is the request that the carriers' requests copy.
var blankRequest http.Request

// overRequest returns the key function of f, a function of requestKeys',
// which runs f over a carrier from a pool of its own: a call of a key
// function holds one carrier, cleared and given back when f returns (a
// carrier whose key function panicked is left to the collector).
func overRequest[A any, K ~KeyOf[A]](f keyfuncs.Func) K {
	carriers := sync.Pool{New: func() any {
		c := new(keyCarrier[A])
		c.r = blankRequest.WithContext(c)
		return c
	}}
	return func(ctx context.Context, call A) (string, error) {
		c := carriers.Get().(*keyCarrier[A])
		c.Context, c.call = ctx, call
		k, err := f(c.r)
		var zero A
		c.Context, c.call = nil, zero
		carriers.Put(c)
		return k, err
	}
}

// ContextValueKey returns the function that reads the key of a call from
// the value stored in its context under ctxKey, as keyfuncs.ContextValue
// reads a request's: an absent, nil or blank value is an error wrapping
// keyfuncs.ErrMissing, naming the value with the prefix pkg (the port's
// package name). A nil ctxKey, or one of a type that is not comparable
// (which context.WithValue refuses), gives a function that fails every
// call with keyfuncs.ErrMisconfigured.
func ContextValueKey(pkg string, ctxKey any) func(ctx context.Context) (string, error) {
	if ctxKey == nil || !reflect.TypeOf(ctxKey).Comparable() {
		err := keyval.Misconfigured("ContextValue: nil or incomparable context key")
		return func(context.Context) (string, error) { return "", err }
	}
	toKey := ValueKey(fmt.Sprintf("%s: context value %#v", pkg, ctxKey))
	return func(ctx context.Context) (string, error) { return toKey(ctx.Value(ctxKey)) }
}

// SourceRetryInfo is the Source of an RPC client's waits (client.Wait):
// the google.rpc.RetryInfo of the status that a call ended with.
const SourceRetryInfo = "retry-info"

// A RetryPolicy is the settings of an RPC port's retrying client, the
// counterpart of package client's Transport for calls that end with a
// status: how often and how long it waits the delay of a RetryInfo before
// it makes a call again. Create it with NewRetryPolicy.
type RetryPolicy struct {
	// Name is the port's package name, which prefixes its errors and log
	// lines ("ratekitgrpc").
	Name string

	// MaxRetries is how many times a call is retried; 0 never retries.
	MaxRetries int

	// MaxWait is the longest wait: a call whose server asks for longer
	// ends with its status at once.
	MaxWait time.Duration

	// Clock waits; nil waits on the system clock. Deadlines are always
	// compared with the system clock.
	Clock client.Clock

	// Observe, when set, is called before every wait, with the wait's Host
	// the call's full method and its Source SourceRetryInfo.
	Observe func(client.Wait)

	// Logger, when set, logs every wait at level Info.
	Logger *slog.Logger
}

// A RetryOption configures a RetryPolicy. An RPC port's retrying client
// takes these options under its own names (type RetryOption =
// adapter.RetryOption, WithMaxRetries, ...).
type RetryOption func(*RetryPolicy) error

// NewRetryPolicy returns the policy of the port named name, configured by
// opts, or the error of the first invalid option; a nil option is
// ignored. Without options it is the default: 3 retries, waits of at most
// a minute, on the system clock, neither observed nor logged.
func NewRetryPolicy(name string, opts ...RetryOption) (*RetryPolicy, error) {
	p := &RetryPolicy{Name: name, MaxRetries: 3, MaxWait: time.Minute}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// WithMaxRetries sets MaxRetries to n; a negative n is an error.
func WithMaxRetries(n int) RetryOption {
	return func(p *RetryPolicy) error {
		if n < 0 {
			return fmt.Errorf("%s: max retries %d is negative", p.Name, n)
		}
		p.MaxRetries = n
		return nil
	}
}

// WithMaxWait sets MaxWait to d; a negative d is an error.
func WithMaxWait(d time.Duration) RetryOption {
	return func(p *RetryPolicy) error {
		if d < 0 {
			return fmt.Errorf("%s: max wait %s is negative", p.Name, d)
		}
		p.MaxWait = d
		return nil
	}
}

// WithRetryClock sets Clock to clock; nil keeps it.
func WithRetryClock(clock client.Clock) RetryOption {
	return func(p *RetryPolicy) error {
		if clock != nil {
			p.Clock = clock
		}
		return nil
	}
}

// WithRetryObserver sets Observe to observe.
func WithRetryObserver(observe func(client.Wait)) RetryOption {
	return func(p *RetryPolicy) error { p.Observe = observe; return nil }
}

// WithRetryLogger sets Logger to log.
func WithRetryLogger(log *slog.Logger) RetryOption {
	return func(p *RetryPolicy) error { p.Logger = log; return nil }
}

// Retry decides whether the call of method is made again after its
// attempt-th attempt (1 for the first, counting the retries so far) ended
// with err: delayOf returns the delay of err's RetryInfo and whether err
// invites a retry at all (RPCRetryable, a valid delay of at least 0), and
// Wait decides the rest. It returns true and nil to make the call again;
// otherwise false and the error the call ends with: err, or stopped(e) for
// the error e of a context that ended while it waited (the port's status
// of a canceled call).
func (p *RetryPolicy) Retry(ctx context.Context, method string, attempt int, err error,
	delayOf func(error) (time.Duration, bool), stopped func(error) error) (bool, error) {
	delay, ok := delayOf(err)
	if !ok {
		return false, err
	}
	again, werr := p.Wait(ctx, method, attempt, delay)
	if werr != nil {
		return false, stopped(werr)
	}
	if !again {
		return false, err
	}
	return true, nil
}

// Wait decides whether the call of method is made again after its
// attempt-th attempt (1 for the first) ended with a status whose RetryInfo
// asks for delay, which the caller has found usable (a retryable code, a
// valid delay of at least 0). It returns false and nil, so that the call
// ends with that status, when the retries are spent, when delay is longer
// than MaxWait, or when the wait would reach the deadline of ctx.
// Otherwise it observes and logs the wait, waits, and returns true and
// nil; or false and ctx's error if ctx ended while it waited.
func (p *RetryPolicy) Wait(ctx context.Context, method string, attempt int, delay time.Duration) (bool, error) {
	if attempt > p.MaxRetries || delay > p.MaxWait || beyondDeadline(ctx, delay) {
		return false, nil
	}
	if p.Observe != nil {
		p.Observe(client.Wait{Host: method, Duration: delay, Attempt: attempt, Source: SourceRetryInfo})
	}
	if p.Logger != nil {
		p.Logger.LogAttrs(ctx, slog.LevelInfo, p.Name+": rate limited, waiting",
			slog.String("method", method), slog.Duration("wait", delay),
			slog.Int("attempt", attempt), slog.String("source", SourceRetryInfo))
	}
	var err error
	if p.Clock != nil {
		err = p.Clock.Sleep(ctx, delay)
	} else {
		err = hold(ctx, delay)
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// beyondDeadline reports whether a wait of d would reach the deadline of
// ctx, on the system clock.
func beyondDeadline(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) <= d
}

// A Replay is what a retrying client keeps of a server-streaming call (one
// request message, then the replies) so that it can open the call again
// and send its request again when its first reply fails with a status
// that invites a retry: the current stream S, of the framework, the
// request, and whether the call may still be replayed. As a stream may be
// sent to and received from by two goroutines at once, a Replay is safe
// for concurrent use; the streams themselves are called outside it. The
// zero Replay has no stream: set one with Replace.
type Replay[S any] struct {
	mu       sync.Mutex
	current  S
	req      any
	sent     int  // the messages sent: only a call of one is replayed
	closed   bool // the sending side is closed
	received bool // a reply arrived: the call is under way
	attempts int  // the retries so far
}

// Current returns the current stream.
func (r *Replay[S]) Current() S {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// Replace makes s the current stream: the call opened again.
func (r *Replay[S]) Replace(s S) {
	r.mu.Lock()
	r.current = s
	r.mu.Unlock()
}

// Send keeps msg, the request, and returns the stream to send it on.
func (r *Replay[S]) Send(msg any) S {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.req = msg
	r.sent++
	return r.current
}

// CloseSend notes that the sending side is closed, and returns the stream
// to close it on.
func (r *Replay[S]) CloseSend() S {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.current
}

// Received notes the outcome err of a receive on the current stream, and
// returns the request to send again and true when the call may be opened
// again: err is its first reply's failure, after exactly one request was
// sent and the sending side closed. Whether err invites a retry is the
// RetryPolicy's to decide.
func (r *Replay[S]) Received(err error) (req any, replay bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.received = true
		return nil, false
	}
	if r.received || !r.closed || r.sent != 1 {
		return nil, false
	}
	return r.req, true
}

// Attempt counts a retry of the call, of its opening or of its request,
// and returns the retries so far: the attempt number of RetryPolicy.Retry.
func (r *Replay[S]) Attempt() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	return r.attempts
}
