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

func (r Rate) text() string { return strconv.Itoa(r.Count) + "/" + r.Period.String() }

// MaxCount is the largest Rate.Count and Burst a limit accepts.
const MaxCount = math.MaxInt32

// MaxPeriod is the longest Rate.Period a limit accepts.
const MaxPeriod = 366 * 24 * time.Hour

// A Limit is one rate-limiting policy: an algorithm and a rate, plus the
// burst capacity of the bucket algorithms.
//
// Limits are values; NewLimiter validates them, so a bad limit is an error
// at construction, never a panic at request time. A Rate.Count of 0 is a
// limit that blocks every request (a block-list entry), with a RetryAfter
// of one period.
type Limit struct {
	// Name identifies the limit: in headers (the IETF RateLimit policy
	// name), in metrics, and in stores, where limits with the same name
	// and algorithm share counters. It may hold ASCII letters, digits and
	// NameSymbols ("-_.:/@,*"), at most 64 bytes. Empty means a name
	// derived from the rate, such as "100-per-1m0s".
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

// ErrInvalidLimit is wrapped by every error that reports a bad Limit.
var ErrInvalidLimit = errors.New("ratekit: invalid limit")

// Algorithm selects how a limit counts requests. The zero value means
// DefaultAlgorithm.
type Algorithm uint8

// The five algorithms. Each has a stable name, returned by String and
// accepted by ParseAlgorithm, for flags and configuration files.
const (
	// TokenBucket keeps a bucket of Burst tokens refilled continuously at
	// Rate; a request takes cost tokens. It allows bursts up to Burst and a
	// long-run average of Rate. Name: "token-bucket".
	TokenBucket Algorithm = iota + 1

	// LeakyBucket keeps a queue of capacity Burst that drains at Rate. In
	// policing mode (the default) a request is rejected when the queue is
	// full; as a meter this is the same as a token bucket (the GCRA). In
	// shaping mode (Limit.Shaping) an admitted request is delayed until its
	// slot, so requests leave at a steady Rate. Name: "leaky-bucket".
	LeakyBucket

	// FixedWindow counts requests in windows aligned to multiples of the
	// period since the Unix epoch (minute boundaries for a per-minute
	// limit). Cheapest, but up to 2N requests can pass within one period
	// around a window boundary. Name: "fixed-window".
	FixedWindow

	// SlidingWindowLog remembers the time of every admitted request and
	// admits at most N in any interval of one period: exact, with memory per
	// key proportional to N. Name: "sliding-window-log".
	SlidingWindowLog

	// SlidingWindowCounter estimates the count over the last period as
	// current + previous x (1 - elapsed/period), from two fixed-window
	// counters. Smooth, O(1) memory, but an estimate: up to about twice N
	// can pass in one period when the previous window's requests came
	// late. Name: "sliding-window-counter".
	SlidingWindowCounter
)

// DefaultAlgorithm is used by a Limit whose Algorithm is zero.
const DefaultAlgorithm = SlidingWindowCounter

var algorithmNames = [...]string{
	TokenBucket:          "token-bucket",
	LeakyBucket:          "leaky-bucket",
	FixedWindow:          "fixed-window",
	SlidingWindowLog:     "sliding-window-log",
	SlidingWindowCounter: "sliding-window-counter",
}

// String returns the algorithm's name, such as "token-bucket".
func (a Algorithm) String() string {
	if a == 0 {
		return DefaultAlgorithm.String()
	}
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm returns the algorithm with the given name. Names are
// matched case-insensitively; underscores are accepted for dashes. The
// error of an unknown name lists the valid ones.
func ParseAlgorithm(name string) (Algorithm, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "_", "-")
	for a := TokenBucket; a <= SlidingWindowCounter; a++ {
		if algorithmNames[a] == n {
			return a, nil
		}
	}
	return 0, fmt.Errorf("ratekit: unknown algorithm %q (valid: %s)", name, strings.Join(algorithmNames[1:], ", "))
}

func (a Algorithm) valid() bool { return a >= TokenBucket && a <= SlidingWindowCounter }

// bucket reports whether the algorithm has a burst capacity.
func (a Algorithm) bucket() bool { return a == TokenBucket || a == LeakyBucket }

// Params are a validated limit's numbers, derived once by Limit.Params,
// with every time a whole number of Unit. Both stores run the algorithms
// on them: the memory store in nanoseconds; a store whose clock is coarser,
// or whose arithmetic is not 64-bit integer (Redis scripts compute in
// doubles), in a larger unit so that its numbers stay exact. A store that
// keeps its state elsewhere implements the arithmetic of the algorithms on
// these numbers and must pass the conformance suite in core/storetest.
type Params struct {
	ID        string    // identity of the limit's counters: name and algorithm
	Name      string    // the limit's name, with the default filled in
	Algorithm Algorithm // with the default filled in
	Shaping   bool      // a shaping leaky bucket
	Block     bool      // a limit of zero requests: rejects everything, keeps no state

	Count    int64 // requests per period (Rate.Count)
	Burst    int64 // the capacity of a bucket; Count for the window algorithms
	Capacity int64 // the most requests admitted at once: Burst, or fewer under a shaping MaxDelay (Decision.Quota)

	Unit     time.Duration // the unit of the times below
	Period   int64         // Rate.Period
	Emission int64         // bucket: the time to refill one request, Period / Count in whole units
	Tau      int64         // bucket: the time to refill from empty, Burst x Emission
	MaxDelay int64         // shaping delay bound, rounded up to whole units; 0 means none

	Window time.Duration // the span the counts refer to (Decision.Window): the period, or a bucket's Tau

	// shift is added to a time before it is cut into windows: 0 for times
	// since the Unix epoch; the memory store, whose times count from an
	// origin of its own, sets it so that its windows still start at
	// multiples of the period since the epoch.
	shift int64
}

// maxRefill bounds the time an empty bucket takes to refill, so that the
// bucket arithmetic on nanosecond timestamps cannot overflow.
const maxRefill = int64(100 * 365 * 24 * time.Hour)

func limitError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidLimit}, args...)...)
}

