package core

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

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

	// Policies lists every limit of the request, each as the IETF policy
	// item `"name";q=quota;w=window` (Quota, and Window in seconds rounded
	// up), joined by ", ": the value of the RateLimit-Policy field. A
	// Limiter's decisions list all of its limits; TakeAll's, those of
	// every check (the enforcing ones, when there are any), in the order
	// of the checks, each item once. Limits that block every request are
	// left out. The list is made when the limiter is built (for TakeAll,
	// the first time a set of checks is seen), so it is the same for
	// every decision of the same limits, whichever of them decided. It is
	// empty in a Counter's decisions.
	Policies string

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

// policyList returns the Policies of a limiter of limits ps.
func policyList(ps []Params) string {
	var b []byte
	for i := range ps {
		p := &ps[i]
		if p.Block {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, p.Name...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, p.Capacity, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, ceilSeconds(p.Window), 10)
	}
	return string(b)
}

// ceilSeconds is d in whole seconds, rounded up; 0 when d is not
// positive.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	d = min(d, 1<<62) // keep d + 1s from overflowing
	return int64((d + time.Second - 1) / time.Second)
}

// maxJoins bounds the sets of checks whose joined Policies a limiter
// keeps (joins): beyond it, TakeAll joins the lists of a new set at each
// decision.
const maxJoins = 32

// A join is the Policies of a set of TakeAll's checks: parts, the lists
// of their limiters in order, and text, those joined.
type join struct {
	parts []string
	text  string
}

// joins keeps the Policies of the sets of checks a limiter comes first
// in, copied on write: lock-free and allocation-free to read.
type joins struct {
	p atomic.Pointer[[]join]
}

// policiesOf returns the Policies of a decision of checks: the lists of
// the enforcing checks' limiters, or of the shadow ones when all are,
// joined, each item once.
func policiesOf(checks []Check) string {
	enforcing := false
	for i := range checks {
		if !checks[i].Limiter.margins.shadow {
			enforcing = true
			break
		}
	}
	var buf [8]string
	parts := buf[:0]
	var first *Limiter
	for i := range checks {
		l := checks[i].Limiter
		if enforcing && l.margins.shadow || l.policies == "" || slices.Contains(parts, l.policies) {
			continue
		}
		if first == nil {
			first = l
		}
		parts = append(parts, l.policies)
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return first.joins.of(parts)
}

// of returns parts joined, kept for the next decision of the same parts
// while fewer than maxJoins sets are kept.
func (j *joins) of(parts []string) string {
	for {
		old := j.p.Load()
		if old != nil {
			for i := range *old {
				if slices.Equal((*old)[i].parts, parts) {
					return (*old)[i].text
				}
			}
		}
		text := joinPolicies(parts)
		if old != nil && len(*old) >= maxJoins {
			return text
		}
		var next []join
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, join{slices.Clone(parts), text})
		if j.p.CompareAndSwap(old, &next) {
			return text
		}
	}
}

// joinPolicies joins the Policies parts, each item once.
func joinPolicies(parts []string) string {
	var items []string
	for _, p := range parts {
		for item := range strings.SplitSeq(p, ", ") { // a limit's name holds no space
			if !slices.Contains(items, item) {
				items = append(items, item)
			}
		}
	}
	return strings.Join(items, ", ")
}
