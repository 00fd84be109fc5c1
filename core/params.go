package core

import (
	"fmt"
	"time"
)

// Params are the numbers a store needs to run a limit's algorithm, derived
// from the Limit once, with every time a whole number of a time unit that
// the store chooses (Limit.Params). The memory store works in nanoseconds;
// a store whose clock is coarser, or whose arithmetic is not 64-bit
// integer (Redis scripts compute in doubles), picks a larger unit so its
// numbers stay exact.
//
// A store that keeps its state elsewhere implements the arithmetic of the
// algorithms on these numbers and must pass the conformance suite in
// package core/storetest.
type Params struct {
	// ID identifies the limit's counters: its name and algorithm. Two
	// limits with the same ID share counters.
	ID string

	// Name is the limit's name, with the default filled in.
	Name string

	// Algorithm is the limit's algorithm, with the default filled in.
	Algorithm Algorithm

	// Shaping reports a shaping leaky bucket.
	Shaping bool

	// Count is the number of requests per period (Rate.Count).
	Count int64

	// Burst is the capacity of a bucket; Count for the window algorithms.
	Burst int64

	// Capacity is the most requests admitted at once, and the Limit of
	// every decision: Burst, or fewer for a shaping leaky bucket whose
	// MaxDelay admits fewer.
	Capacity int64

	// Unit is the time unit of the fields below.
	Unit time.Duration

	// Period is Rate.Period in units.
	Period int64

	// Emission is, for a bucket, the time to refill one request: Period /
	// Count in whole units. Zero for the window algorithms.
	Emission int64

	// Tau is, for a bucket, the time to refill from empty: Burst x
	// Emission. Zero for the window algorithms.
	Tau int64

	// MaxDelay is the delay bound of a shaping leaky bucket in whole
	// units, rounded up (so that a bound below one unit stays a bound);
	// zero means none.
	MaxDelay int64

	// Window is the time span the counts refer to (Decision.Window): the
	// period of a window algorithm, Tau of a bucket.
	Window time.Duration
}

// Params validates the limit and returns its numbers with times in whole
// multiples of unit, which must be positive. Beside the errors of
// Validate, it reports a period that is not a whole number of units, and
// a bucket rate that the unit cannot express within 1% (such as more than
// 10,000 requests per second in microseconds). Errors wrap
// ErrInvalidLimit.
func (l Limit) Params(unit time.Duration) (Params, error) {
	if unit <= 0 {
		return Params{}, fmt.Errorf("ratekit: time unit %s must be positive", unit)
	}
	p, err := compile(l)
	if err != nil {
		return Params{}, err
	}
	u := int64(unit)
	if p.period%u != 0 {
		return Params{}, limitError("period %s is not a whole number of %s", p.Rate.Period, unit)
	}
	q := Params{
		ID:        p.id,
		Name:      p.Name,
		Algorithm: p.Algorithm,
		Shaping:   p.Shaping,
		Count:     p.count,
		Burst:     p.burst,
		Capacity:  p.burst,
		Unit:      unit,
		Period:    p.period / u,
		Window:    time.Duration(p.period),
	}
	if p.maxDelay > 0 {
		q.MaxDelay = (p.maxDelay-1)/u + 1
	}
	if !p.Algorithm.bucket() {
		return q, nil
	}
	q.Emission = q.Period / q.Count
	if q.Emission == 0 {
		return Params{}, limitError("rate %s is faster than one request per %s", p.Rate, unit)
	}
	if rem := q.Period % q.Count; rem*100 > q.Period-rem {
		return Params{}, limitError("rate %s cannot be kept within 1%% in whole %s per request", p.Rate, unit)
	}
	q.Tau = q.Burst * q.Emission
	q.Window = time.Duration(q.Tau * u)
	if q.Shaping && q.MaxDelay > 0 {
		q.Capacity = min(q.Burst, q.MaxDelay/q.Emission+1)
	}
	return q, nil
}
