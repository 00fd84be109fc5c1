package storetest

import (
	"time"

	"github.com/ratekit/ratekit/core"
)

// A Step is one request of a trace and the decision it must get.
type Step struct {
	At   time.Duration // time since Epoch
	Key  string        // "" means "client"
	Cost int           // request cost; Take uses it as given (0 is a peek at the state)
	Peek bool          // use Counter.Peek instead of Take
	Want Want
}

// Want is the expected part of a decision.
type Want struct {
	Allowed    bool
	Remaining  int
	ResetAfter time.Duration
	RetryAfter time.Duration
	Delay      time.Duration
}

// A Trace is a limit and a sequence of requests with hand-computed answers.
type Trace struct {
	Name  string
	Limit core.Limit
	Steps []Step
}

func take(at time.Duration, want Want) Step { return Step{At: at, Cost: 1, Want: want} }

func takeN(at time.Duration, cost int, want Want) Step {
	return Step{At: at, Cost: cost, Want: want}
}

func peek(at time.Duration, cost int, want Want) Step {
	return Step{At: at, Cost: cost, Peek: true, Want: want}
}

func ok(remaining int, reset time.Duration) Want {
	return Want{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func no(remaining int, reset, retry time.Duration) Want {
	return Want{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

const (
	ms  = time.Millisecond
	sec = time.Second
	min = time.Minute
)

// Traces returns the hand-computed traces of the conformance suite. Every
// number in them is worked out in the comments beside it.
func Traces() []Trace {
	return []Trace{
		{
			// Burst 3, one token per second: emission 1s, tau 3s.
			Name:  "token-bucket/burst-then-refill",
			Limit: core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 10, Period: 10 * sec}, Burst: 3},
			Steps: []Step{
				take(0, ok(2, 1*sec)), // tat 1s
				take(0, ok(1, 2*sec)), // tat 2s
				take(0, ok(0, 3*sec)), // tat 3s: empty
				// next tat 4s, allowed at 4s-3s = 1s.
				take(0, no(0, 3*sec, 1*sec)),
				peek(0, 1, no(0, 3*sec, 1*sec)),
				take(1*sec, ok(0, 3*sec)), // one token back; tat 4s
				// half a token: next tat 5s, allowed at 2s.
				take(1500*ms, no(0, 2500*ms, 500*ms)),
				// cost 2 at 3s: tat 4s -> 6s, allowed at 3s exactly.
				takeN(3*sec, 2, ok(0, 3*sec)),
				take(10*sec, ok(2, 1*sec)), // full again after quiet spell
				takeN(10*sec, 2, ok(0, 3*sec)),
				// cost 3 on an empty bucket waits for all three tokens.
				takeN(10*sec, 3, no(0, 3*sec, 3*sec)),
				takeN(13*sec, 3, ok(0, 3*sec)),
				// cost 0 reports the state without counting.
				takeN(14*sec, 0, ok(1, 2*sec)),
				takeN(14*sec, 0, ok(1, 2*sec)),
			},
		},
		{
			Name:  "token-bucket/keys-are-independent",
			Limit: core.Limit{Algorithm: core.TokenBucket, Rate: core.PerSecond(1), Burst: 1},
			Steps: []Step{
				{Key: "a", Cost: 1, Want: ok(0, sec)},
				{Key: "a", Cost: 1, Want: no(0, sec, sec)},
				{Key: "b", Cost: 1, Want: ok(0, sec)},
				{Key: "a:b", Cost: 1, Want: ok(0, sec)},
			},
		},
		{
			// Policing leaky bucket: the same meter as a token bucket.
			Name:  "leaky-bucket/policing",
			Limit: core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(2), Burst: 2},
			Steps: []Step{
				take(0, ok(1, 500*ms)),
				take(0, ok(0, 1*sec)),
				take(0, no(0, 1*sec, 500*ms)),
				take(250*ms, no(0, 750*ms, 250*ms)),
				take(500*ms, ok(0, 1*sec)),
			},
		},
		{
			// Shaping: one slot per second, queue of 3, max delay 1.5s.
			Name:  "leaky-bucket/shaping",
			Limit: core.Limit{Algorithm: core.LeakyBucket, Rate: core.PerSecond(1), Burst: 3, Shaping: true, MaxDelay: 1500 * ms},
			Steps: []Step{
				// Remaining counts what the delay bound admits: the next
				// request would wait 1s, the one after it 2s > 1.5s.
				{Cost: 1, Want: Want{Allowed: true, Remaining: 1, ResetAfter: 1 * sec}},
				{Cost: 1, Want: Want{Allowed: true, Remaining: 0, ResetAfter: 2 * sec, Delay: 1 * sec}},
				// Its slot would be 2s away, beyond the 1.5s bound: retry
				// when the slot is 1.5s away, 0.5s from now.
				{Cost: 1, Want: Want{Remaining: 0, ResetAfter: 2 * sec, RetryAfter: 500 * ms}},
				{At: 500 * ms, Cost: 1, Want: Want{Allowed: true, Remaining: 0, ResetAfter: 2500 * ms, Delay: 1500 * ms}},
				// Its slot would be 2.5s away: the delay bound decides again
				// (1s), not the queue, which has room at 1s (0.5s from now).
				{At: 500 * ms, Cost: 1, Want: Want{Remaining: 0, ResetAfter: 2500 * ms, RetryAfter: 1 * sec}},
				{At: 3 * sec, Cost: 1, Want: Want{Allowed: true, Remaining: 1, ResetAfter: 1 * sec}},
			},
		},
		{
			// 3 per minute; the trace starts 50s into a minute.
			Name:  "fixed-window/boundary-double-burst",
			Limit: core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
			Steps: []Step{
				take(50*sec, ok(2, 10*sec)),
				take(55*sec, ok(1, 5*sec)),
				take(59*sec, ok(0, 1*sec)),
				take(59*sec+999*ms, no(0, 1*ms, 1*ms)),
				// The window turns at 60s: three more pass at once, so six
				// requests passed within ten seconds - the known weakness.
				take(60*sec, ok(2, 60*sec)),
				take(60*sec, ok(1, 60*sec)),
				take(60*sec, ok(0, 60*sec)),
				take(61*sec, no(0, 59*sec, 59*sec)),
				takeN(120*sec, 2, ok(1, 60*sec)),
				takeN(121*sec, 2, no(1, 59*sec, 59*sec)),
				take(121*sec, ok(0, 59*sec)),
				peek(122*sec, 1, no(0, 58*sec, 58*sec)),
				takeN(130*sec, 0, ok(0, 50*sec)),
			},
		},
		{
			// The worked example: limit 7 per minute, 5 requests in the
			// previous minute, 2 in this one; a request 30% (18s) into the
			// minute makes the current count 3, and the estimate
			// 3 + 5 x 0.7 = 6.5 <= 7: admitted.
			Name:  "sliding-window-counter/seven-per-minute",
			Limit: core.Limit{Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(7)},
			Steps: []Step{
				takeN(0, 5, ok(2, 2*min)), // previous minute: 5 (reset when both windows expire)
				// New minute, e = 0: weighted previous = 5, 2 free.
				take(60*sec, ok(1, 2*min)),
				take(60*sec, ok(0, 2*min)),
				// e = 18s: weighted previous = ceil(5 x 42/60) = ceil(3.5) = 4,
				// free = 7 - 2 - 4 = 1: admitted, estimate 6.5, remaining 0.
				take(78*sec, ok(0, 102*sec)),
				// The next one would make 4 + 3.5 = 7.5 > 7: rejected. It
				// passes once 5 x (60-e)/60 <= 7-3-1 = 3, i.e. e >= 24s:
				// retry in 84s - 78s = 6s.
				take(78*sec, no(0, 102*sec, 6*sec)),
				take(84*sec-1, no(0, 96*sec+1, 1)),
				take(84*sec, ok(0, 96*sec)),
			},
		},
		{
			// Limit 100 per hour, 84 in the previous hour, 35 in this one
			// before the request 15 minutes in: 36 + 84 x 0.75 = 99.
			Name:  "sliding-window-counter/hundred-per-hour",
			Limit: core.Limit{Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(100)},
			Steps: []Step{
				takeN(0, 84, ok(16, 2*time.Hour)),
				// 14 minutes into the next hour: ceil(84 x 46/60) = 65, 35 free.
				takeN(74*min, 35, ok(0, 106*min)),
				// 15 minutes in: ceil(84 x 45/60) = 63 exactly, 100-35-63 = 2
				// free; the request makes the estimate 99; 1 remains.
				take(75*min, ok(1, 105*min)),
				take(75*min, ok(0, 105*min)),
				// Full: wait for ceil(84 x (60-e)/60) <= 100-37-1 = 62, i.e.
				// 84 x (60-e) <= 62 x 60, e >= 60 - 44.2857...min = 15.714...min:
				// retry in 42.857...s (to the nanosecond, rounded up).
				take(75*min, no(0, 105*min, 42857142858)),
			},
		},
		{
			Name:  "sliding-window-counter/retry-into-next-window",
			Limit: core.Limit{Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(4)},
			Steps: []Step{
				takeN(30*sec, 4, ok(0, 90*sec)),
				// cur 4 already at the limit: wait into the next window, where
				// 4 x (60-e)/60 <= 3 needs e >= 15s: retry at 75s.
				take(40*sec, no(0, 80*sec, 35*sec)),
				take(75*sec, ok(0, 105*sec)),
			},
		},
		{
			// 3 per 10 seconds, exact.
			Name:  "sliding-window-log/exact",
			Limit: core.Limit{Algorithm: core.SlidingWindowLog, Rate: core.Rate{Count: 3, Period: 10 * sec}},
			Steps: []Step{
				take(0, ok(2, 10*sec)),
				take(1*sec, ok(1, 10*sec)),
				take(2*sec, ok(0, 10*sec)),
				// Rejected until the first entry (0s) leaves at 10s. Not
				// logged: rejections do not push the retry further.
				take(3*sec, no(0, 9*sec, 7*sec)),
				take(9*sec, no(0, 3*sec, 1*sec)),
				take(10*sec, ok(0, 10*sec)),
				take(10*sec, no(0, 10*sec, 1*sec)), // next to leave: the 1s entry
				// At 12s the 1s and 2s entries are gone: cost 2 fits.
				takeN(12*sec, 2, ok(0, 10*sec)),
				peek(12*sec, 3, no(0, 10*sec, 10*sec)),
				takeN(30*sec, 0, ok(3, 0)),
			},
		},
	}
}
