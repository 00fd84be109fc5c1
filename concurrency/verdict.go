package concurrency

import (
	"context"
	"errors"
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
// keyErr are the results of the key function. It returns the lease to
// release when the request ends (nil when it is not passed on; Release
// accepts nil), and the header fields to set on the response: Retry-After
// when the request is refused (status 429, or 503 when the store failed
// under WithFailClosed), none otherwise. Middleware then passes the
// request on when v.Pass(), or writes answer.Problem(v): a 429 carries the
// limiter's name as its limit, a key error is 400 (no key, an error
// wrapping core.ErrMissingKey) or 500, logged once per episode.
//
//	lease, fields := lim.Verdict(ctx, &v, k, err)
//	defer lease.Release() // panics included
func (l *Limiter) Verdict(ctx context.Context, v *answer.Verdict, key string, keyErr error) (*Lease, []answer.Field) {
	if keyErr == nil && key == "" {
		keyErr = core.ErrMissingKey
	}
	if keyErr != nil {
		l.keyFailed(v, keyErr)
		return nil, nil
	}
	l.keyRecovered()
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

// The kinds of key failure, each with its episodes.
const (
	keyMissing = iota
	keyFailing
)

// keyFailed sets v to the verdict of a request whose key is unusable:
// 400 when it has none, 500 when the key function failed.
func (l *Limiter) keyFailed(v *answer.Verdict, err error) {
	kind, status := keyFailing, http.StatusInternalServerError
	if errors.Is(err, core.ErrMissingKey) {
		kind, status = keyMissing, http.StatusBadRequest
	}
	if start, _ := l.keyFails[kind].Fail(); start {
		if kind == keyMissing {
			l.log.Info("ratekit: requests without a concurrency key (answered 400)", "limiter", l.name, "error", err)
		} else {
			l.log.Warn("ratekit: concurrency key function failing (answered 500)", "limiter", l.name, "error", err)
		}
	}
	*v = answer.Verdict{Err: err, Status: status}
}

// keyRecovered ends the key failure episodes under way.
func (l *Limiter) keyRecovered() {
	for kind := range l.keyFails {
		if end, n := l.keyFails[kind].Recover(); end {
			l.log.Info("ratekit: concurrency keys computed again", "limiter", l.name, "failed_requests", n)
		}
	}
}
