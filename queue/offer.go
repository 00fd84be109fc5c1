package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
)

// Bounds of Options.
const (
	DefaultMaxBody = 64 << 10 // bytes
	MaxMaxBody     = 16 << 20 // bytes
	MaxHeaders     = 64       // names in the allowlist
	DefaultTimeout = 2 * time.Second

	// maxMeta bounds the bytes of an item's target and header values
	// together: an item over it is answered as a body over MaxBody.
	maxMeta = 16 << 10
)

// Options configure an Offer.
type Options struct {
	// Headers is the allowlist of the header fields kept in an item, such
	// as "Content-Type" or "Idempotency-Key"; every other field is
	// dropped. At most MaxHeaders names; Queue-Id, Host and the fields of
	// the connection (Connection, Content-Length, Transfer-Encoding, ...)
	// are refused.
	Headers []string

	// MaxBody is the most bytes of body an item keeps: a request with a
	// longer body is not queued and is answered with the TooLarge status.
	// No more than MaxBody+1 bytes of a body are ever read. From 1 to
	// MaxMaxBody; default DefaultMaxBody.
	MaxBody int

	// TooLarge is the status that answers a body over MaxBody:
	// http.StatusRequestEntityTooLarge (413, the default), which tells the
	// client that retrying will not help, or http.StatusTooManyRequests
	// (429), the rejection as it would be without a queue.
	TooLarge int

	// Location, when set, is the path that the 202 answer's Location
	// field points to, followed by the item's ID, such as "/orders/queued/"
	// for a status route of the application's.
	Location string

	// Timeout bounds a push to the queue; past it the queue counts as
	// failing. Default DefaultTimeout; at most a minute.
	Timeout time.Duration

	// Logger receives the episodes of a full and of a failing queue, once
	// each (see package internal/episode's model: a line when one starts,
	// one with the count when it ends). Default slog.Default().
	Logger *slog.Logger
}

// An Offer answers the requests that a ratekit middleware rejected by
// queueing them (see the package doc). Middleware takes one with its
// WithQueue option; package adapter calls ForKey with the key the limiter
// decided the request by, then ReplyTo for the frameworks whose request
// is an *http.Request, Reply for the others. It is safe for concurrent
// use.
type Offer struct {
	*offer
	key string
}

// An offer is what the Offers of one NewOffer share.
type offer struct {
	q        Queue
	headers  []string
	maxBody  int
	tooLarge int
	location string
	timeout  time.Duration
	log      *slog.Logger
	now      func() time.Time

	full, failing episode.Log
	keyFull       atomic.Uint64
}

// KeyFull returns how many requests this offer (and every offer ForKey
// made of it) left unqueued because their client's share of the queue
// was full (ErrKeyFull): they were answered as without a queue.
func (o *Offer) KeyFull() uint64 { return o.keyFull.Load() }

// refused are the header fields an allowlist may not hold: those of the
// connection, which the replay computes itself, and the ID's.
var refused = []string{HeaderID, "Host", "Connection", "Content-Length", "Transfer-Encoding",
	"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade"}

