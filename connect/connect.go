// Package ratekitconnect is the Connect interceptors of ratekit: Connect's
// port to the request flow of package adapter, so that a call is decided
// as every ratekit middleware decides a request, and answered in
// Connect's words, over the Connect, gRPC and gRPC-Web protocols alike.
//
//	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}))
//	path, handler := greetv1connect.NewGreetServiceHandler(svc,
//		connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP)))
//
// [LimitByIP] is shorthand for that option; [Rules] decides by a
// rules.Engine, [Concurrency] bounds the calls in flight. An interceptor
// limits unary calls and the streams of handlers, each decided once, when
// it opens; [StreamMessages] limits each message a stream's handler
// receives. On a client, the server interceptors pass every call through.
//
// A call is what an HTTP adapter calls a request: its procedure
// ("/pkg.Service/Method") is its path and route, its request header its
// header, its peer its remote address. An admitted call gets the
// rate-limit fields as response headers (X-Ratelimit-Remaining, sent as
// x-ratelimit-remaining over HTTP/2) and is passed on. Otherwise it ends
// with an error whose message is fixed, never the client's key or an
// error's text: connect.CodeResourceExhausted for a rejection, with the
// same headers, a google.rpc.RetryInfo of the decision's exact RetryAfter
// and a google.rpc.QuotaFailure naming the limit (see [Rejection]);
// connect.CodeUnavailable when the store fails under a fail-closed limiter
// (under the default, fail-open, the call passes);
// connect.CodeInvalidArgument for a call without a key;
// connect.CodeInternal for a failing key function or a cost out of range.
//
// Keys are of type [Key], which reads a [Call]: [PeerIP], [IP], [Header],
// [ContextValue] (and [User]), [Procedure], combined by [Join] and
// [First]. [WithMethods] limits a service or a few procedures. On the
// client side, [Retry] waits the delay of a RetryInfo and calls again.
package ratekitconnect

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// New returns the interceptor that limits calls with lim, keyed by key
// (see adapter.Middleware.Limit): for each unary call, and each stream
// when it opens, that is not skipped, it computes the key and cost, takes
// lim's decision, sets the response headers, and calls the handler or
// ends the call (see the package doc). An admitted call is held for the
// delay of a shaping leaky bucket first; if its context ends meanwhile,
// the call ends with connect.CodeCanceled or CodeDeadlineExceeded. When
// the store fails and lim fails open (the default), calls pass. Give it to
// a handler with connect.WithInterceptors.
//
// Connect's metadata is HTTP headers: under several interceptors that
// decide a call, the one that runs last (the inner) sets each field, as
// with ratekit's HTTP middleware (gRPC's interceptors merge them).
//
// New panics if lim or key is nil.
func New(lim *core.Limiter, key Key, opts ...Option) connect.Interceptor {
	if lim == nil || key == nil {
		panic("ratekitconnect: New needs a limiter and a key function")
	}
	return interceptor{newMiddleware(opts).Limit(lim, key.of)}
}

// LimitByIP returns the handler option that lets each client IP make
// count calls, unary or streams, per period, the common case in one line:
//
//	mux.Handle(greetv1connect.NewGreetServiceHandler(svc, ratekitconnect.LimitByIP(100, time.Minute)))
//
// LimitByIP is shorthand for connect.WithInterceptors(New(lim, PeerIP,
// opts...)), where lim is core.Must(core.NewLimiter(core.Limit{Rate:
// core.Rate{Count: count, Period: period}})): one limit of the TCP peer,
// in a memory store of its own, shared by every handler given the option.
// It panics, as core.Must does, if count or period is out of range: with
// limits from configuration, use the long form.
func LimitByIP(count int, period time.Duration, opts ...Option) connect.HandlerOption {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.Rate{Count: count, Period: period}}))
	return connect.WithInterceptors(New(lim, PeerIP, opts...))
}

