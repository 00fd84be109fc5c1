package redisstore

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/unixtime"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
)

// MaxLogCount is the largest count of a sliding-window-log limit the
// store accepts. The log keeps a sorted-set member of about 100 bytes per
// admitted request in the period, per client; beyond this, use the
// sliding window counter, which keeps one number.
const MaxLogCount = 10_000

// maxClockSpan bounds periods and refill times under a test clock, in
// nanoseconds: the scripts' doubles hold integers exactly below 2^53, and
// times relative to the clock's base must stay well inside that.
const maxClockSpan = 1 << 50

// Bind returns the counter of a limiter's limits: each decision of the
// counter is one script over all of them, which first decides the request
// by every limit without writing anything, and only when every limit
// admits it counts the request in every limit's state. So a request is
// counted by all of a limiter's limits or by none, and concurrent
// decisions on one client never admit more than any limit allows.
//
// Limits with the same name, algorithm and period share their counters,
// on this server and every other server that uses the same Redis and
// prefix, whatever the other limits bound with them. A limit whose count
// or burst changed keeps its counts (a bucket the time it needs to
// refill, capped at the new limit's); a changed period starts afresh.
//
// A refund (core.TakeAll gives back what one limiter counted when another
// limiter's check rejects the request) is a decision too: a bucket gets
// the request's tokens back, a fixed window or sliding window counter its
// count while the window it was counted in is current (the counter also
// while it is the previous window), a sliding window log loses the
// request's entries. The time Take returns, which the refund takes back,
// is Redis's own (TIME, in microseconds), so nothing is lost converting
// it. A limit of 0 requests (a block-list entry) rejects every request
// with a RetryAfter of one period and keeps no state: it has no Redis
// key, and a counter whose limits all block never sends anything to
// Redis. Bound with other limits, it makes the decision count nothing.
//
// Beside the errors of core.Limit.Params, Bind rejects no limits or more
// than core.MaxLimits, two limits with the same name and algorithm, a
// bucket rate that whole microseconds cannot express within 1% (faster
// than about 10,000 requests per second), a period that is not a whole
// number of microseconds, a window period under a millisecond, a
// sliding-window-log limit whose count exceeds MaxLogCount, and, about
// once in tens of billions of pairs of limits, a limit whose key tag is
// another's (rename one).
func (s *Store) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.bind(limits)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Store) bind(ls []core.Limit) (*counter, error) {
	if err := limits.CheckCount(len(ls)); err != nil {
		return nil, err
	}
	c := &counter{store: s, limits: ls, params: make([]core.Params, len(ls)), capacity: math.MaxInt64, take: argOne}
	spec := s.specHead
	for i, l := range ls {
		p, err := s.params(l)
		if err != nil {
			return nil, err
		}
		if err := limits.CheckDistinct(c.params[:i], &p); err != nil {
			return nil, err
		}
		c.params[i] = p
		if p.Block {
			c.take = argZero // nothing is ever admitted, so nothing counted
			continue
		}
		tag, err := s.tags.Limit(&p)
		if err != nil {
			return nil, err
		}
		c.capacity = min(c.capacity, p.Capacity)
		c.tags = append(c.tags, tag)
		spec += s.limitSpec(&p)
	}
	c.keyLen = len(s.prefix) + keys.HashLen + 2 + keys.TagLen
	c.spec = spec
	return c, nil
}

// params validates l and returns its numbers in the store's unit.
func (s *Store) params(l core.Limit) (core.Params, error) {
	p, err := l.Params(s.unit)
	if err != nil {
		return p, fmt.Errorf("redisstore: %w", err)
	}
	if p.Algorithm == core.SlidingWindowLog && p.Count > MaxLogCount {
		return p, fmt.Errorf("redisstore: %w: sliding-window-log keeps one entry per request; a count of %d is more than %d (use sliding-window-counter)",
			core.ErrInvalidLimit, p.Count, MaxLogCount)
	}
	if err := limits.CheckWindow(&p); err != nil {
		return p, err
	}
	if s.clock != nil && !p.Block && max(p.Period, p.Tau) > maxClockSpan {
		return p, fmt.Errorf("redisstore: %w: under WithClock, periods and refill times are limited to %s",
			core.ErrInvalidLimit, time.Duration(maxClockSpan))
	}
	return p, nil
}

// algorithmNumber is the script's number for each algorithm.
var algorithmNumber = [...]int64{
	core.TokenBucket:          1,
	core.LeakyBucket:          2,
	core.FixedWindow:          3,
	core.SlidingWindowLog:     4,
	core.SlidingWindowCounter: 5,
}

// limitSpec returns the part of a spec (decide.lua) that tells limit p:
// nine integers, each after a space.
func (s *Store) limitSpec(p *core.Params) string {
	phase := int64(0)
	if s.clock != nil {
		// The scripts count windows from base; shift by base modulo the
		// period so windows stay aligned to the Unix epoch.
		phase = unixtime.Mod(s.base, p.Period*int64(s.unit)) / int64(s.unit)
	}
	shaping := int64(0)
	if p.Shaping {
		shaping = 1
	}
	var b []byte
	for _, n := range [...]int64{algorithmNumber[p.Algorithm], p.Count, p.Period, p.Burst, p.Emission, p.Tau, shaping, p.MaxDelay, phase} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, n, 10)
	}
	return string(b)
}
