package core

import "time"

// A Decision is the answer to one request: from a Counter, by one limit;
// from a Limiter or TakeAll, by the most restrictive of the limits that
// decided the request.
//
// The numbers are true: a client that waits RetryAfter and sends the same
// request again, with no other traffic on its key, is admitted, and
// Remaining more requests of cost 1 would be admitted now.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool

	// Name is the name of the limit that decided.
	Name string

	// Quota is the capacity of that limit: the burst of a bucket, the
	// count of a window algorithm (the IETF policy's q). Zero for a limit
	// that blocks every request, and for a decision taken without the
	// store, which failed.
	Quota int

	// Remaining is how many requests of cost 1 would be admitted right now,
	// after this one was counted.
	Remaining int

	// Window is the time span the quota refers to (the IETF policy's w):
	// the period of a window algorithm, the time to refill an empty bucket.
	Window time.Duration

	// ResetAfter is how long until the key is back to its full quota (a
	// bucket refilled, the window's counts expired).
	ResetAfter time.Duration

	// RetryAfter is how long until a request of the same cost would be
	// admitted; zero when Allowed.
	RetryAfter time.Duration

	// Delay is how long an admitted request must be held before it is
	// served: non-zero only for a shaping leaky bucket.
	Delay time.Duration

	// Soft reports an admission beyond the limit by soft throttling
	// (WithSoftPercent); Remaining is then 0.
	Soft bool

	// Elastic reports an admission beyond the limit by elastic throttling
	// (WithElastic), while the capacity signal reported room; Remaining is
	// then 0.
	Elastic bool

	// Shadow reports a request that a limit rejected but that passed
	// because its limiter is in shadow mode (WithShadow).
	Shadow bool

	// Granted reports an admission paid, by at least one limit, from a
	// grant an operator gave the key (Limiter.Grant) instead of counted by
	// the limit. Remaining includes what is left of the grant.
	Granted bool
}

// moreRestrictive reports whether a should describe a request rather than
// b: a rejection beats an admission, a longer retry beats a shorter one,
// fewer remaining requests beat more.
func (a *Decision) moreRestrictive(b *Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}
