// Package adapter is the kit that ratekit's framework adapters are built
// on, for the authors of adapters; applications use an adapter (stdhttp,
// ratekitgin, ratekitecho, ratekitfiber, ratekitchi...) instead.
//
// An adapter is a port. It implements [Port] over its framework's request
// (the type parameter C: *gin.Context, echo.Context, *fiber.Ctx, or a
// small struct of a net/http request, its writer and the next handler),
// and its options fill a [Config] in the framework's own types. The kit
// holds everything else, so that every adapter answers a request alike,
// byte for byte:
//
//   - [Middleware.Limit], [Middleware.Rules] and [Middleware.Concurrency]
//     are the three flows: skip, key and cost, the decision of a
//     core.Limiter, a rules.Engine or a concurrency.Limiter, and one
//     respond that sets the header fields, holds a shaped request, keeps
//     the decision for the handler, and passes the request on or answers
//     it with the denied handler, the queue offer, the error handler or
//     the problem body of package answer;
//   - the failures of key functions, plans and costs are logged once per
//     episode of each kind, never once per request;
//   - [NewClientIP], [ProbeClientIP] and [CheckRemoteAddr] resolve the
//     client address from the forms frameworks keep it in, and
//     [HeaderKey] and [ValueKey] turn a header or a stored value into a
//     key, each as package keyfuncs does over an http.Request.
//
// A port's methods take the request by value and return values: the
// decision of a request stays on the kit's stack, and a request that
// passes allocates nothing in the kit.
//
//	type port struct{}
//
//	func (port) Context(c *gin.Context) context.Context { return c.Request.Context() }
//	...
//
//	func New(lim *core.Limiter, key Key, opts ...Option) gin.HandlerFunc {
//		h := adapter.New(port{}, opts...).Limit(lim, key)
//		return func(c *gin.Context) { _ = h(c) }
//	}
package adapter

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// A Port is what the kit needs of a framework's request C. Every method
// takes C by value, and none keeps what it is given beyond the call.
type Port[C any] interface {
	// Context returns the context that the limiter's store is called with
	// and that ends a shaping hold.
	Context(c C) context.Context

	// Request returns the view of the request that a rules.Engine
	// matches. It must not allocate: a pointer-shaped value converts to
	// rules.Request for free.
	Request(c C) rules.Request

	// Header sets the response header field name to value, which has one
	// element and must not be modified; an empty value removes the field.
	Header(c C, name string, value []string)

	// Next passes the request on to the handlers after the middleware.
	Next(c C) error

	// Keep stores the decision of a request passed on where the
	// framework's DecisionFrom reads it, and returns the request to pass
	// on (a net/http request gets a new context; most frameworks return
	// c).
	Keep(c C, d core.Decision) C

	// Stop ends a request that is not passed on: the kit is about to
	// answer it (Gin aborts its chain), or err is the error of a context
	// that ended during a shaping hold, which the framework records or
	// returns. It returns what the middleware returns.
	Stop(c C, err error) error

	// Write writes the response's status and body; the header fields are
	// already set.
	Write(c C, status int, body []byte) error

	// Offer queues the rejected request c with o and returns o's reply.
	Offer(c C, o *queue.Offer, d core.Decision) queue.Reply
}

// A HeaderPort is a Port whose response header is an http.Header, as on
// every framework built on net/http: the kit then sets a decision's
// header fields in it directly, with one call per request rather than one
// per field.
type HeaderPort[C any] interface {
	Port[C]

	// HeaderMap returns the response header of c.
	HeaderMap(c C) http.Header
}

