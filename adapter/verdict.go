package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
)

// A verdict is what the middleware does with one request: pass it on
// (status 0), answer it with a rejection (429, or 503 when the store
// failed under a fail-closed limiter), or answer it with an error (400 for
// a missing key, 500 for a failing key or plan function or a cost out of
// range).
type verdict struct {
	decision core.Decision // the zero Decision when none was taken
	err      error         // for logs and error handlers, never the client
	status   int
	inFlight bool   // a concurrency limit's: no rate-limit fields, Retry-After on a refusal
	key      string // the client key decided by, for the queue's share (queue.Offer.ForKey)
}

// rejected reports whether a limit, or a store failing closed, rejected
// the request: the cases of the denied handler, which get the rate-limit
// header fields.
func (v *verdict) rejected() bool {
	return v.status == http.StatusTooManyRequests || v.status == http.StatusServiceUnavailable
}

// retryField appends the Retry-After field of a concurrency refusal, in
// whole seconds rounded up, at least 1.
func (v *verdict) retryField(dst []answer.Field) []answer.Field {
	d := core.Decision{RetryAfter: v.decision.RetryAfter}
	return answer.NoHeaders.Fields(dst, &d)
}

// settle completes v, whose decision was taken with the error err.
func (m *Middleware[C]) settle(v *verdict, err error) {
	if err != nil && (errors.Is(err, core.ErrMissingKey) || errors.Is(err, core.ErrCostExceedsLimit) || errors.Is(err, core.ErrPlan)) {
		m.log.failed(v, err, false)
		return
	}
	m.log.recovered()
	v.err, v.status = err, 0
	if !v.decision.Allowed {
		v.status = http.StatusTooManyRequests
		if err != nil {
			v.status = http.StatusServiceUnavailable
		}
	}
}

// keyed settles the key of a request that the middleware decides by other
// means than a limiter: when keyErr is not nil or key is empty, it sets v
// to the verdict of the failure and returns false; otherwise it ends the
// failure episodes under way and returns true.
func (l *failures) keyed(v *verdict, key string, keyErr error) bool {
	if keyErr == nil && key == "" {
		keyErr = errEmptyKey
	}
	if keyErr != nil {
		l.failed(v, keyErr, true)
		return false
	}
	l.recovered()
	return true
}

var errEmptyKey = fmt.Errorf("%w: empty key", core.ErrMissingKey)

// failures logs the failures of a middleware's key functions, plans and
// costs once per episode of each kind: the first error is logged, the next
// ones are counted, and the count is logged when a request is decided
// again. Episodes that start within 10 seconds of the last one logged are
// counted into the next line, so requests that alternate between failing
// and passing log at most two lines per kind per 10 seconds.
type failures struct {
	logger *slog.Logger
	kinds  [failureKinds]episode.Log
	// troubled is set after a failure and cleared by the next request
	// decided, before it ends the episodes: a request finds it unset, and
	// skips the episodes, unless one may be under way.
	troubled atomic.Bool
}

// The kinds of failure, each with its own episodes.
const (
	noKey = iota
	keyFailing
	planFailing
	costFailing
	failureKinds
)

var failureLines = [failureKinds]struct {
	level slog.Level
	start string
}{
	noKey:       {slog.LevelInfo, "ratekit: requests without a rate-limit key (answered 400)"},
	keyFailing:  {slog.LevelWarn, "ratekit: rate-limit key function failing (answered 500)"},
	planFailing: {slog.LevelWarn, "ratekit: plan function failing (answered 500)"},
	costFailing: {slog.LevelWarn, "ratekit: request cost out of range (answered 500)"},
}

// failed sets v to the verdict of a request whose key or cost is
// unusable, logged once per episode.
func (l *failures) failed(v *verdict, err error, keyFunc bool) {
	status, kind := http.StatusInternalServerError, costFailing
	switch {
	case errors.Is(err, core.ErrMissingKey):
		status, kind = http.StatusBadRequest, noKey
	case keyFunc:
		kind = keyFailing
	case errors.Is(err, core.ErrPlan):
		kind = planFailing
	}
	start, _ := l.kinds[kind].Fail()
	l.troubled.Store(true)
	if start {
		line := failureLines[kind]
		l.log().Log(context.Background(), line.level, line.start, "error", err)
	}
	*v = verdict{err: err, status: status}
}

// recovered ends the failure episodes under way: a request was decided.
// A failure that happens while it runs either is ended by it or sets
// troubled again after it cleared it, so no episode is left unended.
func (l *failures) recovered() {
	if !l.troubled.Load() {
		return
	}
	l.troubled.Store(false)
	for kind := range l.kinds {
		if end, n := l.kinds[kind].Recover(); end {
			l.log().Info("ratekit: requests decided again", "failure", failureLines[kind].start, "failed_requests", n)
		}
	}
}

func (l *failures) log() *slog.Logger {
	if l.logger != nil {
		return l.logger
	}
	return slog.Default()
}
