package core

import "time"

// A Decision is the answer to one request against one limit (or, from a
// Limiter, against the most restrictive of its limits).
//
// The numbers are true: a client that waits RetryAfter and sends the same
// request again, with no other traffic on its key, is admitted.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool

	// Limit is the capacity of the limit: the burst of a bucket, the count
	// of a window algorithm.
	Limit int

	// Remaining is how many requests of cost 1 would be admitted right now,
	// after this one was counted.
	Remaining int

	// ResetAfter is how long until the key is back to full capacity (a
	// bucket refilled, the window's counts expired).
	ResetAfter time.Duration

	// RetryAfter is how long until a request of the same cost would be
	// admitted; zero when Allowed.
	RetryAfter time.Duration

	// Delay is how long an admitted request must be held before it is
	// served: non-zero only for a shaping leaky bucket.
	Delay time.Duration

	// Name is the name of the limit that decided.
	Name string

	// Soft reports an admission beyond the limit by soft throttling
	// (WithSoftPercent); Remaining is then 0.
	Soft bool

	// Shadow reports a request that the limit rejected but that passed
	// because the limiter is in shadow mode (WithShadow).
	Shadow bool

	// Window is the time span the limit's count refers to: the period of a
	// window algorithm, the time to refill an empty bucket.
	Window time.Duration
}

// moreRestrictive reports whether a should describe a request rather than
// b: a rejection beats an admission, a longer retry beats a shorter one,
// fewer remaining requests beat more.
func (a Decision) moreRestrictive(b Decision) bool {
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
