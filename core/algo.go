package core

import (
	"math/bits"
	"time"
)

// This file holds the arithmetic of the five algorithms on one key's state
// under one limit, with times in nanoseconds: since the Unix epoch, or,
// in the memory store, since an origin of its own that keeps every time
// positive, whatever the clock says (Params.shift aligns the windows). The
// state is a few int64 words (width); all zero is the state of a key
// never seen, and reads as one: a bucket full since time 0, windows with
// no count, an empty log. take returns the decision for a request of the given cost
// and, when commit is true and the request is admitted, updates the state.
// The Redis store implements the same arithmetic in Lua; the conformance
// suite (core/storetest) holds both to the same traces. In the memory
// store, this is the bottom of a decision: it calls only the log rings.
//
//	token and leaky bucket: [tat]                  1 word
//	fixed window, counter:  [window, cur<<32|prev] 2 words
//	sliding window log:     [ring index + 1]       1 word (the ring lives in the shard: memory_table.go)
//	block (count 0):        none

// width is the number of state words of limit p.
func (p *Params) width() int {
	switch {
	case p.Block:
		return 0
	case p.Algorithm == FixedWindow || p.Algorithm == SlidingWindowCounter:
		return 2
	}
	return 1
}

// take runs p's algorithm on the state w.
func (p *Params) take(w []int64, rs *rings, now, cost int64, commit bool, d *Decision) {
	switch {
	case p.Emission != 0:
		p.takeBucket(&w[0], now, cost, commit, d)
	case p.Block:
		p.fill(d, false, 0, p.Period, p.Period)
		d.Quota = 0
	case p.Algorithm == FixedWindow:
		p.takeFixed(w, now, cost, commit, d)
	case p.Algorithm == SlidingWindowCounter:
		p.takeCounter(w, now, cost, commit, d)
	default:
		p.takeLog(&w[0], rs, now, cost, commit, d)
	}
}

// full reports whether state w is back to full capacity, so that the key
// can be forgotten without changing any decision.
func (p *Params) full(w []int64, rs *rings, now int64) bool {
	switch {
	case p.Block:
		return true
	case p.Emission != 0:
		return w[0] <= now
	case p.Algorithm == FixedWindow:
		// A window later than now's (a decision that read the clock
		// later) is still counting.
		cur, _ := unpack(w[1])
		return cur == 0 || w[0] < floorDiv(now+p.shift, p.Period)
	case p.Algorithm == SlidingWindowCounter:
		cur, prev := unpack(w[1])
		return (cur == 0 && prev == 0) || w[0] < floorDiv(now+p.shift, p.Period)-1
	}
	r := rs.get(w[0])
	return r == nil || r.n == 0 || r.at(r.n-1) <= now-p.Period
}

// refund gives back a request of the given cost admitted at time at.
func (p *Params) refund(w []int64, rs *rings, at, cost int64) {
	switch {
	case p.Block || cost == 0:
	case p.Emission != 0:
		if w[0] != 0 {
			w[0] -= cost * p.Emission
		}
	case p.Algorithm == FixedWindow || p.Algorithm == SlidingWindowCounter:
		cur, prev := unpack(w[1])
		switch floorDiv(at+p.shift, p.Period) {
		case w[0]:
			cur = max(cur-cost, 0)
		case w[0] - 1:
			prev = max(prev-cost, 0)
		}
		w[1] = pack(cur, prev)
	default:
		if r := rs.get(w[0]); r != nil {
			r.remove(at, cost)
		}
	}
}

// fill writes a decision. The algorithms write through a pointer rather
// than return a Decision, which would be copied at every level.
func (p *Params) fill(d *Decision, allowed bool, remaining, reset, retry int64) {
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
		Name:       p.Name,
		Quota:      int(p.Capacity),
		Remaining:  int(remaining),
		Window:     p.Window,
		ResetAfter: time.Duration(reset),
		RetryAfter: time.Duration(retry),
	}
}