// Rules returns the interceptor that limits calls by the rules in force in
// e (see package rules and adapter.Middleware.Rules), which may be
// reloaded while it runs: every rule that matches a call applies, with its
// own key, and a call that no rule matches passes without rate-limit
// headers. The rules see a call as a POST, whatever its HTTP method, whose
// path and route are its procedure ("/pkg.Service/Method"), whose header
// is its request header, and whose remote address is its peer's;
// descriptor key user reads the call's context. Rules panics if e is nil.
func Rules(e *rules.Engine, opts ...Option) connect.Interceptor {
	if e == nil {
		panic("ratekitconnect: Rules needs an engine")
	}
	return interceptor{newMiddleware(opts).Rules(e)}
}

// Concurrency returns the interceptor that lets at most lim.Max() calls
// of each key run at once, unary calls and streams alike (see package
// concurrency and adapter.Middleware.Concurrency): a call that finds its
// key full is a rejection (connect.CodeResourceExhausted, with RetryInfo
// and Retry-After, no rate-limit fields), connect.CodeUnavailable when the
// store failed under concurrency.WithFailClosed. An admitted call holds
// its slot until its handler returns. Of the options, WithCost and
// WithHeaders play no part. Put the rate limit first, so that a call over
// its rate never takes a slot. Concurrency panics if lim or key is nil.
func Concurrency(lim *concurrency.Limiter, key Key, opts ...Option) connect.Interceptor {
	if lim == nil || key == nil {
		panic("ratekitconnect: Concurrency needs a limiter and a key function")
	}
	return interceptor{newMiddleware(opts).Concurrency(lim, key.of)}
}

// StreamMessages returns the interceptor that limits each message a
// stream's handler receives with lim, keyed by key, at the cost that cost
// returns for the message (1 for every message when cost is nil; a cost
// of 0 counts nothing; a negative cost, or one over the limit's capacity,
// is answered connect.CodeInternal). The stream's Receive reads the
// message, then decides it: it returns nil for an admitted message, and
// otherwise the error of a rejected call (connect.CodeResourceExhausted
// with RetryInfo and QuotaFailure, or the denied handler's), with the
// message read into its argument but not admitted. The handler returns
// that error to end the stream, as a handler returns Receive's errors; or
// it drops the message and calls Receive again, which reads the next one
// (connect.ClientStream's Receive stops at its first error: call its
// Conn().Receive to go on).
// The request of a server-streaming call is such a message. A message's
// decision sets no response header, which has usually been sent, and is
// never kept for DecisionFrom. Unary calls pass. Of the options, WithCost
// plays no part; the others apply to each message.
//
// StreamMessages panics if lim or key is nil.
func StreamMessages(lim *core.Limiter, key Key, cost func(msg any) int, opts ...Option) connect.Interceptor {
	if lim == nil || key == nil {
		panic("ratekitconnect: StreamMessages needs a limiter and a key function")
	}
	each := adapter.WithCost(func(c *call) int {
		if cost == nil {
			return 1
		}
		return cost(c.msg)
	})
	return messages{newMiddleware(append(opts[:len(opts):len(opts)], each)).Limit(lim, key.of)}
}

// interceptor is the connect.Interceptor of a flow, which decides unary
// calls and the streams of handlers.
type interceptor struct{ flow func(*call) error }

// WrapUnary decides each unary call of a handler; a client's pass.
func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		c := call{ctx: ctx, info: Call{Spec: req.Spec(), Peer: req.Peer(), Header: req.Header()}, req: req, unary: next}
		return decide(i.flow, c)
	}
}

// WrapStreamingClient returns next: a client's streams pass.
func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler decides each stream of a handler when it opens.
func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c := call{ctx: ctx, info: Call{Spec: conn.Spec(), Peer: conn.Peer(), Header: conn.RequestHeader()}, conn: conn, stream: next}
		_, err := decide(i.flow, c)
		return err
	}
}

