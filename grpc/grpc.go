// Package ratekitgrpc is the grpc-go interceptors of ratekit: gRPC's port
// to the request flow of package adapter, so that a call is decided as
// every ratekit middleware decides a request, and answered in gRPC's words.
//
//	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)),
//		grpc.ChainStreamInterceptor(ratekitgrpc.StreamServerInterceptor(lim, ratekitgrpc.PeerIP)),
//	)
//
// [LimitByIP] is shorthand for that pair; [UnaryRules] and [StreamRules]
// decide by a rules.Engine, [UnaryConcurrency] and [StreamConcurrency] bound
// the calls in flight. A stream is decided once, when it opens;
// [StreamMessageInterceptor] also limits each message it receives.
//
// A call is what an HTTP adapter calls a request: its full method
// ("/pkg.Service/Method") is its path and route, its incoming metadata its
// header fields, its peer its remote address. An admitted call gets the
// rate-limit fields as header metadata in lower case
// ("x-ratelimit-remaining") and is passed on. Otherwise it ends with a
// status whose message is fixed, never the client's key or an error's text:
// codes.ResourceExhausted for a rejection, with the same header metadata, a
// google.rpc.RetryInfo of the decision's exact RetryAfter and a
// google.rpc.QuotaFailure naming the limit (see [Rejection]);
// codes.Unavailable when the store fails under a fail-closed limiter (under
// the default, fail-open, the call passes);
// codes.InvalidArgument for a call without a key; codes.Internal for a
// failing key function or a cost out of range.
//
// Keys are of type [Key]: [PeerIP], [IP], [Metadata], [ClientCert],
// [ContextValue], [FullMethod], combined by [Join] and [First].
// [WithMethods] limits a service or a few methods. On the client side,
// [Retry] waits the delay of a RetryInfo and tries again.
package ratekitgrpc

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// UnaryServerInterceptor returns the interceptor that limits unary calls
// with lim, keyed by key (see adapter.Middleware.Limit): for each call not
// skipped, it computes the key and cost, takes lim's decision, sets the
// header metadata, and calls the handler or answers the call (see the
// package doc). An admitted call is held for the delay of a shaping leaky
// bucket first; if its context ends meanwhile, the call ends with the
// context's status. When the store fails and lim fails open (the
// default), calls pass.
//
// gRPC merges header metadata: under several interceptors that decide a
// call, each field has one value per interceptor, in the order they ran
// (an HTTP adapter's inner middleware overwrites the outer's fields).
//
// UnaryServerInterceptor panics if lim or key is nil.
func UnaryServerInterceptor(lim *core.Limiter, key Key, opts ...Option) grpc.UnaryServerInterceptor {
	if lim == nil || key == nil {
		panic("ratekitgrpc: UnaryServerInterceptor needs a limiter and a key function")
	}
	return unary(newMiddleware(opts).Limit(lim, key.of))
}

// StreamServerInterceptor returns the interceptor that limits the opening
// of streams with lim, keyed by key, as UnaryServerInterceptor limits
// unary calls: a stream is decided once, before its handler runs, and a
// rejected stream ends with the status of a rejected call. To limit each
// message too, chain StreamMessageInterceptor after it.
//
// StreamServerInterceptor panics if lim or key is nil.
func StreamServerInterceptor(lim *core.Limiter, key Key, opts ...Option) grpc.StreamServerInterceptor {
	if lim == nil || key == nil {
		panic("ratekitgrpc: StreamServerInterceptor needs a limiter and a key function")
	}
	return stream(newMiddleware(opts).Limit(lim, key.of))
}