// A Config is the configuration of an adapter's middleware: what its
// options set, in the framework's own types. A nil function leaves the
// default in place.
type Config[C any] struct {
	// Skip exempts the requests for which it returns true, such as health
	// checks: they are passed on without being counted and get no
	// rate-limit header fields.
	Skip func(C) bool

	// Cost is the cost of a request, how many units of the limit it
	// takes; 1 when nil. A cost of 0 reports the state without counting.
	// A negative cost, or one larger than a limit's capacity, is a
	// programming error, answered as an error (500).
	Cost func(C) int

	// Denied writes the answer to a request that a limit rejected, or
	// that the store's failure rejected under a fail-closed limiter
	// (whose decision has Quota 0), instead of the problem body. The
	// rate-limit header fields and Retry-After are set, and the request
	// is stopped, when it runs.
	Denied func(C, core.Decision) error

	// Queue, when set, answers rejected requests by queueing them for
	// later (see package queue): 202 Accepted with the item's ID, 413 for
	// a body over the offer's bound, and the rejection as without a queue
	// when the queue is full or failing. It takes the place of Denied.
	Queue *queue.Offer

	// OnError writes the answer to a request whose key function failed,
	// whose key is empty, or whose cost is out of range, instead of the
	// problem body (400 for a missing key, 500 otherwise). No rate-limit
	// header fields are set; the error itself is logged by the kit, once
	// per episode, and must not be shown to the client.
	OnError func(C, error) error

	// Headers selects the rate-limit header fields (answer.XRateLimit by
	// default).
	Headers answer.Style

	// Logger receives the failures of key functions, plans and costs,
	// once per episode of each kind (slog.Default() when nil). Store
	// failures are logged by the limiter.
	Logger *slog.Logger

	// DecisionInContext keeps the decision of every request that is
	// decided and passed on for the handler (Port.Keep), at the cost of
	// an allocation or two per request.
	DecisionInContext bool
}

// An Option sets part of a Config. Each adapter's Option is this type
// instantiated with its request type, so that an option of one adapter
// given to another is a compile error.
type Option[C any] func(*Config[C])

// A Middleware is the kit's middleware for one configuration: the flows
// it returns share its configuration and its failure log.
type Middleware[C any] struct {
	port   Port[C]
	header HeaderPort[C] // port, when its response header is an http.Header
	cfg    Config[C]
	log    failures
}

// New returns the middleware of port configured by opts, applied in
// order.
func New[C any](port Port[C], opts ...Option[C]) *Middleware[C] {
	m := &Middleware[C]{port: port}
	m.header, _ = port.(HeaderPort[C])
	for _, o := range opts {
		o(&m.cfg)
	}
	m.log.logger = m.cfg.Logger
	return m
}

// Limit returns the flow that limits each request with lim, keyed by key:
// for a request that is not skipped, it computes the key and, when that
// succeeded, the cost; takes lim's decision; and responds (see the package
// doc). When the store fails and lim fails open (the default), the request
// passes (core has logged the failure).
func (m *Middleware[C]) Limit(lim *core.Limiter, key func(C) (string, error)) func(C) error {
	return func(c C) error {
		if m.cfg.Skip != nil && m.cfg.Skip(c) {
			return m.port.Next(c)
		}
		k, err := key(c)
		if err == nil && k == "" {
			err = core.ErrMissingKey
		}
		var v verdict
		if err != nil {
			if errors.Is(err, core.ErrMissingKey) {
				// The limiter's observers count the request: Take of the
				// empty key reports it (core.MissingKey) and decides
				// nothing.
				_, _ = lim.Take(m.port.Context(c), "", 0)
			}
			m.log.failed(&v, err, true)
		} else {
			var derr error
			v.decision, derr = lim.Take(m.port.Context(c), k, m.cost(c))
			v.key = k
			m.settle(&v, derr)
		}
		return m.respond(c, &v)
	}
}

// Rules returns the flow that limits each request by the rules in force in
// e: every rule that matches the request applies, with its own key, and
// the request must pass them all (core.TakeAll). A request that no rule
// matches is passed on without rate-limit header fields, and its cost is
// not asked; a descriptor key function's failure is answered as a key
// error.
func (m *Middleware[C]) Rules(e *rules.Engine) func(C) error {
	return func(c C) error {
		if m.cfg.Skip != nil && m.cfg.Skip(c) {
			return m.port.Next(c)
		}
		var buf [8]core.Check
		checks, err := e.Checks(m.port.Request(c), buf[:0])
		var v verdict
		switch {
		case err != nil:
			m.log.failed(&v, err, true)
		case len(checks) == 0:
			return m.port.Next(c)
		default:
			var derr error
			v.decision, derr = core.TakeAll(m.port.Context(c), checks, m.cost(c))
			m.settle(&v, derr)
			if v.rejected() && m.cfg.Queue != nil {
				v.key = checksKey(checks)
			}
		}
		return m.respond(c, &v)
	}
}

// cost is the cost of request c.
func (m *Middleware[C]) cost(c C) int {
	if m.cfg.Cost == nil {
		return 1
	}
	return m.cfg.Cost(c)
}