// messages is the connect.Interceptor of StreamMessages.
type messages struct{ flow func(*call) error }

// WrapUnary returns next: unary calls pass.
func (messages) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

// WrapStreamingClient returns next: a client's streams pass.
func (messages) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler gives the handler a stream whose received messages
// are decided.
func (m messages) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		info := Call{Spec: conn.Spec(), Peer: conn.Peer(), Header: conn.RequestHeader()}
		return next(ctx, &messageConn{StreamingHandlerConn: conn, ctx: ctx, info: info, flow: m.flow})
	}
}

// messageConn is a stream whose received messages are limited.
type messageConn struct {
	connect.StreamingHandlerConn
	ctx  context.Context
	info Call
	flow func(*call) error
}

// Receive receives the next message into msg and decides it.
func (s *messageConn) Receive(msg any) error {
	if err := s.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	_, err := decide(s.flow, call{ctx: s.ctx, info: s.info, message: true, msg: msg})
	return err
}

// newMiddleware returns the kit's middleware of opts, after the default
// denied handler, which answers a rejection with its error. A nil option
// is left out.
func newMiddleware(opts []Option) *adapter.Middleware[*call] {
	return adapter.NewRPC(port{}, defaultDenied, opts...)
}

// calls holds the calls not in use: the kit's flow takes a *call, which
// would otherwise be allocated for each call and each limited message.
var calls = sync.Pool{New: func() any { return new(call) }}

// decide runs flow over c, in a call from the pool, and returns the unary
// handler's response and flow's error. Nothing keeps a call after flow
// returns (adapter.Port), so it goes back to the pool, cleared; a call
// whose handler panicked is left to the collector.
func decide(flow func(*call) error, c call) (connect.AnyResponse, error) {
	p := calls.Get().(*call)
	*p = c
	err := flow(p)
	resp := p.resp
	if p.local != nil {
		err = p.flush(resp, err)
	}
	*p = call{}
	calls.Put(p)
	return resp, err
}

// An Option configures the interceptors returned by New, Rules,
// Concurrency, StreamMessages or LimitByIP; each sets the adapter.Config
// field of its name. An option given a nil function leaves the default in
// place, and a nil Option is ignored.
type Option = adapter.Option[*call]

// WithSkipper exempts the calls for which skip returns true, such as
// health checks: they are passed on without being counted and get no
// rate-limit headers (adapter.Config.Skip). It replaces WithMethods.
func WithSkipper(skip func(ctx context.Context, call Call) bool) Option {
	if skip == nil {
		return adapter.WithSkipper[*call](nil)
	}
	return adapter.WithSkipper(func(c *call) bool { return skip(c.ctx, c.info) })
}

// WithMethods limits only the calls of the named procedures, and passes
// the others on as WithSkipper's skipped calls: "/pkg.Service/Method" (or
// "pkg.Service/Method") names a procedure, "/pkg.Service/" (or
// "pkg.Service") every procedure of a service; an empty name names none
// (see adapter.MethodMatcher). It is shorthand for WithSkipper of a
// function that skips the calls of every other procedure, and replaces
// WithSkipper:
//
//	orders := core.Must(core.NewLimiter(core.Limit{Name: "orders", Rate: core.PerMinute(10)}))
//	connect.WithInterceptors(
//		ratekitconnect.New(lim, ratekitconnect.PeerIP),
//		ratekitconnect.New(orders, ratekitconnect.PeerIP, ratekitconnect.WithMethods("/shop.Orders/Create")),
//	)
func WithMethods(methods ...string) Option {
	match := adapter.MethodMatcher(methods...)
	return adapter.WithSkipper(func(c *call) bool { return !match(c.info.Spec.Procedure) })
}

// WithCost sets the cost of a call (default 1): see adapter.Config.Cost.
func WithCost(cost func(ctx context.Context, call Call) int) Option {
	if cost == nil {
		return adapter.WithCost[*call](nil)
	}
	return adapter.WithCost(func(c *call) int { return cost(c.ctx, c.info) })
}