// StreamMessageInterceptor returns the interceptor that limits each message
// a stream's handler receives with lim, keyed by key, at the cost that
// cost returns for the message (1 for every message when cost is nil; a
// cost of 0 counts nothing; a negative cost, or one over the limit's
// capacity, is answered codes.Internal). The handler's RecvMsg receives
// the message, then decides it: it returns nil for an admitted message,
// and otherwise the status of a rejected call (codes.ResourceExhausted
// with RetryInfo and QuotaFailure, or the denied handler's), with the
// message read into its argument but not admitted. The handler returns
// that status to end the stream, as a handler returns RecvMsg's errors;
// or it drops the message and calls RecvMsg again, which reads the next
// one. A message's decision sets no header metadata, which has usually
// been sent, and is never kept for DecisionFrom. Of the options, WithCost
// plays no part; the others apply to each message.
//
// StreamMessageInterceptor panics if lim or key is nil.
func StreamMessageInterceptor(lim *core.Limiter, key Key, cost func(msg any) int, opts ...Option) grpc.StreamServerInterceptor {
	if lim == nil || key == nil {
		panic("ratekitgrpc: StreamMessageInterceptor needs a limiter and a key function")
	}
	each := adapter.WithCost(func(c *call) int {
		if cost == nil {
			return 1
		}
		return cost(c.msg)
	})
	flow := newMiddleware(append(opts[:len(opts):len(opts)], each)).Limit(lim, key.of)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &messageStream{ServerStream: ss, method: info.FullMethod, flow: flow})
	}
}

// messageStream is a stream whose received messages are limited.
type messageStream struct {
	grpc.ServerStream
	method string
	flow   func(*call) error
}

// RecvMsg receives the next message into m and decides it.
func (s *messageStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	_, err := decide(s.flow, call{ctx: s.Context(), method: s.method, message: true, msg: m})
	return err
}

// LimitByIP returns the server options that let each client IP make count
// calls, unary or streams, per period, the common case in one line:
//
//	srv := grpc.NewServer(ratekitgrpc.LimitByIP(100, time.Minute)...)
//
// LimitByIP is shorthand for grpc.ChainUnaryInterceptor and
// grpc.ChainStreamInterceptor of UnaryServerInterceptor(lim, PeerIP,
// opts...) and StreamServerInterceptor(lim, PeerIP, opts...), where lim is
// core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count,
// Period: period}})): one limit of the TCP peer, in a memory store of its
// own. It panics, as core.Must does, if count or period is out of range:
// with limits from configuration, use the long form.
func LimitByIP(count int, period time.Duration, opts ...Option) []grpc.ServerOption {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}}))
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(lim, PeerIP, opts...)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(lim, PeerIP, opts...)),
	}
}

// UnaryRules returns the interceptor that limits unary calls by the rules
// in force in e (see package rules and adapter.Middleware.Rules), which
// may be reloaded while it runs: every rule that matches a call applies,
// with its own key, and a call that no rule matches passes without header
// metadata. The rules see a call as a POST whose path and route are its
// full method ("/pkg.Service/Method"), whose header fields are its incoming
// metadata, and whose remote address is its peer's; descriptor key user
// reads the call's context. UnaryRules panics if e is nil.
func UnaryRules(e *rules.Engine, opts ...Option) grpc.UnaryServerInterceptor {
	if e == nil {
		panic("ratekitgrpc: UnaryRules needs an engine")
	}
	return unary(newMiddleware(opts).Rules(e))
}

// StreamRules returns the interceptor that limits the opening of streams by
// the rules in force in e, as UnaryRules limits unary calls. StreamRules
// panics if e is nil.
func StreamRules(e *rules.Engine, opts ...Option) grpc.StreamServerInterceptor {
	if e == nil {
		panic("ratekitgrpc: StreamRules needs an engine")
	}
	return stream(newMiddleware(opts).Rules(e))
}

// UnaryConcurrency returns the interceptor that lets at most lim.Max()
// unary calls of each key run at once (see package concurrency and
// adapter.Middleware.Concurrency): a call that finds its key full is a
// rejection (codes.ResourceExhausted, with RetryInfo and retry-after, no
// rate-limit fields), codes.Unavailable when the store failed under
// concurrency.WithFailClosed. An admitted call holds its slot until its
// handler returns. Of the options, WithCost and WithHeaders play no part.
// Put the rate limit first, so that a call over its rate never takes a
// slot. UnaryConcurrency panics if lim or key is nil.
func UnaryConcurrency(lim *concurrency.Limiter, key Key, opts ...Option) grpc.UnaryServerInterceptor {
	if lim == nil || key == nil {
		panic("ratekitgrpc: UnaryConcurrency needs a limiter and a key function")
	}
	return unary(newMiddleware(opts).Concurrency(lim, key.of))
}

