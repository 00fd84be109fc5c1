package core

import "context"

// A Verdict is what rate-limiting middleware does with one request: pass
// it on, answer it with a rejection, or answer it with an error. Every
// adapter (net/http, Gin, Echo, Fiber, Chi) turns a request into a call of
// Limiter.Verdict and the Verdict into the framework's response, so that
// all of them answer alike.
type Verdict struct {
	// Decision is the limiter's decision; the zero Decision when no
	// decision was taken (an error of the key function, an empty key, a
	// cost out of range).
	Decision Decision

	// Err is the key function's error, or the error of Limiter.TakeN: a
	// store failure (then Decision follows the fail mode), an empty key or
	// a cost out of range.
	Err error

	// Status is the status of the response that answers the request in
	// place of the handler: 429, 503 (the store failed and the limiter
	// fails closed), 400 (no key) or 500; zero when the request passes.
	Status int

	decided bool // a limit or the fail mode decided
}

// Pass reports whether the request is to be passed on, after the delay of
// a shaping leaky bucket (Hold).
func (v Verdict) Pass() bool { return v.Status == 0 }

// Rejected reports whether the request is answered because a limit
// rejected it or because the store failed under FailClosed: the cases for
// a custom "denied" handler, which get the rate-limit headers. Otherwise a
// request that does not pass failed with an error (Err), the case for a
// custom error handler, with no rate-limit headers.
func (v Verdict) Rejected() bool { return v.Status != 0 && v.decided }

// Verdict decides a request for middleware. key and keyErr are the
// results of the key function; cost is the request's cost (1 unless the
// application weighs requests). It returns the verdict and the rate-limit
// header fields to set on the response, passed on or rejected alike (none
// after a key or cost error), appended to dst: a buffer the caller may keep
// on its stack ([8]Header is enough), so that a request that passes
// allocates nothing. (The fields are a result of their own, not a field of
// Verdict, so that handing v.Decision to a function cannot move the buffer
// to the heap.)
//
// Middleware then sets the header fields on the response; if v.Pass(), it waits
// with Hold(ctx, v.Decision) and calls the next handler; otherwise it
// answers with the status and problem-details body of
// Rejection(v.Decision, v.Err), Content-Type ProblemContentType and
// Cache-Control ProblemCacheControl (or hands the request to the
// application's denied or error handler, as v.Rejected() says).
func (l *Limiter) Verdict(ctx context.Context, key string, keyErr error, cost int, dst []Header) (v Verdict, headers []Header) {
	if keyErr != nil {
		return Verdict{Err: keyErr, Status: rejectionStatus(Decision{}, keyErr)}, dst
	}
	d, err := l.TakeN(ctx, key, cost)
	if NoDecision(err) {
		return Verdict{Err: err, Status: rejectionStatus(Decision{}, err)}, dst
	}
	v = Verdict{Decision: d, Err: err, decided: true}
	if !d.Allowed {
		v.Status = rejectionStatus(d, err)
	}
	return v, l.AppendHeaders(dst, d)
}