// WithDeniedHandler sets the function that answers a rejected call, whose
// response headers are already set, instead of Rejection: the call ends
// with the error it returns, which should be a *connect.Error (see
// adapter.Config.Denied); a nil error, which would end the call as if its
// handler had succeeded, is taken as Rejection(d). A store failing closed
// is such a rejection, with a decision of Quota 0.
func WithDeniedHandler(denied func(ctx context.Context, call Call, d core.Decision) error) Option {
	if denied == nil {
		return defaultDenied
	}
	return adapter.WithDeniedHandler(func(c *call, d core.Decision) error {
		if err := denied(c.ctx, c.info, d); err != nil {
			return err
		}
		return Rejection(d)
	})
}

// WithErrorHandler sets the function that answers a call whose key
// function failed, whose key is empty, or whose cost is out of range,
// instead of connect.CodeInvalidArgument or CodeInternal: the call ends
// with the error it returns, or with the default error if that is nil
// (the call is never passed on). err is for logs, never for the client
// (see adapter.Config.OnError).
func WithErrorHandler(onError func(ctx context.Context, call Call, err error) error) Option {
	if onError == nil {
		return adapter.WithErrorHandler[*call](nil)
	}
	return adapter.WithErrorHandler(func(c *call, err error) error {
		if cerr := onError(c.ctx, c.info, err); cerr != nil {
			return cerr
		}
		return newError(adapter.RPCErrorStatus(err))
	})
}

// WithHeaders selects the rate-limit fields sent as response headers
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

// Rejection returns the error of a rejected call with decision d, which
// the interceptors answer with unless WithDeniedHandler is given:
// connect.CodeResourceExhausted, with a google.rpc.RetryInfo of
// d.RetryAfter and a google.rpc.QuotaFailure whose violation's subject is
// d.Name; or, for a decision taken without the store, which failed under
// a fail-closed limiter, connect.CodeUnavailable with the RetryInfo alone.
// The messages are fixed. It is a new error, never nil, to which a denied
// handler may add details or metadata.
func Rejection(d core.Decision) *connect.Error {
	code, message, quota := adapter.RPCRejection(d)
	err := newError(code, message)
	addDetail(err, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	if quota {
		addDetail(err, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     d.Name,
			Description: adapter.QuotaViolation,
		}}})
	}
	return err
}

// addDetail adds msg to err's details, unless it cannot be marshalled
// (it always can).
func addDetail(err *connect.Error, msg proto.Message) {
	if d, derr := connect.NewErrorDetail(msg); derr == nil {
		err.AddDetail(d)
	}
}

// The texts of the answers: fixed, so that they can be shared.
var (
	errNoKey       = errors.New(adapter.MessageNoKey)
	errKeyFailed   = errors.New(adapter.MessageKeyFailed)
	errExhausted   = errors.New(adapter.MessageExhausted)
	errUnavailable = errors.New(adapter.MessageUnavailable)
)

// newError returns a new error of code with its fixed message: a
// *connect.Error carries metadata of its own, so that none is shared.
func newError(code uint32, message string) *connect.Error {
	text := errKeyFailed
	switch message {
	case adapter.MessageNoKey:
		text = errNoKey
	case adapter.MessageExhausted:
		text = errExhausted
	case adapter.MessageUnavailable:
		text = errUnavailable
	}
	return connect.NewError(connect.Code(code), text)
}

// contextError returns the error of a call whose context ended with err
// while the call was held or waited.
func contextError(err error) error {
	code := connect.CodeCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, err)
}

// defaultDenied answers a rejection with Rejection.
var defaultDenied = adapter.WithDeniedHandler(func(_ *call, d core.Decision) error { return Rejection(d) })