// StreamConcurrency returns the interceptor that lets at most lim.Max()
// streams of each key be open at once, as UnaryConcurrency does for unary
// calls: a stream holds its slot until its handler returns.
// StreamConcurrency panics if lim or key is nil.
func StreamConcurrency(lim *concurrency.Limiter, key Key, opts ...Option) grpc.StreamServerInterceptor {
	if lim == nil || key == nil {
		panic("ratekitgrpc: StreamConcurrency needs a limiter and a key function")
	}
	return stream(newMiddleware(opts).Concurrency(lim, key.of))
}

// newMiddleware returns the kit's middleware of opts, after the default
// denied handler, which answers a rejection with its status. A nil option
// is left out.
func newMiddleware(opts []Option) *adapter.Middleware[*call] {
	return adapter.NewRPC(port{}, defaultDenied, opts...)
}

func unary(flow func(*call) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return decide(flow, call{ctx: ctx, method: info.FullMethod, req: req, unary: handler})
	}
}

func stream(flow func(*call) error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		_, err := decide(flow, call{ctx: ss.Context(), method: info.FullMethod, srv: srv, ss: ss, streamer: handler})
		return err
	}
}

// calls holds the calls not in use: the kit's flow takes a *call, which
// would otherwise be allocated for each call and each limited message.
var calls = sync.Pool{New: func() any { return new(call) }}

// decide runs flow over c, in a call from the pool, and returns the unary
// handler's response and flow's error. Nothing keeps a call after flow
// returns (adapter.Port), so it goes back to the pool, cleared; a call
// whose handler panicked is left to the collector.
func decide(flow func(*call) error, c call) (any, error) {
	p := calls.Get().(*call)
	*p = c
	err := flow(p)
	resp := p.resp
	*p = call{}
	calls.Put(p)
	return resp, err
}

// An Option configures the interceptors returned by
// UnaryServerInterceptor, StreamServerInterceptor,
// StreamMessageInterceptor, UnaryRules, StreamRules, UnaryConcurrency,
// StreamConcurrency or LimitByIP; each sets the adapter.Config field of
// its name. An option given a nil function leaves the default in place,
// and a nil Option is ignored.
type Option = adapter.Option[*call]

// WithSkipper exempts the calls for which skip returns true, such as
// health checks: they are passed on without being counted and get no
// header metadata (adapter.Config.Skip). It replaces WithMethods.
func WithSkipper(skip func(ctx context.Context, fullMethod string) bool) Option {
	if skip == nil {
		return adapter.WithSkipper[*call](nil)
	}
	return adapter.WithSkipper(func(c *call) bool { return skip(c.ctx, c.method) })
}

// WithMethods limits only the calls of the named methods, and passes the
// others on as WithSkipper's skipped calls: "/pkg.Service/Method" (or
// "pkg.Service/Method") names a method, "/pkg.Service/" (or "pkg.Service")
// every method of a service; an empty name names none (see
// adapter.MethodMatcher). It is shorthand
// for WithSkipper of a function that skips the calls of every other
// method, and replaces WithSkipper:
//
//	orders := core.Must(core.NewLimiter(core.Limit{Name: "orders", Rate: core.PerMinute(10)}))
//	grpc.ChainUnaryInterceptor(
//		ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP),
//		ratekitgrpc.UnaryServerInterceptor(orders, ratekitgrpc.PeerIP, ratekitgrpc.WithMethods("/shop.Orders/Create")),
//	)
func WithMethods(methods ...string) Option {
	match := adapter.MethodMatcher(methods...)
	return adapter.WithSkipper(func(c *call) bool { return !match(c.method) })
}

// WithCost sets the cost of a call (default 1): see adapter.Config.Cost.
func WithCost(cost func(ctx context.Context, fullMethod string) int) Option {
	if cost == nil {
		return adapter.WithCost[*call](nil)
	}
	return adapter.WithCost(func(c *call) int { return cost(c.ctx, c.method) })
}

// WithDeniedHandler sets the function that answers a rejected call, whose
// header metadata is already set, instead of Rejection: the call ends with
// the error it returns, which should be a status (see
// adapter.Config.Denied); a nil error, which would end the call as if its
// handler had succeeded, is taken as Rejection(d). A store failing closed
// is such a rejection, with a decision of Quota 0.
func WithDeniedHandler(denied func(ctx context.Context, fullMethod string, d core.Decision) error) Option {
	if denied == nil {
		return defaultDenied
	}
	return adapter.WithDeniedHandler(func(c *call, d core.Decision) error {
		c.sendHeader()
		if err := denied(c.ctx, c.method, d); err != nil {
			return err
		}
		return Rejection(d)
	})
}