// NewOffer returns an Offer that pushes to q.
func NewOffer(q Queue, o Options) (*Offer, error) {
	if q == nil {
		return nil, errors.New("queue: NewOffer needs a queue")
	}
	off := &offer{q: q, maxBody: o.MaxBody, tooLarge: o.TooLarge, location: o.Location,
		timeout: o.Timeout, log: o.Logger, now: time.Now}
	if off.maxBody == 0 {
		off.maxBody = DefaultMaxBody
	}
	if off.maxBody < 1 || off.maxBody > MaxMaxBody {
		return nil, fmt.Errorf("queue: MaxBody %d must be from 1 to %d bytes", o.MaxBody, MaxMaxBody)
	}
	switch off.tooLarge {
	case 0:
		off.tooLarge = http.StatusRequestEntityTooLarge
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
	default:
		return nil, fmt.Errorf("queue: TooLarge %d must be 413 or 429", o.TooLarge)
	}
	if off.timeout == 0 {
		off.timeout = DefaultTimeout
	}
	if off.timeout < 0 || off.timeout > time.Minute {
		return nil, fmt.Errorf("queue: Timeout %s must be positive and at most a minute", o.Timeout)
	}
	if off.location != "" && (!strings.HasPrefix(off.location, "/") || strings.ContainsAny(off.location, "?#\r\n ")) {
		return nil, fmt.Errorf("queue: Location %q must be a path starting with /", o.Location)
	}
	if off.log == nil {
		off.log = slog.Default()
	}
	if len(o.Headers) > MaxHeaders {
		return nil, fmt.Errorf("queue: %d header fields in the allowlist, more than %d", len(o.Headers), MaxHeaders)
	}
	for _, h := range o.Headers {
		if !token(h) {
			return nil, fmt.Errorf("queue: %q is not a header field name", h)
		}
		h = http.CanonicalHeaderKey(h)
		for _, r := range refused {
			if h == r {
				return nil, fmt.Errorf("queue: the header field %s cannot be queued", h)
			}
		}
		off.headers = append(off.headers, h)
	}
	return &Offer{offer: off}, nil
}

// ForKey returns an offer that queues under the client key key (the
// item's Key), sharing o's queue, options and logs: the queue bounds each
// key's share (ErrKeyFull) and serves the keys in turn. Package adapter
// calls it with the key the limiter decided the rejected request by. An
// offer that was given no key queues every request under the empty key,
// as one client's.
func (o *Offer) ForKey(key string) *Offer { return &Offer{offer: o.offer, key: key} }

