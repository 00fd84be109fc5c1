package core

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate is Count requests per Period.
type Rate struct {
	Count  int
	Period time.Duration
}

// PerSecond returns a rate of n requests per second.
func PerSecond(n int) Rate { return Rate{Count: n, Period: time.Second} }

// PerMinute returns a rate of n requests per minute.
func PerMinute(n int) Rate { return Rate{Count: n, Period: time.Minute} }

// PerHour returns a rate of n requests per hour.
func PerHour(n int) Rate { return Rate{Count: n, Period: time.Hour} }

// PerDay returns a rate of n requests per day (24 hours).
func PerDay(n int) Rate { return Rate{Count: n, Period: 24 * time.Hour} }

// String formats the rate as "100/1m0s".
func (r Rate) String() string { return strconv.Itoa(r.Count) + "/" + r.Period.String() }

// MaxCount is the largest Rate.Count and Burst a limit accepts.
const MaxCount = math.MaxInt32

// MaxPeriod is the longest Rate.Period a limit accepts.
const MaxPeriod = 366 * 24 * time.Hour

// A Limit is one rate-limiting policy: an algorithm and a rate, plus the
// burst capacity for the bucket algorithms.
//
// Limits are values; NewLimiter and Store.Bind validate them, so a bad
// limit is an error at construction, never a panic at request time.
type Limit struct {
	// Name identifies the limit: in headers (the IETF RateLimit policy
	// name), in metrics, and in shared stores, where two servers that
	// configure limits with the same name and algorithm share counters.
	// It may hold letters, digits and "-_.:/", at most 64 bytes. Empty
	// means a name derived from the rate, such as "100-per-1m0s".
	Name string

	// Algorithm selects the counting algorithm; zero means DefaultAlgorithm.
	Algorithm Algorithm

	// Rate is the number of requests allowed per period.
	Rate Rate

	// Burst is the capacity of a token or leaky bucket: how many requests
	// may pass at once after a quiet spell. Zero means Rate.Count. It is an
	// error to set it for the window algorithms, which have no burst.
	Burst int

	// Shaping switches a leaky bucket from policing (reject when the queue
	// is full) to shaping: a request that finds room in the queue is
	// admitted with Decision.Delay set to the time it must wait for its
	// slot, and the middleware holds it that long.
	Shaping bool

	// MaxDelay bounds the delay of a shaping leaky bucket: a request whose
	// slot is further away than MaxDelay is rejected. Zero means no bound
	// other than the queue capacity.
	MaxDelay time.Duration
}

// Validate reports whether the limit is usable, with an error that names
// the offending field and value.
func (l Limit) Validate() error {
	_, err := compile(l)
	return err
}

// ID returns the identity of the limit's counters: its name and
// algorithm. Limits with the same ID share counters in a shared store.
func (l Limit) ID() string {
	p, err := compile(l)
	if err != nil {
		return ""
	}
	return p.id
}

// maxRefill bounds the time an empty bucket takes to refill, so that the
// bucket arithmetic on nanosecond timestamps cannot overflow.
const maxRefill = int64(100 * 365 * 24 * time.Hour)

// ErrInvalidLimit is wrapped by every error that reports a bad Limit.
var ErrInvalidLimit = errors.New("ratekit: invalid limit")

// policy is a validated limit with its derived values, in nanoseconds.
type policy struct {
	Limit
	count    int64 // Rate.Count
	period   int64 // Rate.Period
	burst    int64 // capacity of a bucket; Rate.Count for windows
	capacity int64 // the most requests admitted at once: burst, or fewer under a shaping MaxDelay
	emission int64 // bucket: time to refill one token
	tau      int64 // bucket: burst * emission, time to refill from empty
	maxDelay int64
	id       string

	windowLen time.Duration // see window
}

func limitError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidLimit}, args...)...)
}

func compile(l Limit) (*policy, error) {
	if l.Algorithm == 0 {
		l.Algorithm = DefaultAlgorithm
	}
	if !l.Algorithm.valid() {
		return nil, limitError("unknown algorithm %d", l.Algorithm)
	}
	if l.Rate.Count <= 0 || l.Rate.Count > MaxCount {
		return nil, limitError("rate count %d must be between 1 and %d", l.Rate.Count, MaxCount)
	}
	if l.Rate.Period <= 0 || l.Rate.Period > MaxPeriod {
		return nil, limitError("rate period %s must be positive and at most %s", l.Rate.Period, MaxPeriod)
	}
	if l.Burst < 0 || l.Burst > MaxCount {
		return nil, limitError("burst %d must be between 0 (meaning the rate count) and %d", l.Burst, MaxCount)
	}
	if l.Burst != 0 && !l.Algorithm.bucket() {
		return nil, limitError("burst applies to token-bucket and leaky-bucket, not %s", l.Algorithm)
	}
	if l.Shaping && l.Algorithm != LeakyBucket {
		return nil, limitError("shaping applies to leaky-bucket, not %s", l.Algorithm)
	}
	if l.MaxDelay < 0 {
		return nil, limitError("max delay %s must not be negative", l.MaxDelay)
	}
	if l.MaxDelay != 0 && !l.Shaping {
		return nil, limitError("max delay applies only to a shaping leaky-bucket")
	}
	if l.Name == "" {
		l.Name = strconv.Itoa(l.Rate.Count) + "-per-" + strings.ReplaceAll(l.Rate.Period.String(), "µ", "u")
	} else if err := checkName(l.Name); err != nil {
		return nil, err
	}
	p := &policy{
		Limit:    l,
		count:    int64(l.Rate.Count),
		period:   int64(l.Rate.Period),
		burst:    int64(l.Rate.Count),
		maxDelay: int64(l.MaxDelay),
		id:       l.Name + ":" + l.Algorithm.String(),
	}
	if l.Algorithm.bucket() {
		if l.Burst > 0 {
			p.burst = int64(l.Burst)
		}
		p.emission = p.period / p.count
		if p.emission == 0 {
			return nil, limitError("rate %s is faster than one request per nanosecond", l.Rate)
		}
		if p.burst > maxRefill/p.emission {
			return nil, limitError("burst %d at rate %s takes longer than %s to refill", p.burst, l.Rate, time.Duration(maxRefill))
		}
		if rem := p.period % p.count; rem*100 > p.period-rem {
			return nil, limitError("rate %s cannot be kept within 1%% in whole nanoseconds per request", l.Rate)
		}
		p.tau = p.burst * p.emission
	}
	p.capacity = p.burst
	if p.Shaping && p.maxDelay > 0 {
		p.capacity = min(p.burst, p.maxDelay/p.emission+1)
	}
	p.windowLen = p.window()
	return p, nil
}

func checkName(name string) error {
	if len(name) > 64 {
		return limitError("name %.20q... is longer than 64 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':' || c == '/':
		default:
			return limitError("name %q: character %q not allowed (use letters, digits and -_.:/)", name, c)
		}
	}
	return nil
}

// window returns the period a decision's counts refer to, used as the
// IETF "w" parameter: the period for window algorithms, the time to refill
// from empty for buckets.
func (p *policy) window() time.Duration {
	if p.Algorithm.bucket() {
		return time.Duration(p.tau)
	}
	return time.Duration(p.period)
}