// WithErrorHandler sets the function that answers a call whose key
// function failed, whose key is empty, or whose cost is out of range,
// instead of codes.InvalidArgument or codes.Internal: the call ends with
// the error it returns, or with the default status if that is nil (the
// call is never passed on). err is for logs, never for the client (see
// adapter.Config.OnError).
func WithErrorHandler(onError func(ctx context.Context, fullMethod string, err error) error) Option {
	if onError == nil {
		return adapter.WithErrorHandler[*call](nil)
	}
	return adapter.WithErrorHandler(func(c *call, err error) error {
		if serr := onError(c.ctx, c.method, err); serr != nil {
			return serr
		}
		return statusError(adapter.RPCErrorStatus(err))
	})
}

// WithHeaders selects the rate-limit fields sent as header metadata
// (default answer.XRateLimit; answer.IETF, answer.Both, answer.NoHeaders).
func WithHeaders(s answer.Style) Option { return adapter.WithHeaders[*call](s) }

// WithLogger sets the logger of key-function, plan and cost failures,
// once per episode (default slog.Default()); store failures are the
// limiter's (core.WithLogger).
func WithLogger(log *slog.Logger) Option { return adapter.WithLogger[*call](log) }

// WithDecisionInContext puts the decision of every call decided and
// passed on into the context its handler gets, where DecisionFrom reads
// it. It costs an allocation per call, so it is off by default.
func WithDecisionInContext() Option { return adapter.WithDecisionInContext[*call]() }

// DecisionFrom returns the decision that the interceptor took for the
// call whose context is ctx, when it runs WithDecisionInContext and passed
// the call on (under the rules, a call that no rule matches has none).
// Under several such interceptors, it is the decision of the one that ran
// last.
func DecisionFrom(ctx context.Context) (core.Decision, bool) {
	return adapter.DecisionFromContext(ctx)
}

// Rejection returns the status error of a rejected call with decision d,
// which the interceptors answer with unless WithDeniedHandler is given:
// codes.ResourceExhausted, with a google.rpc.RetryInfo of d.RetryAfter and
// a google.rpc.QuotaFailure whose violation's subject is d.Name; or, for a
// decision taken without the store, which failed under a fail-closed
// limiter, codes.Unavailable with the RetryInfo alone. The messages are
// fixed.
func Rejection(d core.Decision) error {
	code, message, quota := adapter.RPCRejection(d)
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}
	if !quota {
		return withDetails(statusError(code, message), retry)
	}
	return withDetails(statusError(code, message), retry, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     d.Name,
		Description: adapter.QuotaViolation,
	}}})
}

// withDetails returns the status err with details, or err without them if
// they cannot be added (they always can: a status of an error code, and
// messages that marshal).
func withDetails(err error, details ...protoadapt.MessageV1) error {
	st, derr := status.Convert(err).WithDetails(details...)
	if derr != nil {
		return err
	}
	return st.Err()
}

// defaultDenied answers a rejection with Rejection.
var defaultDenied = adapter.WithDeniedHandler(func(c *call, d core.Decision) error {
	c.sendHeader()
	return Rejection(d)
})

// A call is one call through an interceptor: the port's request type. Of
// unary, streamer and message, one says what Next does.
type call struct {
	ctx    context.Context
	method string
	header metadata.MD // the header metadata to send, nil for none
	kept   bool        // ctx carries the decision: a stream's handler gets it

	req   any
	unary grpc.UnaryHandler
	resp  any

	srv      any
	ss       grpc.ServerStream
	streamer grpc.StreamHandler

	message bool // a message of StreamMessageInterceptor: Next returns it
	msg     any
}

// sendHeader sets the call's header metadata on the response, to be sent
// with the first message or the status.
func (c *call) sendHeader() {
	if len(c.header) == 0 || c.message {
		return
	}
	if c.ss != nil {
		_ = c.ss.SetHeader(c.header)
	} else {
		_ = grpc.SetHeader(c.ctx, c.header)
	}
}