// respond sets the header fields of v and carries it out: the part that
// every flow shares.
func (m *Middleware[C]) respond(c C, v *verdict) error {
	var buf [8]answer.Field
	fields := buf[:0]
	switch {
	case v.inFlight:
		if v.rejected() {
			fields = v.retryField(fields)
		}
	case v.status == 0 || v.rejected():
		fields = m.cfg.Headers.Fields(fields, &v.decision)
	}
	return m.carry(c, v, fields)
}

// carry sets fields and passes the request on, or answers it.
func (m *Middleware[C]) carry(c C, v *verdict, fields []answer.Field) error {
	switch {
	case len(fields) == 0:
	case m.header != nil:
		h := m.header.HeaderMap(c)
		for _, f := range fields {
			h[f.Name] = f.Value
		}
	default:
		for _, f := range fields {
			m.port.Header(c, f.Name, f.Value)
		}
	}
	if v.status == 0 {
		if v.decision.Delay > 0 {
			if err := hold(m.port.Context(c), v.decision.Delay); err != nil {
				return m.port.Stop(c, err)
			}
		}
		if m.cfg.DecisionInContext && v.decision.Name != "" {
			c = m.port.Keep(c, v.decision)
		}
		return m.port.Next(c)
	}
	stopped := m.port.Stop(c, nil)
	switch {
	case v.rejected() && m.cfg.Queue != nil:
		if rep := m.port.Offer(c, m.cfg.Queue.ForKey(v.key), v.decision); rep.Status != 0 {
			rep.Fields(func(name, value string) { m.port.Header(c, name, []string{value}) },
				func(name string) { m.port.Header(c, name, nil) })
			if err := m.port.Write(c, rep.Status, rep.Body); err != nil {
				return err
			}
			return stopped
		}
	case v.rejected() && m.cfg.Denied != nil:
		return m.cfg.Denied(c, v.decision)
	case !v.rejected() && m.cfg.OnError != nil:
		return m.cfg.OnError(c, v.err)
	}
	m.port.Header(c, "Content-Type", problemType)
	m.port.Header(c, "Cache-Control", noStore)
	if err := m.port.Write(c, v.status, answer.Problem(v.status, &v.decision, v.err)); err != nil {
		return err
	}
	return stopped
}

// checksKey is the client key of a request that rules decided, for the
// queue's share: the keys of every check, so that two clients whose keys
// differ in any rule are two clients. Each key is preceded by its length,
// so that no two lists of keys join to the same text.
func checksKey(checks []core.Check) string {
	if len(checks) == 1 {
		return checks[0].Key
	}
	var b strings.Builder
	for _, ch := range checks {
		b.WriteString(strconv.Itoa(len(ch.Key)))
		b.WriteByte(':')
		b.WriteString(ch.Key)
	}
	return b.String()
}

var (
	problemType = []string{answer.ProblemContentType}
	noStore     = []string{answer.ProblemCacheControl}
)

// hold waits for delay, the slot of a request admitted by a shaping leaky
// bucket, and returns nil; it returns ctx.Err() as soon as ctx is done.
func hold(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Concurrency returns the flow that lets at most lim.Max() requests of
// each key be in flight at once (see package concurrency). A request that
// finds its key full is answered as a rejection: 429 with Retry-After (no
// rate-limit fields) and the problem body naming lim, or the denied
// handler, whose decision has Quota lim.Max(); 503 when the store failed
// under concurrency.WithFailClosed, with Quota 0. A missing key is 400, a
// failing key function 500, or the error handler's. An admitted request
// holds its slot until the handlers after the middleware return, or panic.
// Of the Config, Cost and Headers play no part.
func (m *Middleware[C]) Concurrency(lim *concurrency.Limiter, key func(C) (string, error)) func(C) error {
	name, quota := lim.Name(), lim.Max()
	return func(c C) error {
		if m.cfg.Skip != nil && m.cfg.Skip(c) {
			return m.port.Next(c)
		}
		k, err := key(c)
		v := verdict{inFlight: true, key: k}
		if m.log.keyed(&v, k, err) {
			res, lease, err := lim.Acquire(m.port.Context(c), k)
			defer lease.Release() // panics included; nil when refused
			v.err = err
			if !res.Admitted {
				v.decision = core.Decision{Name: name, Quota: quota, RetryAfter: res.RetryAfter}
				v.status = http.StatusTooManyRequests
				if err != nil {
					v.decision.Quota = 0 // as core's fail-closed decisions: no quota to tell
					v.status = http.StatusServiceUnavailable
				}
			}
		}
		return m.respond(c, &v)
	}
}