// A call is one call through an interceptor: the port's request type. Of
// unary, stream and message, one says what Next does.
type call struct {
	ctx  context.Context
	info Call

	// header is where the response headers go, once asked for: the
	// handler's (connect.CallInfo's, or a stream's), or local.
	header http.Header
	local  http.Header // a unary call's outside a Connect handler: see flush

	req   connect.AnyRequest
	unary connect.UnaryFunc
	resp  connect.AnyResponse

	conn   connect.StreamingHandlerConn
	stream connect.StreamingHandlerFunc

	message bool // a message of StreamMessages: Next returns it
	msg     any
}

// responseHeader returns the response header of the call: a stream's, or
// that of the connect.CallInfo of a unary handler's context, which Connect
// sends with the response or the error. A unary call without one, made
// by other code than a Connect handler, gets a header of its own.
func (c *call) responseHeader() http.Header {
	if c.header != nil {
		return c.header
	}
	if c.conn != nil {
		c.header = c.conn.ResponseHeader()
	} else if info, ok := connect.CallInfoForHandlerContext(c.ctx); ok {
		c.header = info.ResponseHeader()
	} else {
		c.local = make(http.Header, 4)
		c.header = c.local
	}
	return c.header
}

// flush adds the fields of a header of the call's own to the response, or
// to the metadata of err, and returns err.
func (c *call) flush(resp connect.AnyResponse, err error) error {
	var h http.Header
	var cerr *connect.Error
	switch {
	case err == nil && resp != nil:
		h = resp.Header()
	case errors.As(err, &cerr):
		h = cerr.Meta()
	default:
		return err
	}
	for name, v := range c.local {
		h[name] = append(h[name], v...)
	}
	return err
}

// port is Connect's adapter.Port.
type port struct{}

func (port) Context(c *call) context.Context { return c.ctx }
func (port) Request(c *call) rules.Request   { return request{c} }

func (port) Header(c *call, name string, v []string) {
	if c.message || name == "Content-Type" || name == "Cache-Control" {
		return // a message's decision sets none; a problem body's fields: no body here
	}
	h := c.responseHeader()
	if v == nil {
		delete(h, name)
		return
	}
	h[name] = v
}

func (port) Next(c *call) error {
	switch {
	case c.message:
		return nil
	case c.unary != nil:
		var err error
		c.resp, err = c.unary(c.ctx, c.req)
		return err
	}
	return c.stream(c.ctx, c.conn)
}

func (port) Keep(c *call, d core.Decision) *call {
	if !c.message {
		c.ctx = adapter.ContextWithDecision(c.ctx, d)
	}
	return c
}

// Stop returns the error of a context that ended during a shaping hold.
func (port) Stop(_ *call, err error) error {
	if err != nil {
		return contextError(err)
	}
	return nil
}

// Write answers a call that the kit does not pass on with the error of the
// HTTP status it gives; the body is the problem body, which Connect has no
// place for. Rejections go to the denied handler, so that only the kit's
// own errors come here.
func (port) Write(_ *call, status int, _ []byte) error {
	return newError(adapter.RPCStatus(status))
}

// Offer is never called: no option of this package sets a queue.
func (port) Offer(*call, *queue.Offer, core.Decision) queue.Reply { return queue.Reply{} }

// request is the rules.Request of a call, pointer-shaped so that it
// converts to rules.Request without allocating.
type request struct{ c *call }

func (r request) Context() context.Context    { return r.c.ctx }
func (r request) Method() string              { return http.MethodPost }
func (r request) Path() string                { return r.c.info.Spec.Procedure }
func (r request) EscapedPath() string         { return "" }
func (r request) Route() string               { return r.c.info.Spec.Procedure }
func (r request) Values(name string) []string { return r.c.info.Header.Values(name) }
func (r request) Query(string) string         { return "" }
func (r request) RemoteAddr() string          { return r.c.info.Peer.Addr }
func (r request) Value(key any) any           { return r.c.ctx.Value(key) }
