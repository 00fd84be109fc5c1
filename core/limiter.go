package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"
)

// FailMode says what a Limiter answers when its store fails.
type FailMode uint8

const (
	// FailOpen admits requests while the store is failing, so that an
	// outage of the limiter never takes the API down. The default.
	FailOpen FailMode = iota
	// FailClosed rejects requests while the store is failing; middleware
	// answers 503 Service Unavailable with Retry-After.
	FailClosed
)

// String returns "open" or "closed".
func (m FailMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// ParseFailMode parses "open" or "closed".
func ParseFailMode(s string) (FailMode, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("ratekit: unknown fail mode %q (valid: open, closed)", s)
}

// Outcome classifies one decision for observers.
type Outcome uint8

// The outcomes an Observer sees.
const (
	Allowed      Outcome = iota // admitted by the limit
	Denied                      // rejected by the limit
	ErrorAllowed                // the store failed; admitted (fail open)
	ErrorDenied                 // the store failed; rejected (fail closed)
	ShadowDenied                // rejected by a limit in shadow mode (WithShadow); passed
	SoftAllowed                 // admitted over the limit by soft throttling (WithSoftPercent)
)

var outcomeNames = [...]string{"allowed", "denied", "error_allowed", "error_denied", "shadow_denied", "soft_allowed"}

// String returns the outcome's metric label: "allowed", "denied",
// "error_allowed", "error_denied", "shadow_denied" or "soft_allowed".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// An Event describes one decision of one limit. It carries no client key:
// observers feed metrics and logs, where keys would leak client data and
// grow label sets without bound.
type Event struct {
	Limit    string        // the limit's name
	Outcome  Outcome       // what happened
	Decision Decision      // the limit's decision (zero on a store error)
	Err      error         // the store error, for ErrorAllowed and ErrorDenied
	Latency  time.Duration // time spent in the store; zero for a lone limit in a memory store, whose decisions are not timed
}

// An Observer receives an Event for every decision of every limit. It is
// called on the request path and must be fast and safe for concurrent use.
type Observer func(Event)

// Option configures a Limiter.
type Option func(*Limiter) error

// WithStore sets the store that keeps the counters. The default is a new
// memory store for each Limiter, so two limiters never share counters
// unless they are given the same store and limits with the same name.
func WithStore(s Store) Option {
	return func(l *Limiter) error {
		if s == nil {
			return errors.New("ratekit: WithStore(nil)")
		}
		l.store = s
		return nil
	}
}

// WithLimit adds a limit that every request must also pass, such as 1000
// per hour beside 10 per second on the same key.
func WithLimit(lim Limit) Option {
	return func(l *Limiter) error {
		l.limits = append(l.limits, lim)
		return nil
	}
}

// WithFailMode sets what happens when the store fails (default FailOpen).
func WithFailMode(m FailMode) Option {
	return func(l *Limiter) error {
		if m != FailOpen && m != FailClosed {
			return fmt.Errorf("ratekit: unknown fail mode %d", m)
		}
		l.failMode = m
		return nil
	}
}

// WithFailRetryAfter sets the Retry-After of requests rejected because the
// store failed under FailClosed (default one second).
func WithFailRetryAfter(d time.Duration) Option {
	return func(l *Limiter) error {
		if d <= 0 {
			return fmt.Errorf("ratekit: fail retry-after %s must be positive", d)
		}
		l.failRetry = d
		return nil
	}
}

// WithHeaders sets which rate-limit headers responses carry (default
// XRateLimitHeaders).
func WithHeaders(s HeaderStyle) Option {
	return func(l *Limiter) error {
		if s > NoHeaders {
			return fmt.Errorf("ratekit: unknown header style %d", s)
		}
		l.headers = s
		return nil
	}
}

// WithObserver sets the observer of every decision. Without one, no time
// is measured and nothing is called.
func WithObserver(o Observer) Option {
	return func(l *Limiter) error { l.observer = o; return nil }
}

// WithShadow puts the limiter in shadow mode, for rolling out a new limit
// safely: it counts requests as usual, but a request that a limit would
// reject is admitted instead, with Decision.Shadow set and the rate-limit
// headers of an admission whose Remaining is 0. Observers see such
// requests as ShadowDenied, so a dashboard shows what the limit would do
// before it is enforced. A request that the store failing under
// FailClosed would reject is admitted too; observers see that failure as
// ErrorDenied, as without shadow mode, and the error is still returned.
// Shadow decisions are never delayed by a shaping leaky bucket.
func WithShadow() Option {
	return func(l *Limiter) error { l.shadow = true; return nil }
}

// WithSoftPercent turns on soft throttling: each limit admits up to
// percent more requests than its count (and burst), rounded down, before
// it rejects. A request admitted beyond the limit itself has
// Decision.Soft set, is reported to observers as SoftAllowed and gets the
// header X-Ratelimit-Soft, so the application can degrade its answer or
// warn the client before hard rejections start. Decisions report the
// limit itself as Limit, with Remaining 0 while in the soft zone. The
// counters are the limit's own (same ID), so turning soft throttling on or
// off keeps the counts. percent must be between 0 (off) and 1000.
func WithSoftPercent(percent int) Option {
	return func(l *Limiter) error {
		if percent < 0 || percent > 1000 {
			return fmt.Errorf("%w: soft percent %d must be between 0 and 1000", ErrInvalidLimit, percent)
		}
		l.softPct = percent
		return nil
	}
}

// WithLogger sets the logger for store failures (default slog.Default()).
// A failure episode is logged when it starts and, with the count of failed
// decisions, when the store answers again: never once per request.
func WithLogger(log *slog.Logger) Option {
	return func(l *Limiter) error { l.log = log; return nil }
}

// A Limiter decides requests against one or more limits kept in a store.
// It is safe for concurrent use.
type Limiter struct {
	limits    []Limit
	counters  []Counter
	capacity  int // the smallest capacity of the limits
	store     Store
	failMode  FailMode
	failRetry time.Duration
	headers   HeaderStyle
	observer  Observer
	log       *slog.Logger
	policyHdr []string // RateLimit-Policy, precomputed
	shadow    bool
	softPct   int
	softExtra []int         // per limit: the capacity soft throttling adds
	limitHdr  []countValue  // per limit: X-Ratelimit-Limit, precomputed
	window    time.Duration // of the first limit, for Check.Block

	failing  atomic.Bool
	failures atomic.Int64

	// With one limit in a memory store, TakeN calls the memory counter
	// directly: a memory store never fails, and the decision is written in
	// place instead of copied out of an interface call. Such decisions are
	// not timed: reading the clock twice would cost more than the
	// decision itself.
	memBucket *memCounter[int64]
	memWindow *memCounter[windowState]
	memLog    *memCounter[*logRing]
}

// NewLimiter returns a limiter for the given limit (and any added with
// WithLimit), after validating every limit and option.
func NewLimiter(lim Limit, opts ...Option) (*Limiter, error) {
	l := &Limiter{limits: []Limit{lim}, failRetry: time.Second}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.store == nil {
		s, err := NewMemoryStore()
		if err != nil {
			return nil, err
		}
		l.store = s
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	seen := map[string]bool{}
	for i, lim := range l.limits {
		p, err := compile(lim)
		if err != nil {
			return nil, err
		}
		if seen[p.id] {
			return nil, fmt.Errorf("%w: two limits with the ID %q on one limiter", ErrInvalidLimit, p.id)
		}
		seen[p.id] = true
		bound, extra, err := softLimit(p, l.softPct)
		if err != nil {
			return nil, err
		}
		c, err := l.store.Bind(bound.Limit)
		if err != nil {
			return nil, fmt.Errorf("ratekit: binding limit %q: %w", p.Name, err)
		}
		l.limits[i] = p.Limit
		l.counters = append(l.counters, c)
		l.softExtra = append(l.softExtra, extra)
		l.limitHdr = append(l.limitHdr, countValue{int(p.capacity), []string{strconv.FormatInt(p.capacity, 10)}})
		if i == 0 {
			l.window = p.windowLen
		}
		if i == 0 || int(bound.capacity) < l.capacity {
			l.capacity = int(bound.capacity)
		}
	}
	l.policyHdr = []string{policyHeader(l.limits)}
	if len(l.counters) == 1 {
		switch c := l.counters[0].(type) {
		case *memCounter[int64]:
			l.memBucket = c
		case *memCounter[windowState]:
			l.memWindow = c
		case *memCounter[*logRing]:
			l.memLog = c
		}
	}
	return l, nil
}

// Must returns l, or panics if err is not nil. It is meant for limiters
// built from constants in main, as regexp.MustCompile is.
func Must(l *Limiter, err error) *Limiter {
	if err != nil {
		panic(err)
	}
	return l
}

// Limits returns the limiter's limits, with defaults filled in.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), l.limits...) }

// Take decides a request of cost 1 for key. See TakeN.
func (l *Limiter) Take(ctx context.Context, key string) (Decision, error) {
	return l.TakeN(ctx, key, 1)
}

// TakeN decides a request of the given cost for key against every limit
// and returns the decision of the most restrictive one.
//
// The request is admitted only if every limit admits it. With one limit
// the decision is a single atomic store call. With several, each limit is
// first asked without counting (Peek); if any would reject, the request is
// rejected with the longest RetryAfter and counted nowhere, so the
// RetryAfter is true; otherwise every limit counts it. (A concurrent
// request on the same key may still fill a later limit between the two
// steps; then earlier limits have counted a rejected request.)
//
// A non-nil error means the store failed, the key is empty (an error
// wrapping ErrMissingKey) or the cost is out of range (ErrCostExceedsLimit).
// After a store failure the decision follows the fail mode: under FailOpen
// it is admitted, under FailClosed rejected with RetryAfter set; after the
// other errors it is the zero Decision, a rejection. A rejection by a limit
// is not an error. Rejection maps every case to a status and body.
func (l *Limiter) TakeN(ctx context.Context, key string, cost int) (d Decision, err error) {
	if cost < 0 || cost > l.capacity {
		return Decision{}, costError(cost, l.capacity)
	}
	if key == "" {
		return Decision{}, errEmptyKey
	}
	switch {
	case l.memBucket != nil:
		err = l.memBucket.decide(key, cost, true, &d)
	case l.memWindow != nil:
		err = l.memWindow.decide(key, cost, true, &d)
	case l.memLog != nil:
		err = l.memLog.decide(key, cost, true, &d)
	default:
		d, err = l.takeStore(ctx, key, cost)
		if l.shadow && !NoDecision(err) {
			d = shadowed(d)
		}
		return d, err
	}
	if l.softPct != 0 {
		l.soften(0, &d)
	}
	if l.observer != nil && err == nil {
		l.observer(Event{Limit: l.limits[0].Name, Outcome: l.outcome(d), Decision: d})
	}
	if l.shadow && err == nil {
		d = shadowed(d)
	}
	return d, err
}

func costError(cost, capacity int) error {
	return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, cost, capacity)
}

// outcome classifies a decision of a limit for observers.
func (l *Limiter) outcome(d Decision) Outcome {
	switch {
	case !d.Allowed && l.shadow:
		return ShadowDenied
	case !d.Allowed:
		return Denied
	case d.Soft:
		return SoftAllowed
	}
	return Allowed
}

// shadowed turns a decision of shadow mode into an admission, without the
// delay of a shaping leaky bucket.
func shadowed(d Decision) Decision {
	d.Delay = 0
	if !d.Allowed {
		d.Allowed, d.Shadow = true, true
		d.Remaining, d.RetryAfter = 0, 0
	}
	return d
}

// softLimit returns the limit that soft throttling binds for p: its count
// and burst raised by percent, rounded down; and the capacity it adds.
func softLimit(p *policy, percent int) (*policy, int, error) {
	if percent == 0 {
		return p, 0, nil
	}
	l := p.Limit
	l.Rate.Count += int(int64(l.Rate.Count) * int64(percent) / 100)
	if l.Burst > 0 {
		l.Burst += int(int64(l.Burst) * int64(percent) / 100)
	}
	bound, err := compile(l)
	if err != nil {
		return nil, 0, fmt.Errorf("limit %q with soft percent %d: %w", p.Name, percent, err)
	}
	return bound, int(bound.capacity - p.capacity), nil
}

// soften restates a decision of the raised limit i in terms of the limit
// itself: Limit is its capacity, and an admission beyond it is Soft.
func (l *Limiter) soften(i int, d *Decision) {
	extra := l.softExtra[i]
	if extra == 0 || d.Limit == 0 {
		return
	}
	d.Limit -= extra
	if d.Remaining < extra {
		d.Soft = d.Allowed
		d.Remaining = 0
	} else {
		d.Remaining -= extra
	}
}

// takeStore is TakeN through the Store interface.
func (l *Limiter) takeStore(ctx context.Context, key string, cost int) (Decision, error) {
	if len(l.counters) == 1 {
		if l.observer != nil {
			return l.decide(ctx, 0, key, cost, true)
		}
		d, err := l.counters[0].Take(ctx, key, cost)
		if err != nil {
			return l.storeFailed(0, err, time.Time{}, false)
		}
		if l.failing.Load() {
			l.recovered()
		}
		if l.softPct != 0 {
			l.soften(0, &d)
		}
		return d, nil
	}
	best, err := l.peekN(ctx, key, cost)
	if err != nil || !best.Allowed {
		return best, err
	}
	var delay time.Duration
	soft := false
	for i := range l.counters {
		d, err := l.decide(ctx, i, key, cost, true)
		if err != nil {
			return d, err
		}
		if !d.Allowed {
			return d, nil
		}
		delay = max(delay, d.Delay)
		soft = soft || d.Soft
		if i == 0 || d.moreRestrictive(best) {
			best = d
		}
	}
	best.Delay, best.Soft = delay, soft
	return best, nil
}

// errEmptyKey rejects an empty key: it would put every request without a
// key into one bucket shared by everybody.
var errEmptyKey = fmt.Errorf("%w: the key is empty", ErrMissingKey)

// decide asks limit i, applying the fail mode and telling the observer.
func (l *Limiter) decide(ctx context.Context, i int, key string, cost int, commit bool) (Decision, error) {
	var start time.Time
	if l.observer != nil && commit {
		start = time.Now()
	}
	var d Decision
	var err error
	if commit {
		d, err = l.counters[i].Take(ctx, key, cost)
	} else {
		d, err = l.counters[i].Peek(ctx, key, cost)
	}
	if err != nil {
		return l.storeFailed(i, err, start, commit)
	}
	if l.failing.Load() {
		l.recovered()
	}
	if l.softPct != 0 {
		l.soften(i, &d)
	}
	if l.observer != nil && (commit || !d.Allowed) {
		e := Event{Limit: l.limits[i].Name, Outcome: l.outcome(d), Decision: d}
		if commit {
			e.Latency = time.Since(start)
		}
		l.observer(e)
	}
	return d, nil
}

func (l *Limiter) storeFailed(i int, err error, start time.Time, observe bool) (Decision, error) {
	err = fmt.Errorf("ratekit: limit %q: %w", l.limits[i].Name, err)
	if errors.Is(err, ErrCostExceedsLimit) {
		return Decision{}, err
	}
	l.failures.Add(1)
	if !l.failing.Swap(true) {
		l.log.Warn("ratekit: store failing", "fail_mode", l.failMode.String(), "error", err)
	}
	d := Decision{Allowed: true, Name: l.limits[i].Name}
	outcome := ErrorAllowed
	if l.failMode == FailClosed {
		d.Allowed, d.RetryAfter = false, l.failRetry
		outcome = ErrorDenied
	}
	if l.observer != nil && observe {
		l.observer(Event{Limit: d.Name, Outcome: outcome, Err: err, Latency: time.Since(start)})
	}
	return d, err
}

func (l *Limiter) recovered() {
	if l.failing.Swap(false) {
		l.log.Info("ratekit: store answering again", "failed_decisions", l.failures.Swap(0))
	}
}

// Hold waits for d.Delay, the slot of a request admitted by a shaping leaky
// bucket, and returns nil; it returns ctx.Err() as soon as ctx is done.
// Middleware calls it before passing an admitted request on.
func Hold(ctx context.Context, d Decision) error {
	if d.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