// Token and leaky bucket, as the generic cell rate algorithm: the state is
// the theoretical arrival time (tat), the time at which the bucket will be
// full again (token bucket) or the queue empty (leaky bucket). A request of
// cost c moves tat forward by c emission intervals; it is admitted when
// the new tat lies at most tau (burst x emission) ahead of now.
//
// A tat more than tau ahead, written under a larger burst or a slower
// rate of the same limit, is read as tau ahead: an empty bucket.
func (p *Params) takeBucket(tat *int64, now, cost int64, commit bool, d *Decision) {
	t := min(max(*tat, now), now+p.Tau)
	next := t + cost*p.Emission
	allowAt := next - p.Tau
	delay := int64(0)
	if p.Shaping {
		delay = t - now
		if p.MaxDelay > 0 && delay > p.MaxDelay && delay-p.MaxDelay > allowAt-now {
			allowAt = now + delay - p.MaxDelay
		}
	}
	if now < allowAt {
		// Tokens left: what the bucket holds now, without this request.
		remaining := min((p.Tau-(t-now))/p.Emission, p.byDelay(t-now))
		p.fill(d, false, remaining, t-now, allowAt-now)
		return
	}
	if commit {
		*tat = next
	}
	remaining := min((p.Tau-(next-now))/p.Emission, p.byDelay(next-now))
	p.fill(d, true, remaining, next-now, 0)
	d.Delay = time.Duration(delay)
}

// byDelay is how many requests of cost 1 a shaping bucket with a delay
// bound admits when the next one would wait wait: each one after it waits
// an emission interval more.
func (p *Params) byDelay(wait int64) int64 {
	switch {
	case !p.Shaping || p.MaxDelay == 0:
		return p.Burst
	case wait > p.MaxDelay:
		return 0
	}
	return (p.MaxDelay-wait)/p.Emission + 1
}

// The window algorithms keep the index of the current window (time /
// period) and the counts of it and the one before, packed in one word.

func pack(cur, prev int64) int64 { return cur<<32 | prev&0xffffffff }

func unpack(w int64) (cur, prev int64) { return w >> 32, w & 0xffffffff }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// roll returns the counts of window win.
func roll(w []int64, win int64) (cur, prev int64) {
	c, p := unpack(w[1])
	switch w[0] {
	case win:
		return c, p
	case win - 1:
		return 0, c
	}
	return 0, 0
}

// Fixed window: admitted while the count of the current window plus the
// cost stays within the limit.
func (p *Params) takeFixed(w []int64, now, cost int64, commit bool, d *Decision) {
	now += p.shift
	win := floorDiv(now, p.Period)
	end := (win+1)*p.Period - now
	used, prev := roll(w, win)
	if used+cost > p.Count {
		p.fill(d, false, p.Count-used, end, end)
		return
	}
	if commit {
		w[0], w[1] = win, pack(used+cost, prev)
	}
	reset := end
	if used+cost == 0 {
		reset = 0
	}
	p.fill(d, true, p.Count-used-cost, reset, 0)
}

