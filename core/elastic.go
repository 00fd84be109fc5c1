package core

import (
	"context"
	"fmt"
	"time"
)

// elastic is a limiter's elastic throttling (WithElastic). The limiter as
// configured holds spare, and raised, the limiter that decides while spare
// reports room; raised holds the limiter as configured in base, and a base
// set makes its margin an elastic one. owes marks a limiter with spare
// whose bucket limits may find a bucket emptied beyond their burst by
// elastic admissions (see repay).
type elastic struct {
	spare  func() bool
	pct    int
	raised *Limiter
	base   *Limiter
	owes   bool
}

var errSoftElastic = fmt.Errorf("%w: WithSoftPercent and WithElastic cannot be combined (both raise the limits; pick one)", ErrInvalidLimit)

// WithElastic turns on elastic throttling: while spare reports that the
// server has room, each limit admits up to percent more requests than its
// count (its burst, for the bucket algorithms), rounded down; while spare
// reports no room, the limits are enforced exactly as configured.
//
// spare is asked once per decision (once per limiter in TakeAll), before
// the store is, and never under a lock: it must be fast and safe for
// concurrent use, such as an atomic load of a flag that a monitor of CPU
// or queue depth keeps up to date. A request admitted beyond the limit
// itself has Decision.Elastic set and is reported to observers as
// ElasticAllowed; decisions report the limit itself as Quota, with
// Remaining 0 beyond it, so the headers never promise the elastic room.
//
// Both ways of deciding count in the limit's own counters (same ID), so
// the signal can change at any time: a key that used 8 of a window of 5
// raised to 10 is rejected as soon as the signal drops, until its window
// has room under 5 again, and concurrent requests never see more than the
// limit the signal chose for them. A window algorithm's count is raised;
// a bucket's burst is raised and its rate kept, so every request costs
// the same refill time either way: a bucket emptied beyond its burst by
// elastic admissions is rejected, with the true RetryAfter, until it has
// refilled to within its burst. (Finding that RetryAfter costs such a
// rejection one more store read, without counting.)
//
// The store must share counters between bindings of the same limit, as
// the Store contract asks: MemoryStore and the Redis store do.
//
// percent must be between 1 and 1000 (100 admits up to twice the limit)
// and spare must not be nil; WithElastic cannot be combined with
// WithSoftPercent. Operator controls (Inspect, Grant) see the limits as
// configured.
func WithElastic(percent int, spare func() bool) Option {
	return func(l *Limiter) error {
		switch {
		case percent < 1 || percent > 1000:
			return fmt.Errorf("%w: elastic percent %d must be between 1 and 1000", ErrInvalidLimit, percent)
		case spare == nil:
			return fmt.Errorf("%w: WithElastic with a nil capacity signal", ErrInvalidLimit)
		case l.margins.softPct != 0:
			return errSoftElastic
		}
		l.elastic.pct, l.elastic.spare = percent, spare
		return nil
	}
}

// stretch returns l with the room elastic throttling gives it: its count
// raised by percent, rounded down, or for a bucket its burst, so that the
// rate, and with it what a request costs the bucket, stays the same.
func (l Limit) stretch(percent int) Limit {
	alg := l.Algorithm
	if alg == 0 {
		alg = DefaultAlgorithm
	}
	if !alg.bucket() {
		l.Rate.Count += int(int64(l.Rate.Count) * int64(percent) / 100)
		return l
	}
	if l.Rate.Count == 0 {
		return l // blocks every request, elastic or not
	}
	b := l.Burst
	if b == 0 {
		b = l.Rate.Count
	}
	l.Burst = b + int(int64(b)*int64(percent)/100)
	return l
}

// bindElastic binds the stretched limits of l, whose own are bound, into
// l.elastic.raised: a limiter that shares everything with l but its
// counter, and restates its decisions in terms of l's limits.
func (l *Limiter) bindElastic() error {
	if l.margins.softPct != 0 {
		return errSoftElastic
	}
	raised := make([]Limit, len(l.config))
	extra := make([]int, len(l.config))
	for i, lim := range l.config {
		raised[i] = lim.stretch(l.elastic.pct)
		p, err := raised[i].Params(time.Nanosecond)
		if err != nil {
			return fmt.Errorf("limit %q with elastic percent %d: %w", l.limits[i].Name, l.elastic.pct, err)
		}
		extra[i] = int(p.Capacity - l.limits[i].Capacity)
		l.elastic.owes = l.elastic.owes || p.Tau > l.limits[i].Tau
	}
	c, err := l.counts.store.Bind(raised)
	if err != nil {
		return fmt.Errorf("ratekit: binding limit %q with elastic percent %d: %w", l.limits[0].Name, l.elastic.pct, err)
	}
	r := &Limiter{
		config:   raised,
		limits:   l.limits,
		capacity: l.capacity, // a cost the limits cannot take without room is refused either way
		counts:   counts{store: l.counts.store},
		margins:  margins{shadow: l.margins.shadow, extra: extra},
		fail:     l.fail, // and so its episodes
		watch:    l.watch,
		elastic:  elastic{base: l},
	}
	r.counts.bind(c, len(r.limits), len(r.watch.observers) > 0)
	l.elastic.raised = r
	if l.elastic.owes {
		l.counts.lane = false // its decisions may need repay
	}
	return nil
}

// repay corrects the rejections by bucket limits of a limiter with
// elastic throttling, decided without room (ds, of l's own limits). Elastic
// admissions may have left a bucket emptier than empty under l's burst,
// which the store reads as just empty (see Store): the rejection is right,
// but its ResetAfter and RetryAfter leave out the time the bucket needs to
// refill to its burst. A rejected bucket whose ResetAfter is its whole
// Window may be such a bucket; for those, the stretched limits' counter
// is peeked at (cost 0: nothing counted), whose ResetAfter is the true
// refill time, and the difference is added to both.
func (l *Limiter) repay(ctx context.Context, key string, ds []Decision) {
	owing := false
	for i := range ds {
		owing = owing || l.limits[i].Tau != 0 && !ds[i].Allowed && ds[i].ResetAfter >= ds[i].Window
	}
	if !owing {
		return
	}
	full := make([]Decision, len(ds))
	if err := l.elastic.raised.counts.counter.Peek(ctx, key, 0, full); err != nil {
		// The rejection stands; only its times fall short. A failing
		// store fails the next decision too, which reports it.
		return
	}
	for i := range ds {
		if l.limits[i].Tau != 0 && !ds[i].Allowed && full[i].ResetAfter > ds[i].ResetAfter {
			owed := full[i].ResetAfter - ds[i].ResetAfter
			ds[i].RetryAfter += owed
			ds[i].ResetAfter = full[i].ResetAfter
		}
	}
}
