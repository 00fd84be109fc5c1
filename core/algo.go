package core

import (
	"math/bits"
	"time"
)

// This file holds the arithmetic of the five algorithms on their per-key
// state, in nanoseconds since the Unix epoch. Every function returns the
// decision for a request of the given cost and, when commit is true and the
// request is admitted, updates the state. The Redis store implements the
// same arithmetic in Lua; the conformance suite (core/storetest) checks that
// both give the same answers.

// fill writes a decision. The algorithms write through a pointer rather
// than return a Decision, which would be copied at every level.
func (p *policy) fill(d *Decision, allowed bool, remaining, reset, retry int64) {
	if remaining < 0 {
		remaining = 0
	}
	if reset < 0 {
		reset = 0
	}
	if allowed {
		retry = 0
	}
	*d = Decision{
		Allowed:    allowed,
		Limit:      int(p.capacity),
		Remaining:  int(remaining),
		ResetAfter: time.Duration(reset),
		RetryAfter: time.Duration(retry),
		Name:       p.Name,
		Window:     p.windowLen,
	}
}

// Token and leaky bucket, as the generic cell rate algorithm: the state is
// the theoretical arrival time (tat), the time at which the bucket will be
// full again (token bucket) or the queue empty (leaky bucket). A request of
// cost c moves tat forward by c emission intervals; it is admitted when
// the new tat lies at most tau (burst x emission) ahead of now.
func (p *policy) takeBucket(tat *int64, now, cost int64, commit bool, d *Decision) {
	t := *tat
	if t < now {
		t = now
	}
	next := t + cost*p.emission
	allowAt := next - p.tau
	delay := int64(0)
	if p.Shaping {
		delay = t - now
		if p.maxDelay > 0 && delay > p.maxDelay && delay-p.maxDelay > allowAt-now {
			allowAt = now + delay - p.maxDelay
		}
	}
	if now < allowAt {
		// Tokens left: what the bucket holds now, without this request.
		remaining := min((p.tau-(t-now))/p.emission, p.byDelay(t-now))
		p.fill(d, false, remaining, t-now, allowAt-now)
		return
	}
	if commit {
		*tat = next
	}
	remaining := min((p.tau-(next-now))/p.emission, p.byDelay(next-now))
	p.fill(d, true, remaining, next-now, 0)
	d.Delay = time.Duration(delay)
}

// byDelay is how many requests of cost 1 a shaping bucket with a delay
// bound admits when the next one would wait wait: each one after it waits
// an emission interval more.
func (p *policy) byDelay(wait int64) int64 {
	switch {
	case !p.Shaping || p.maxDelay == 0:
		return p.burst
	case wait > p.maxDelay:
		return 0
	}
	return (p.maxDelay-wait)/p.emission + 1
}

func (p *policy) bucketFull(tat *int64, now int64) bool { return *tat <= now }