// DecideWindow writes to d the decision of a fixed window or sliding
// window counter limit on a request of the given cost at time now, from
// the counts of the window that now falls in (cur) and of the window
// before it (prev), times in p.Unit since the Unix epoch. It keeps no
// state: it is the arithmetic of the window algorithms for a store that
// keeps its counts elsewhere, such as one that sums them across servers.
// For the other algorithms it writes nothing and reports false.
func (p *Params) DecideWindow(cur, prev, now, cost int64, d *Decision) bool {
	if p.Block || (p.Algorithm != FixedWindow && p.Algorithm != SlidingWindowCounter) {
		return false
	}
	w := [2]int64{floorDiv(now+p.shift, p.Period), pack(min(max(cur, 0), MaxCount), min(max(prev, 0), MaxCount))}
	if p.Algorithm == FixedWindow {
		p.takeFixed(w[:], now, cost, false, d)
	} else {
		p.takeCounter(w[:], now, cost, false, d)
	}
	return true
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
func (p *Params) takeCounter(w []int64, now, cost int64, commit bool, d *Decision) {
	now += p.shift
	win := floorDiv(now, p.Period)
	start := win * p.Period
	elapsed := now - start
	cur, prev := roll(w, win)
	weighted := mulDivCeil(prev, p.Period-elapsed, p.Period)
	free := p.Count - cur - weighted // requests of cost 1 admitted now
	if cost > free {
		p.fill(d, false, free, p.counterReset(cur, prev, start, now), p.counterRetry(cur, prev, cost, start, now))
		return
	}
	if commit {
		w[0], w[1] = win, pack(cur+cost, prev)
	}
	p.fill(d, true, free-cost, p.counterReset(cur+cost, prev, start, now), 0)
}

// counterReset is the time until both counts have expired.
func (p *Params) counterReset(cur, prev, start, now int64) int64 {
	switch {
	case cur > 0:
		return start + 2*p.Period - now
	case prev > 0:
		return start + p.Period - now
	}
	return 0
}

// counterRetry is the earliest wait after which a request of the given cost
// is admitted, assuming no other traffic.
func (p *Params) counterRetry(cur, prev, cost, start, now int64) int64 {
	P := p.Period
	if k := p.Count - cur - cost; k >= 0 {
		// Within this window: need ceil(prev x (P-e)/P) <= k, that is
		// prev x (P-e) <= k x P, so e >= P - floor(k x P / prev).
		if k < prev {
			e := P - mulDiv(k, P, prev)
			return start + e - now
		}
		return 0
	}
	// Next window: prev becomes cur and cur 0; need cur x (P-e) <= (count-cost) x P.
	k := p.Count - cost
	e := int64(0)
	if k < cur {
		e = P - mulDiv(k, P, cur)
	}
	return start + P + e - now
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

// Sliding window log: an entry logged at time t counts while now < t + P,
// so at most count requests are admitted in any interval of length P. Only
// admitted requests are logged: a client that keeps sending while rejected
// gets back in as soon as its old requests expire.
func (p *Params) takeLog(ref *int64, rs *rings, now, cost int64, commit bool, d *Decision) {
	if rs == nil {
		p.takeLogPair(ref, now, cost, commit, d)
		return
	}
	r := rs.get(*ref)
	if r == nil {
		if !commit || cost == 0 {
			reset := int64(0)
			if cost > 0 {
				reset = p.Period // what Take would report
			}
			p.fill(d, true, p.Count-cost, reset, 0)
			return
		}
		// Not reached in the memory store, which gives every key it tracks
		// its logs when it inserts it (and charges them to its budget).
		r = &logRing{}
		*ref = rs.add(r)
	}
	r.expire(now, p.Period)
	used := r.used
	reset := int64(0)
	if r.n > 0 {
		reset = r.at(r.n-1) + p.Period - now
	}
	if used+cost > p.Count {
		// Wait until enough of the oldest entries have expired.
		oldest := r.expiring(used + cost - p.Count)
		p.fill(d, false, p.Count-used, reset, oldest+p.Period-now)
		return
	}
	if cost > 0 {
		if commit {
			r.push(now, cost, p.Count, rs.press)
		}
		reset = p.Period
	}
	p.fill(d, true, p.Count-used-cost, reset, 0)
}

// takeLogPair is the sliding window log of a key that a full memory store
// counts in its overflow sketch (see sketch), where there is no room for
// a log: the state word packs the counts of the current window (cur) and
// the one before (prev), and a request is admitted while cur + prev +
// cost stays within the count. Every entry of the log's last period lies
// in one of the two windows, so this never admits what the log would
// reject: it is stricter, never looser.
func (p *Params) takeLogPair(w *int64, now, cost int64, commit bool, d *Decision) {
	now += p.shift
	start := floorDiv(now, p.Period) * p.Period
	cur, prev := unpack(*w)
	reset := int64(0)
	switch {
	case cur+cost > 0:
		reset = start + 2*p.Period - now
	case prev > 0:
		reset = start + p.Period - now
	}
	if cur+prev+cost > p.Count {
		retry := start + p.Period - now // prev expires
		if cur+cost > p.Count {
			retry += p.Period // cur must expire too
		}
		p.fill(d, false, p.Count-cur-prev, reset, retry)
		return
	}
	if commit {
		*w = pack(cur+cost, prev)
	}
	p.fill(d, true, p.Count-cur-prev-cost, reset, 0)
}