// port is gRPC's adapter.Port.
type port struct{}

func (port) Context(c *call) context.Context { return c.ctx }
func (port) Request(c *call) rules.Request   { return request{c} }

func (port) Header(c *call, name string, v []string) {
	if c.message || name == "Content-Type" || name == "Cache-Control" {
		return // a problem body's fields: no body here
	}
	name = lower(name)
	if v == nil {
		delete(c.header, name)
		return
	}
	if c.header == nil {
		c.header = make(metadata.MD, 8)
	}
	c.header[name] = v
}

// lower returns the metadata key of header field name: in lower case, from
// a table for ratekit's fields.
func lower(name string) string {
	switch name {
	case answer.HeaderLimit:
		return "x-ratelimit-limit"
	case answer.HeaderRemaining:
		return "x-ratelimit-remaining"
	case answer.HeaderReset:
		return "x-ratelimit-reset"
	case answer.HeaderRetryAfter:
		return "retry-after"
	case answer.HeaderXRetryAfter:
		return "x-ratelimit-retry-after"
	case answer.HeaderRateLimit:
		return "ratelimit"
	case answer.HeaderRateLimitPolicy:
		return "ratelimit-policy"
	}
	return strings.ToLower(name)
}

func (port) Next(c *call) error {
	if c.message {
		return nil
	}
	c.sendHeader()
	if c.unary != nil {
		var err error
		c.resp, err = c.unary(c.ctx, c.req)
		return err
	}
	ss := c.ss
	if c.kept {
		ss = &contextStream{ss, c.ctx}
	}
	return c.streamer(c.srv, ss)
}

// contextStream is a stream whose context carries the decision.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

func (port) Keep(c *call, d core.Decision) *call {
	if !c.message {
		c.ctx, c.kept = adapter.ContextWithDecision(c.ctx, d), true
	}
	return c
}

// Stop returns the status of a context that ended during a shaping hold.
func (port) Stop(_ *call, err error) error {
	if err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// Write answers a call that the kit does not pass on with the status of
// the HTTP status it gives; the body is the problem body, which gRPC has
// no place for. Rejections go to the denied handler, so that only the
// kit's own errors come here, unless a rejection has no handler.
func (port) Write(c *call, code int, _ []byte) error {
	c.sendHeader()
	return statusError(adapter.RPCStatus(code))
}

// The statuses of the answers, one for each code of adapter.RPCStatus,
// whose message is fixed: made once.
var (
	errNoKey       = newStatus(adapter.RPCStatus(http.StatusBadRequest))
	errKeyFailed   = newStatus(adapter.RPCStatus(http.StatusInternalServerError))
	errExhausted   = newStatus(adapter.RPCStatus(http.StatusTooManyRequests))
	errUnavailable = newStatus(adapter.RPCStatus(http.StatusServiceUnavailable))
)

func newStatus(code uint32, message string) error { return status.Error(codes.Code(code), message) }

// statusError returns the status of code, one of the kit's answers, with
// its fixed message.
func statusError(code uint32, _ string) error {
	switch code {
	case adapter.RPCInvalidArgument:
		return errNoKey
	case adapter.RPCResourceExhausted:
		return errExhausted
	case adapter.RPCUnavailable:
		return errUnavailable
	}
	return errKeyFailed
}

// Offer is never called: no option of this package sets a queue.
func (port) Offer(*call, *queue.Offer, core.Decision) queue.Reply { return queue.Reply{} }

// request is the rules.Request of a call, pointer-shaped so that it
// converts to rules.Request without allocating.
type request struct{ c *call }

func (r request) Context() context.Context    { return r.c.ctx }
func (r request) Method() string              { return http.MethodPost }
func (r request) Path() string                { return r.c.method }
func (r request) EscapedPath() string         { return "" }
func (r request) Route() string               { return r.c.method }
func (r request) Values(name string) []string { return incoming(r.c.ctx).Values(name) }
func (r request) Query(string) string         { return "" }
func (r request) Value(key any) any           { return r.c.ctx.Value(key) }

func (r request) RemoteAddr() string {
	if a := peerAddr(r.c.ctx); a != nil {
		return a.String()
	}
	return ""
}