// Params validates the limit and returns its numbers with times in whole
// multiples of unit. Errors wrap ErrInvalidLimit and name the offending
// field and value: beside a bad field, a period that is not a whole number
// of units, and a bucket rate that whole units cannot keep within 1% (such
// as more than 10,000 requests per second in microseconds).
func (l Limit) Params(unit time.Duration) (Params, error) {
	if unit <= 0 {
		return Params{}, limitError("time unit %s must be positive", unit)
	}
	if l.Algorithm == 0 {
		l.Algorithm = DefaultAlgorithm
	}
	switch {
	case !l.Algorithm.valid():
		return Params{}, limitError("unknown algorithm %d", l.Algorithm)
	case l.Rate.Count < 0 || l.Rate.Count > MaxCount:
		return Params{}, limitError("rate count %d must be between 0 (blocks every request) and %d", l.Rate.Count, MaxCount)
	case l.Rate.Period <= 0 || l.Rate.Period > MaxPeriod:
		return Params{}, limitError("rate period %s must be positive and at most %s", l.Rate.Period, MaxPeriod)
	case l.Burst < 0 || l.Burst > MaxCount:
		return Params{}, limitError("burst %d must be between 0 (meaning the rate count) and %d", l.Burst, MaxCount)
	case l.Burst != 0 && !l.Algorithm.bucket():
		return Params{}, limitError("burst applies to token-bucket and leaky-bucket, not %s", l.Algorithm)
	case l.Burst != 0 && l.Rate.Count == 0:
		return Params{}, limitError("burst %d on a limit of 0 requests, which blocks every request", l.Burst)
	case l.Shaping && l.Algorithm != LeakyBucket:
		return Params{}, limitError("shaping applies to leaky-bucket, not %s", l.Algorithm)
	case l.MaxDelay < 0:
		return Params{}, limitError("max delay %s must not be negative", l.MaxDelay)
	case l.MaxDelay != 0 && !l.Shaping:
		return Params{}, limitError("max delay applies only to a shaping leaky-bucket")
	}
	if l.Name == "" {
		l.Name = strconv.Itoa(l.Rate.Count) + "-per-" + strings.ReplaceAll(l.Rate.Period.String(), "µ", "u")
	} else if err := checkName(l.Name); err != nil {
		return Params{}, err
	}
	u := int64(unit)
	if int64(l.Rate.Period)%u != 0 {
		return Params{}, limitError("period %s is not a whole number of %s", l.Rate.Period, unit)
	}
	p := Params{
		ID:        l.Name + ":" + l.Algorithm.String(),
		Name:      l.Name,
		Algorithm: l.Algorithm,
		Shaping:   l.Shaping,
		Block:     l.Rate.Count == 0,
		Count:     int64(l.Rate.Count),
		Burst:     int64(l.Rate.Count),
		Unit:      unit,
		Period:    int64(l.Rate.Period) / u,
		Window:    l.Rate.Period,
	}
	if l.MaxDelay > 0 {
		p.MaxDelay = (int64(l.MaxDelay)-1)/u + 1
	}
	if p.Block || !l.Algorithm.bucket() {
		p.Capacity = p.Burst
		return p, nil
	}
	if l.Burst > 0 {
		p.Burst = int64(l.Burst)
	}
	p.Emission = p.Period / p.Count
	if p.Emission == 0 {
		return Params{}, limitError("rate %s is faster than one request per %s", l.Rate.text(), unit)
	}
	if rem := p.Period % p.Count; rem*100 > p.Period-rem {
		return Params{}, limitError("rate %s cannot be kept within 1%% in whole %s per request", l.Rate.text(), unit)
	}
	if p.Burst > maxRefill/(p.Emission*u) {
		return Params{}, limitError("burst %d at rate %s takes longer than %s to refill", p.Burst, l.Rate.text(), time.Duration(maxRefill))
	}
	p.Tau = p.Burst * p.Emission
	p.Window = time.Duration(p.Tau * u)
	p.Capacity = p.Burst
	if p.Shaping && p.MaxDelay > 0 {
		p.Capacity = min(p.Burst, p.MaxDelay/p.Emission+1)
	}
	return p, nil
}

// NameSymbols are the characters a limit name may hold besides ASCII
// letters and digits.
const NameSymbols = "-_.:/@,*"

func checkName(name string) error {
	if len(name) > 64 {
		return limitError("name %.20q... is longer than 64 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte(NameSymbols, c) >= 0:
		default:
			return limitError("name %q: character %q not allowed (use letters, digits and %s)", name, c, NameSymbols)
		}
	}
	return nil
}

// raise returns p with its count and burst raised by percent, rounded
// down: the limit that soft throttling binds. Its counters are p's (same
// ID).
func (l Limit) raise(percent int) Limit {
	l.Rate.Count += int(int64(l.Rate.Count) * int64(percent) / 100)
	if l.Burst > 0 {
		l.Burst += int(int64(l.Burst) * int64(percent) / 100)
	}
	return l
}
