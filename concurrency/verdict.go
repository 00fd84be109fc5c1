package concurrency

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// retryFields are the header fields of a refusal: Retry-After, in whole
// seconds. They are the same for every refusal of a limiter, built once.
type retryFields [1]answer.Field

func newRetryFields(retry time.Duration) retryFields {
	s := int64((retry + time.Second - 1) / time.Second)
	return retryFields{{Name: answer.HeaderRetryAfter, Value: []string{strconv.FormatInt(max(s, 1), 10)}}}
}

// Verdict decides a request for middleware into v, the way
// answer.Responder decides one for the rate-limit middleware: key and
// keyErr are the results of the key function, and r, the middleware's
// Responder, answers and logs a key that failed (400 when there is none,
// 500 when the key function failed, once per episode: answer.Keyed). It
// returns the lease to release when the request ends (nil when it is not
// passed on; Release accepts nil), and the header fields to set on the
// response: Retry-After when the request is refused (status 429, or 503
// when the store failed under WithFailClosed), none otherwise. Middleware
// then passes the request on when v.Pass(), or writes answer.Problem(v),
// where a 429 carries the limiter's name as its limit.
//
//	lease, fields := lim.Verdict(ctx, &responder, &v, k, err)
//	defer lease.Release() // panics included
func (l *Limiter) Verdict(ctx context.Context, r *answer.Responder, v *answer.Verdict, key string, keyErr error) (*Lease, []answer.Field) {
	if !r.Keyed(v, key, keyErr) {
		return nil, nil
	}
	res, lease, err := l.Acquire(ctx, key)
	*v = answer.Verdict{Err: err}
	if res.Admitted {
		return lease, nil
	}
	v.Decision = core.Decision{Name: l.name, Quota: l.max, RetryAfter: res.RetryAfter}
	v.Status = http.StatusTooManyRequests
	if err != nil {
		v.Decision.Quota = 0 // as core's fail-closed decisions: no quota to tell
		v.Status = http.StatusServiceUnavailable
	}
	return nil, l.fields[:]
}
