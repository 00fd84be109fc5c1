package core

import (
	"context"
	"time"
)

// A Check is one limiter a request must pass, with the request's key for
// it.
type Check struct {
	Limiter *Limiter
	Key     string

	// Block rejects the request without asking the limiter's store, as a
	// limit of zero requests would (a block-list entry): the decision has
	// Limit 0 and a RetryAfter of one window of the limiter's first limit.
	// A blocking check of a limiter in shadow mode passes the request.
	Block bool
}

// Checks are the limiters one request must pass, each with its own key:
// for example the rules of a rules file that match the request, one
// keyed by client IP and another by API key.
type Checks []Check

// Verdict decides a request against every check, as Limiter.Verdict does
// against one limiter, and appends the header fields to set to dst.
//
// The request passes only if every check admits it; a limiter in shadow
// mode (WithShadow) counts the request but never rejects it. When more
// than one check enforces, each is first asked without counting; if one
// rejects, the request is rejected with the longest RetryAfter and counted
// nowhere, not even by shadow checks (a concurrent request may still fill
// a limit between the two steps, as in Limiter.TakeN). Otherwise every
// check counts it, the enforcing ones first. The headers describe the most
// restrictive decision of the enforcing checks (of the shadow checks when
// none enforces), in the header style of that decision's limiter;
// Decision.Soft is set if an enforcing check admitted the request by soft
// throttling, and Delay is the longest delay of the enforcing checks. The
// verdict's Err is the store failure of the check that rejected, or, when
// the request passes, the first store failure of any check.
//
// No checks at all is a request that no limit applies to: it passes with
// no header fields. A check with an empty key is an error (ErrMissingKey),
// as is a cost out of a limiter's range; a store failure follows the fail
// mode of the check's limiter. keyErr is the error of computing the keys:
// when it is not nil, the request is not counted and the verdict carries
// it, as in Limiter.Verdict.
func (cs Checks) Verdict(ctx context.Context, keyErr error, cost int, dst []Header) (v Verdict, headers []Header) {
	if keyErr != nil {
		return Verdict{Err: keyErr, Status: rejectionStatus(Decision{}, keyErr)}, dst
	}
	// Every check's key and cost are valid before any counts, so that no
	// check, shadow ones included, fails a request another has counted.
	for _, c := range cs {
		var err error
		switch {
		case c.Block:
			continue
		case cost < 0 || cost > c.Limiter.capacity:
			err = costError(cost, c.Limiter.capacity)
		case c.Key == "":
			err = errEmptyKey
		default:
			continue
		}
		return Verdict{Err: err, Status: rejectionStatus(Decision{}, err)}, dst
	}
	for i, c := range cs {
		if c.Block {
			if v, ok := cs.block(i); ok {
				return v, c.Limiter.AppendHeaders(dst, v.Decision)
			}
		}
	}
	switch len(cs) {
	case 0:
		return Verdict{}, dst
	case 1:
		if !cs[0].Block {
			return cs[0].Limiter.Verdict(ctx, cs[0].Key, nil, cost, dst)
		}
	}
	enforcing := 0
	for _, c := range cs {
		if !c.Limiter.shadow && !c.Block {
			enforcing++
		}
	}
	if enforcing > 1 {
		var worst Decision
		var worstErr error
		at := -1
		for i, c := range cs {
			if c.Limiter.shadow || c.Block {
				continue
			}
			d, err := c.Limiter.peekN(ctx, c.Key, cost)
			if !d.Allowed && (at < 0 || d.moreRestrictive(worst)) {
				worst, worstErr, at = d, err, i
			}
		}
		if at >= 0 {
			return cs.reject(worst, at, worstErr, dst)
		}
	}
	// The headers describe the enforcing checks; shadow checks only when
	// there are none, so that a limit being rolled out does not show.
	var best [2]Decision // [0] enforcing, [1] shadow
	bestAt := [2]int{-1, -1}
	var delay time.Duration
	var firstErr error
	soft := false
	for pass, shadows := range [2]bool{false, true} { // enforcing checks first
		for i, c := range cs {
			if c.Limiter.shadow != shadows || c.Block {
				continue
			}
			d, err := c.Limiter.TakeN(ctx, c.Key, cost)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if !d.Allowed { // only an enforcing check rejects
				return cs.reject(d, i, err, dst)
			}
			if !shadows {
				delay = max(delay, d.Delay)
				soft = soft || d.Soft
			}
			if bestAt[pass] < 0 || d.moreRestrictive(best[pass]) {
				best[pass], bestAt[pass] = d, i
			}
		}
	}
	pick := 0
	if bestAt[0] < 0 {
		pick = 1
	}
	if bestAt[pick] < 0 { // only shadow blocks
		return Verdict{}, dst
	}
	d := best[pick]
	if pick == 0 {
		d.Delay, d.Soft = delay, soft
	}
	return Verdict{Decision: d, Err: firstErr, decided: true}, cs[bestAt[pick]].Limiter.AppendHeaders(dst, d)
}

// block decides the blocking check i, telling the observer; it reports
// false when the limiter is in shadow mode and the request goes on.
func (cs Checks) block(i int) (Verdict, bool) {
	l := cs[i].Limiter
	lim := l.limits[0]
	d := Decision{Name: lim.Name, Window: l.window, RetryAfter: l.window, ResetAfter: l.window}
	if l.observer != nil {
		l.observer(Event{Limit: lim.Name, Outcome: l.outcome(d), Decision: d})
	}
	if l.shadow {
		return Verdict{}, false
	}
	return Verdict{Decision: d, decided: true, Status: rejectionStatus(d, nil)}, true
}

// reject is the verdict of a rejection by check i.
func (cs Checks) reject(d Decision, i int, err error, dst []Header) (Verdict, []Header) {
	v := Verdict{Decision: d, Err: err, decided: true, Status: rejectionStatus(d, err)}
	return v, cs[i].Limiter.AppendHeaders(dst, d)
}

// peekN answers what TakeN would, without counting: the most restrictive
// decision of the limiter's limits, following the fail mode on a store
// failure. Rejections are reported to the observer, as TakeN's peeks are.
// The cost and key are valid (TakeN checks them) or checked here.
func (l *Limiter) peekN(ctx context.Context, key string, cost int) (Decision, error) {
	if cost < 0 || cost > l.capacity {
		return Decision{}, costError(cost, l.capacity)
	}
	if key == "" {
		return Decision{}, errEmptyKey
	}
	var best Decision
	for i := range l.counters {
		d, err := l.decide(ctx, i, key, cost, false)
		if err != nil {
			return d, err
		}
		if i == 0 || d.moreRestrictive(best) {
			best = d
		}
	}
	return best, nil
}