// windowState is the state of the two window algorithms: the index of the
// current window (time / period) and the counts of it and the one before.
type windowState struct {
	win       int64
	cur, prev int32
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// roll moves the state to window win.
func (s *windowState) roll(win int64) {
	switch {
	case s.win == win:
	case s.win == win-1:
		s.prev, s.cur = s.cur, 0
		s.win = win
	default:
		s.prev, s.cur = 0, 0
		s.win = win
	}
}

// Fixed window: admitted while the count of the current window plus the
// cost stays within the limit.
func (p *policy) takeFixed(s *windowState, now, cost int64, commit bool, d *Decision) {
	win := floorDiv(now, p.period)
	end := (win+1)*p.period - now
	st := *s
	st.roll(win)
	used := int64(st.cur)
	if used+cost > p.count {
		p.fill(d, false, p.count-used, end, end)
		return
	}
	if commit {
		st.cur += int32(cost)
		*s = st
	}
	reset := end
	if used+cost == 0 {
		reset = 0
	}
	p.fill(d, true, p.count-used-cost, reset, 0)
}

func (p *policy) fixedFull(s *windowState, now int64) bool {
	// A window other than the current one (older, or ahead after the
	// period was lengthened) would be reset by the next request.
	return s.cur == 0 || s.win != floorDiv(now, p.period)
}

// Sliding window counter. With e the time elapsed in the current window of
// length P, the estimate of the count over the last period, including the
// request being decided, is
//
//	cur + cost + prev x (P - e) / P
//
// and the request is admitted when the estimate is at most the limit: no
// rounding in the request's favour. Remaining is the limit minus cur minus
// the weighted previous count rounded up, so Remaining requests of cost 1
// are exactly what would be admitted now.
func (p *policy) takeCounter(s *windowState, now, cost int64, commit bool, d *Decision) {
	win := floorDiv(now, p.period)
	start := win * p.period
	elapsed := now - start
	st := *s
	st.roll(win)
	cur, prev := int64(st.cur), int64(st.prev)
	weighted := mulDivCeil(prev, p.period-elapsed, p.period)
	free := p.count - cur - weighted // requests of cost 1 admitted now
	if cost > free {
		p.fill(d, false, free, p.counterReset(cur, prev, start, now), p.counterRetry(cur, prev, cost, start, now))
		return
	}
	if commit {
		st.cur += int32(cost)
		*s = st
	}
	p.fill(d, true, free-cost, p.counterReset(cur+cost, prev, start, now), 0)
}

// counterReset is the time until both counts have expired.
func (p *policy) counterReset(cur, prev, start, now int64) int64 {
	switch {
	case cur > 0:
		return start + 2*p.period - now
	case prev > 0:
		return start + p.period - now
	}
	return 0
}

// counterRetry is the earliest wait after which a request of the given cost
// is admitted, assuming no other traffic.
func (p *policy) counterRetry(cur, prev, cost, start, now int64) int64 {
	P := p.period
	if k := p.count - cur - cost; k >= 0 {
		// Within this window: need ceil(prev x (P-e)/P) <= k, that is
		// prev x (P-e) <= k x P, so e >= P - floor(k x P / prev).
		if k < prev {
			e := P - mulDiv(k, P, prev)
			return start + e - now
		}
		return 0
	}
	// Next window: prev becomes cur and cur 0; need cur x (P-e) <= (count-cost) x P.
	k := p.count - cost
	e := int64(0)
	if k < cur {
		e = P - mulDiv(k, P, cur)
	}
	return start + P + e - now
}

func (p *policy) counterFull(s *windowState, now int64) bool {
	win := floorDiv(now, p.period)
	return (s.cur == 0 && s.prev == 0) || (s.win != win && s.win != win-1)
}

// mulDiv returns floor(a*b/c) for non-negative a, b and positive c, with a
// 128-bit intermediate product. The quotient must fit in 63 bits.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// mulDivCeil returns ceil(a*b/c), with a*b/c at most a (b <= c).
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// logRing is the state of a sliding window log: the times of the admitted
// requests still inside the window, oldest first, in a ring that grows up
// to the limit's count (a request of cost c is logged c times).
type logRing struct {
	ts   []int64
	head int
	n    int
}

func (r *logRing) at(i int) int64 { return r.ts[(r.head+i)%len(r.ts)] }

// expire drops the entries that are out of the window ending at now.
func (r *logRing) expire(now, period int64) {
	for r.n > 0 && r.ts[r.head] <= now-period {
		r.head = (r.head + 1) % len(r.ts)
		r.n--
	}
	if r.n == 0 {
		r.head = 0
	}
}

func (r *logRing) push(t int64, cost, limit int64) {
	need := r.n + int(cost)
	if need > len(r.ts) {
		size := 2 * len(r.ts)
		if size < 4 {
			size = 4
		}
		if size < need {
			size = need
		}
		if int64(size) > limit {
			size = int(limit)
		}
		ts := make([]int64, size)
		for i := 0; i < r.n; i++ {
			ts[i] = r.at(i)
		}
		r.ts, r.head = ts, 0
	}
	for i := int64(0); i < cost; i++ {
		r.ts[(r.head+r.n)%len(r.ts)] = t
		r.n++
	}
}

// Sliding window log: an entry logged at time t counts while now < t + P,
// so at most count requests are admitted in any interval of length P. Only
// admitted requests are logged: a client that keeps sending while rejected
// gets back in as soon as its old requests expire.
func (p *policy) takeLog(slot **logRing, now, cost int64, commit bool, d *Decision) {
	r := *slot
	if r == nil {
		if !commit || cost == 0 {
			reset := int64(0)
			if cost > 0 {
				reset = p.period // what Take would report
			}
			p.fill(d, true, p.count-cost, reset, 0)
			return
		}
		r = &logRing{}
		*slot = r
	}
	r.expire(now, p.period)
	used := int64(r.n)
	reset := int64(0)
	if r.n > 0 {
		reset = r.at(r.n-1) + p.period - now
	}
	if used+cost > p.count {
		// Wait until enough of the oldest entries have expired.
		oldest := r.at(int(used + cost - p.count - 1))
		p.fill(d, false, p.count-used, reset, oldest+p.period-now)
		return
	}
	if cost > 0 {
		if commit {
			r.push(now, cost, p.count)
		}
		reset = p.period
	}
	p.fill(d, true, p.count-used-cost, reset, 0)
}

func (p *policy) logFull(slot **logRing, now int64) bool {
	r := *slot
	return r == nil || r.n == 0 || r.at(r.n-1) <= now-p.period
}