// token reports whether s is an HTTP token (RFC 9110), as field names are.
func token(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// A Request is what an Offer reads of a rejected request, in the shape
// of fasthttp's, for the adapters to Fiber: Method, URI and Header are
// what fasthttp.RequestHeader's Method, RequestURI and PeekAll return,
// Body what fasthttp.Request's Body does. Reply copies what it keeps, so
// they may share memory that the framework reuses after the handler.
type Request struct {
	Method []byte
	URI    []byte                     // path and query
	Header func(name string) [][]byte // every value of a field; none when absent
	Body   []byte
}

// A Reply is an Offer's answer to a rejected request, for an adapter to
// write: the header fields (Fields), then Status and Body. A Reply whose
// Status is 0 queued nothing (the queue is full or failing, or the
// request's target cannot be replayed): the adapter answers the rejection
// as it would without a queue.
type Reply struct {
	Status int
	Body   []byte
	set    []field
	drop   []string
}

// A field is one header field of a Reply.
type field struct{ name, value string }

// Fields sets the reply's header fields with set, which replaces a
// field's values, and removes those it must not carry (Retry-After on a
// 202) with del.
func (rep *Reply) Fields(set func(name, value string), del func(name string)) {
	for _, n := range rep.drop {
		del(n)
	}
	for _, f := range rep.set {
		set(f.name, f.value)
	}
}

// Fields of replies.
var (
	retryFields = []string{"Retry-After", "X-Ratelimit-Retry-After"}
	tooLarge    = []byte(`{"title":"Content Too Large","status":413,"detail":"the request is larger than the queue takes"}` + "\n")
)

// Reply queues req, which the decision d rejected, and returns the answer
// to write: 202 with the item's ID, or the rejection (see the package
// doc).
func (o *Offer) Reply(ctx context.Context, req *Request, d core.Decision) Reply {
	if len(req.Body) > o.maxBody {
		return o.large(d)
	}
	it := &Item{Key: o.key, Method: string(req.Method), Target: string(req.URI), Body: bytes.Clone(req.Body)}
	for _, name := range o.headers {
		if req.Header == nil {
			break
		}
		vs := req.Header(name)
		if len(vs) == 0 {
			continue
		}
		if it.Header == nil {
			it.Header = make(http.Header, len(o.headers))
		}
		ss := make([]string, len(vs))
		for i, v := range vs {
			ss[i] = string(v)
		}
		it.Header[name] = ss
	}
	return o.push(ctx, it, d)
}

// push queues it, whose fields the offer owns, and answers.
func (o *Offer) push(ctx context.Context, it *Item, d core.Decision) Reply {
	meta := len(it.Target)
	for name, vs := range it.Header {
		for _, v := range vs {
			meta += len(name) + len(v)
		}
	}
	if meta > maxMeta {
		return o.large(d)
	}
	if !strings.HasPrefix(it.Target, "/") {
		// An absolute-form or asterisk target, which the worker cannot
		// replay as the handler saw it: not queued, answered as before.
		return rejection(d)
	}
	it.ID, it.Enqueued = newID(), o.now()
	// Not cancelled when the client goes away: the push ends either way,
	// within the timeout, and its outcome is the queue's.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	err := o.q.Push(ctx, it)
	cancel()
	switch {
	case errors.Is(err, ErrKeyFull):
		// The client's share is full: the rejection it would have got
		// without a queue. Not a failure of the queue: no log line, as a
		// 429 has none; KeyFull counts it.
		o.keyFull.Add(1)
		return rejection(d)
	case errors.Is(err, ErrFull):
		if start, _ := o.full.Fail(); start {
			o.log.Warn("ratekit: queue full; rejected requests answered as without a queue")
		}
		return rejection(d)
	case err != nil:
		if start, _ := o.failing.Fail(); start {
			o.log.Warn("ratekit: queue failing; rejected requests answered as without a queue", "error", err)
		}
		return rejection(d)
	}
	if end, n := o.full.Recover(); end {
		o.log.Info("ratekit: queue takes requests again", "after", "full", "rejected", n)
	}
	if end, n := o.failing.Recover(); end {
		o.log.Info("ratekit: queue takes requests again", "after", "failing", "rejected", n)
	}
	r := Reply{Status: http.StatusAccepted, drop: retryFields,
		set:  []field{{"Content-Type", "application/json"}, {"Cache-Control", "no-store"}, {HeaderID, it.ID}},
		Body: []byte(`{"id":"` + it.ID + `","status":"queued"}` + "\n")}
	if o.location != "" {
		r.set = append(r.set, field{"Location", o.location + it.ID})
	}
	return r
}

// large answers a request too large to queue.
func (o *Offer) large(d core.Decision) Reply {
	if o.tooLarge == http.StatusTooManyRequests {
		return rejection(d)
	}
	return Reply{Status: http.StatusRequestEntityTooLarge, Body: tooLarge, drop: retryFields,
		set: []field{{"Content-Type", "application/problem+json"}, {"Cache-Control", "no-store"}}}
}

// rejection is the reply of a request not queued: the middleware answers
// it as without a queue.
func rejection(core.Decision) Reply { return Reply{} }

// ReplyTo queues r, which the decision d rejected, and returns the answer
// to write, as Reply does for a request in the shape of fasthttp's. It
// reads at most MaxBody+1 bytes of the body.
func (o *Offer) ReplyTo(r *http.Request, d core.Decision) Reply {
	if r.ContentLength > int64(o.maxBody) {
		return o.large(d)
	}
	it := &Item{Key: o.key, Method: r.Method, Target: r.URL.RequestURI()}
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		it.Body, err = io.ReadAll(io.LimitReader(r.Body, int64(o.maxBody)+1))
		if err != nil {
			// The client went away, or its body was malformed: nothing
			// to queue. It gets the rejection, if it still listens.
			return rejection(d)
		}
		if len(it.Body) > o.maxBody {
			return o.large(d)
		}
	}
	for _, name := range o.headers {
		if vs := r.Header[name]; len(vs) > 0 {
			if it.Header == nil {
				it.Header = make(http.Header, len(o.headers))
			}
			it.Header[name] = vs
		}
	}
	return o.push(r.Context(), it, d)
}
