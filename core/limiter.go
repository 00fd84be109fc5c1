package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/internal/episode"
)

// failRetry is the RetryAfter of a rejection under WithFailClosed.
const failRetry = time.Second

// Outcome classifies one decision of one limit for observers.
type Outcome uint8

// The outcomes an observer sees.
const (
	Allowed        Outcome = iota // admitted by the limit: "allowed"
	Denied                        // rejected by the limit: "denied"
	ErrorAllowed                  // the store failed; admitted (fail open, the default): "error_allowed"
	ErrorDenied                   // the store failed; rejected (WithFailClosed): "error_denied"
	ShadowDenied                  // rejected by a limit in shadow mode (WithShadow); passed: "shadow_denied"
	SoftAllowed                   // admitted over the limit by soft throttling (WithSoftPercent): "soft_allowed"
	ElasticAllowed                // admitted over the limit by elastic throttling (WithElastic): "elastic_allowed"
	MissingKey                    // no key to decide by (ErrMissingKey; middleware answers 400); no limit decided: "missing_key"
)

var outcomeNames = [...]string{"allowed", "denied", "error_allowed", "error_denied", "shadow_denied", "soft_allowed", "elastic_allowed", "missing_key"}

// String returns the outcome's metric label, such as "shadow_denied".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome_" + strconv.Itoa(int(o))
}

// An Event describes the decision of one limit on one request, or a
// request that had no key to be decided by (Outcome MissingKey: an empty
// key given to Take or TakeAll, or a plan function's error wrapping
// ErrMissingKey), which middleware answers 400. A MissingKey event names
// the limiter's first limit (none, "", for a plan limiter, whose limit
// depends on the key), has no decision but that Name, and is not
// Decisive: no limit decided the request. An Event carries no client key:
// observers feed metrics and logs, where keys would leak client data and
// grow label sets without bound.
type Event struct {
	Limit    string        // the limit's name
	Outcome  Outcome       // what happened
	Decision Decision      // the limit's decision (its Name and Quota only on a store error)
	Err      error         // the store error, for ErrorAllowed and ErrorDenied
	Latency  time.Duration // time spent in the store for this decision, memory store included

	// Decisive marks the event of the limit whose decision is the
	// request's (the most restrictive, see TakeAll): each Take or TakeAll
	// that decides a request emits exactly one such event, so counting
	// them counts requests, where counting every event counts decisions,
	// one per limit. (The one event is seen by the observers of the
	// limiter that holds that limit.)
	Decisive bool
}

// An Option configures a Limiter.
type Option func(*Limiter) error

// WithStore sets the store that keeps the counters. The default is a
// MemoryStore of the limiter's own.
func WithStore(s Store) Option {
	return func(l *Limiter) error {
		if s == nil {
			return errors.New("ratekit: WithStore(nil)")
		}
		l.counts.store = s
		return nil
	}
}

// WithLimit adds a limit that every request must also pass, such as 1000
// per hour beside 10 per second on the same key. A request is counted by
// every limit of the limiter or, when one rejects it, by none.
func WithLimit(lim Limit) Option {
	return func(l *Limiter) error {
		l.config = append(l.config, lim)
		return nil
	}
}

// WithFailClosed makes the limiter reject requests while its store is
// failing, with a RetryAfter of one second; middleware answers 503 Service
// Unavailable. Without it the limiter fails open: it admits requests while
// the store fails, so that an outage of the limiter never takes the API
// down.
func WithFailClosed() Option {
	return func(l *Limiter) error { l.fail.closed = true; return nil }
}

// WithObserver adds an observer, called with an Event for the decision of
// every limit on every request: admissions, rejections and store failures;
// one event of each request is Decisive. A request without a key gets one
// MissingKey event instead. Every observer added sees every
// event. Observers run on the request path
// and must be fast and safe for concurrent use. Without one, no time is
// measured and nothing is called.
func WithObserver(observe func(Event)) Option {
	return func(l *Limiter) error {
		if observe == nil {
			return errors.New("ratekit: WithObserver(nil)")
		}
		l.watch.observers = append(l.watch.observers, observe)
		return nil
	}
}

// WithShadow puts the limiter in shadow mode, for rolling out a new limit
// safely: it counts requests as usual, but a request that a limit would
// reject is admitted instead, with Decision.Shadow set and Remaining 0.
// Observers see such requests as ShadowDenied, so a dashboard shows what
// the limit would do before it is enforced. A request that the store
// failing under FailClosed would reject is admitted too (observers see
// ErrorDenied, and the error is returned). Shadow decisions are never
// delayed by a shaping leaky bucket.
func WithShadow() Option {
	return func(l *Limiter) error { l.margins.shadow = true; return nil }
}

// WithSoftPercent turns on soft throttling: each limit admits up to
// percent more requests than its count (and burst), rounded down, before
// it rejects. A request admitted beyond the limit itself has
// Decision.Soft set and is reported to observers as SoftAllowed, so the
// application can degrade its answer or warn the client before hard
// rejections start. Decisions report the limit itself as Quota, with
// Remaining 0 while in the soft zone. The counters are the limit's own
// (same ID), so turning soft throttling on or off keeps the counts.
// percent must be between 0 (off) and 1000. It cannot be combined with
// WithElastic.
func WithSoftPercent(percent int) Option {
	return func(l *Limiter) error {
		if percent < 0 || percent > 1000 {
			return fmt.Errorf("%w: soft percent %d must be between 0 and 1000", ErrInvalidLimit, percent)
		}
		if percent != 0 && l.elastic.spare != nil {
			return errSoftElastic
		}
		l.margins.softPct = percent
		return nil
	}
}

// WithLogger sets the logger for store failures (default slog.Default()).
// A failure episode is logged when it starts and, with the count of failed
// decisions, when the store answers again: never once per request. When
// the store fails on some calls and answers others, episodes that start
// within 10 seconds of the last one logged go unlogged, their failures
// counted into the next line, until one has gone on for 10 seconds: at
// most two lines per 10 seconds.
func WithLogger(log *slog.Logger) Option {
	return func(l *Limiter) error {
		if log == nil {
			return errors.New("ratekit: WithLogger(nil)")
		}
		l.watch.log = log
		return nil
	}
}

// A Limiter decides requests by one or more limits kept in a store, all
// or nothing. It is safe for concurrent use.
type Limiter struct {
	config   []Limit  // the limits as given, WithLimit's included
	limits   []Params // the limits as configured, in nanoseconds
	capacity int      // the largest cost every limit can admit
	policies string   // Decision.Policies of its decisions: its limits' IETF policy items
	joins    joins    // the Policies of TakeAll's sets of checks that it comes first in

	// The features, a group of fields each.

	counts  counts   // where the limits are counted, and Take's lane there
	margins margins  // soft throttling and shadow mode: how decisions are restated
	fail    failMode // what a failing store does
	watch   watchers // who hears of decisions, actions and failures
	elastic elastic  // elastic throttling (elastic.go)
	plans   *plans   // NewPlanLimiter's (plan.go); nil for any other limiter
}

// counts is where a limiter's limits are counted.
type counts struct {
	store   Store
	counter Counter     // the limits bound in store
	mem     *memCounter // counter, when it is a memory store's: the entry of its lanes (memory_counter.go)

	// lane is set when Take goes straight to mem.decide, with no result
	// to keep: at most two limits, no observer, nothing to repay.
	lane bool
}

// bind sets the counter of the limits, bound in c.store, and the lanes to
// it.
func (c *counts) bind(counter Counter, limits int, observed bool) {
	c.counter = counter
	c.mem, _ = counter.(*memCounter)
	c.lane = c.mem != nil && limits <= 2 && !observed
}

// margins are how a limiter restates its limits' decisions.
type margins struct {
	shadow  bool  // WithShadow: a rejection passes, marked Shadow
	softPct int   // WithSoftPercent
	extra   []int // per limit: the capacity the soft (or elastic) margin adds
}

// failMode is what a limiter does while its store fails.
type failMode struct {
	closed   bool         // WithFailClosed: reject, where the default admits
	episodes *episode.Log // the failures, logged per episode; the elastic limiter shares them
}

// watchers are who hear of a limiter's decisions and actions.
type watchers struct {
	observers []func(Event)  // WithObserver
	actions   []func(Action) // WithActionObserver
	log       *slog.Logger   // WithLogger: store failures and operator actions
}

// newLimiter returns a limiter with no limit yet, its defaults set.
func newLimiter() *Limiter {
	return &Limiter{fail: failMode{episodes: new(episode.Log)}, watch: watchers{log: slog.Default()}}
}

// NewLimiter returns a limiter for the given limit (and any added with
// WithLimit), after validating every limit and option: a bad limit (a
// negative count, a zero period, a burst on a window algorithm, an unknown
// algorithm) is an error wrapping ErrInvalidLimit, never a panic.
func NewLimiter(lim Limit, opts ...Option) (*Limiter, error) {
	l := newLimiter()
	l.config = []Limit{lim}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.counts.store == nil {
		l.counts.store = &MemoryStore{}
	}
	if len(l.config) > MaxLimits {
		return nil, fmt.Errorf("%w: %d limits on one limiter, more than %d", ErrInvalidLimit, len(l.config), MaxLimits)
	}
	bound := make([]Limit, len(l.config))
	l.capacity = math.MaxInt
	seen := map[string]bool{}
	for i, lim := range l.config {
		p, err := lim.Params(time.Nanosecond)
		if err != nil {
			return nil, err
		}
		if seen[p.ID] {
			return nil, fmt.Errorf("%w: two limits with the ID %q on one limiter", ErrInvalidLimit, p.ID)
		}
		seen[p.ID] = true
		bound[i] = lim
		extra := 0
		if l.margins.softPct != 0 {
			bound[i] = lim.raise(l.margins.softPct)
			raised, err := bound[i].Params(time.Nanosecond)
			if err != nil {
				return nil, fmt.Errorf("limit %q with soft percent %d: %w", p.Name, l.margins.softPct, err)
			}
			extra = int(raised.Capacity - p.Capacity)
		}
		if !p.Block {
			l.capacity = min(l.capacity, int(p.Capacity)+extra)
		}
		l.limits = append(l.limits, p)
		l.margins.extra = append(l.margins.extra, extra)
	}
	l.policies = policyList(l.limits)
	c, err := l.counts.store.Bind(bound)
	if err != nil {
		return nil, fmt.Errorf("ratekit: binding limit %q: %w", l.limits[0].Name, err)
	}
	l.counts.bind(c, len(l.limits), len(l.watch.observers) > 0)
	if l.elastic.spare != nil {
		if err := l.bindElastic(); err != nil {
			return nil, err
		}
		l.elastic.raised.policies = l.policies // its decisions are restated in l's limits
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

// Take decides a request of the given cost (1 for an ordinary request)
// for key by every limit of the limiter: TakeAll with one check. An empty
// key is an error wrapping ErrMissingKey, which the observers see as a
// MissingKey event; middleware passes the empty key for a request whose
// key function found no value, so that it is counted.
func (l *Limiter) Take(ctx context.Context, key string, cost int) (d Decision, err error) {
	if key == "" {
		l.unkeyed()
		return Decision{}, errEmptyKey
	}
	if l.plans != nil {
		sub, err := l.forPlan(ctx, key)
		if err != nil {
			if errors.Is(err, ErrMissingKey) {
				l.unkeyed()
			}
			return Decision{}, err
		}
		l = sub
	}
	if l.elastic.spare != nil && l.elastic.spare() {
		l = l.elastic.raised // elastic throttling: there is room
	}
	if err := l.check(key, cost); err != nil {
		return Decision{}, err
	}
	if l.counts.lane { // straight to the memory store, nothing to report
		if len(l.limits) == 1 { // the decision written in place
			l.counts.mem.decideOne(key, cost, true, &d)
			l.adjust(&d)
			d.Policies = l.policies
			return d, nil
		}
		// combine, writing the merged decision over the most restrictive
		// one, which is then copied once, to d.
		var ds [2]Decision
		l.counts.mem.decide(key, cost, true, ds[:], nil)
		best, delay, soft, elastic, granted := l.pick(ds[:])
		b := &ds[best]
		b.Delay, b.Soft, b.Elastic, b.Granted = delay, soft, elastic, granted && b.Allowed
		if l.margins.shadow {
			*b = shadowed(*b)
		}
		b.Policies = l.policies
		return *b, nil
	}
	return l.takeOne(ctx, key, cost)
}

// adjust applies soft throttling and shadow mode to the decision of a
// limiter of one limit: combine, in place.
func (l *Limiter) adjust(d *Decision) {
	if l.margins.extra[0] != 0 {
		soften(l.margins.extra[0], l.elastic.base != nil, d)
	}
	if l.margins.shadow {
		*d = shadowed(*d)
	}
}

// check reports a key or cost that no decision can be taken for.
func (l *Limiter) check(key string, cost int) error {
	switch {
	case key == "":
		return errEmptyKey
	case cost < 0 || cost > l.capacity:
		return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, cost, l.capacity)
	}
	return nil
}

// A Check is a limiter a request must pass, with the request's key for it.
type Check struct {
	Limiter *Limiter
	Key     string
}

// TakeAll decides a request of the given cost by every check, all or
// nothing, and returns the decision of the most restrictive limit.
//
// The request is admitted only if every limit of every check admits it;
// then every limit counts it. Otherwise no limit keeps a count of it, and
// the decision is the rejection with the longest RetryAfter, so that
// RetryAfter is true. A limiter in shadow mode (WithShadow) counts the
// request but never rejects it; shadow checks are asked after the others,
// and only when those admit the request.
//
// The limits of one check are decided in one atomic store call. Checks
// are asked one after another, and when one rejects, those before it give
// back what they counted (Counter.Refund). In between, a concurrent
// request on one of their keys can see the count of the request being
// rejected: it may then be rejected itself, or told one request less
// Remaining, as if the rejected request had come just before it. No
// request is ever admitted beyond a limit, and no count of a rejected
// request remains.
//
// The decision's Delay is the longest of the admitting checks, Soft is
// set if one admitted by soft throttling, Elastic if one admitted by
// elastic throttling (each limiter with WithElastic asks its capacity
// signal once), and the other numbers are the
// most restrictive limit's: of the enforcing checks, or of the shadow
// checks when there are no others. Its Policies lists the limits of
// every check, in the order of the checks, whichever decided (see
// Decision.Policies). No checks at all admit the request with the zero
// Decision (Allowed, Quota 0).
//
// A non-nil error means a key is empty (wrapping ErrMissingKey) or the
// cost is out of a limit's range (ErrCostExceedsLimit), with the zero
// Decision, a rejection; or the store failed, and the decision follows
// the fail mode of that check's limiter (the error of the rejecting check,
// or the first store failure when the request is admitted). A rejection
// by a limit is not an error.
func TakeAll(ctx context.Context, checks []Check, cost int) (Decision, error) {
	return takeAll(ctx, checks, cost, nil)
}

// TakeEach is TakeAll that also reports each check's own decision: each
// must have room for one Decision per check, and each[i] becomes the
// decision of checks[i]'s limits on its key, as a service that answers
// per descriptor (Envoy's rate-limit service) reports them. When the
// request is admitted, each[i] is what checks[i] counted. When it is
// rejected, nothing is counted: each[i] is the rejecting check's
// rejection, or, for the other checks, their decision as if they had been
// asked without counting (Remaining as before the request). A check of a
// limiter in shadow mode is asked too, and its decision says Shadow if it
// would have rejected.
//
// TakeEach returns TakeAll's decision and error, and an error without
// deciding if each is shorter than checks.
func TakeEach(ctx context.Context, checks []Check, cost int, each []Decision) (Decision, error) {
	if len(each) < len(checks) {
		return Decision{}, fmt.Errorf("ratekit: TakeEach: room for %d decisions, %d checks", len(each), len(checks))
	}
	clear(each[:len(checks)])
	return takeAll(ctx, checks, cost, each[:len(checks)])
}

// takeAll is TakeAll, and TakeEach when each is not nil.
func takeAll(ctx context.Context, checks []Check, cost int, each []Decision) (Decision, error) {
	if len(checks) == 1 && checks[0].Limiter != nil {
		d, err := checks[0].Limiter.Take(ctx, checks[0].Key, cost)
		if each != nil {
			each[0] = d
		}
		return d, err
	}
	var buf [8]Check
	resolved := false
	for i := range checks {
		l := checks[i].Limiter
		if l == nil {
			return Decision{}, errors.New("ratekit: a Check with no Limiter")
		}
		if checks[i].Key == "" {
			l.unkeyed()
			return Decision{}, errEmptyKey
		}
		if l.plans != nil {
			if !resolved {
				checks, resolved = append(buf[:0], checks...), true
			}
			sub, err := l.forPlan(ctx, checks[i].Key)
			if err != nil {
				if errors.Is(err, ErrMissingKey) {
					l.unkeyed()
				}
				return Decision{}, err
			}
			checks[i].Limiter = sub
		}
		if sub := checks[i].Limiter; sub.elastic.spare != nil && sub.elastic.spare() {
			if !resolved {
				checks, resolved = append(buf[:0], checks...), true
			}
			checks[i].Limiter = sub.elastic.raised
		}
		if err := checks[i].Limiter.check(checks[i].Key, cost); err != nil {
			return Decision{}, err
		}
	}
	return takeMany(ctx, checks, cost, each)
}

var errEmptyKey = fmt.Errorf("%w: the key is empty", ErrMissingKey)

// takeOne is Take through the store and the observers: every case but
// Take's lane.
func (l *Limiter) takeOne(ctx context.Context, key string, cost int) (Decision, error) {
	var buf [2]Decision
	ds := buf[:]
	if len(l.limits) > len(buf) {
		ds = make([]Decision, len(l.limits))
	}
	ds = ds[:len(l.limits)]
	var r result
	l.decide(ctx, key, cost, true, &r, ds)
	if r.err == nil && l.failing() {
		l.recovered()
	}
	l.report(&r, ds, r.d.Allowed, true)
	return r.d, r.err
}

// takeMany is TakeAll of several checks.
func takeMany(ctx context.Context, checks []Check, cost int, each []Decision) (Decision, error) {
	var buf [8]result
	var dbuf [8]Decision // the results' per-limit decisions, from result.off
	rs, all := buf[:0], dbuf[:0]
	if len(checks) > len(buf) {
		rs = make([]result, 0, len(checks))
	}
	var best Decision
	var firstErr error
	found, enforced := false, false
	decisive := -1 // the result whose decision is best
	var delay time.Duration
	soft, elastic, granted := false, false, false
	for _, shadows := range [2]bool{false, true} { // enforcing checks first
		for i := range checks {
			l := checks[i].Limiter
			if l.margins.shadow != shadows {
				continue
			}
			off := len(all)
			all = append(all, make([]Decision, len(l.limits))...)
			rs = append(rs, result{check: i, off: off})
			r := &rs[len(rs)-1]
			l.decide(ctx, checks[i].Key, cost, true, r, all[off:])
			if r.err == nil && l.failing() {
				l.recovered()
			}
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
			if !r.d.Allowed { // only an enforcing check rejects
				return reject(ctx, checks, cost, rs, all, each)
			}
			if shadows && enforced {
				continue // the headers describe the enforcing checks
			}
			if !shadows {
				delay = max(delay, r.d.Delay)
				soft = soft || r.d.Soft
				elastic = elastic || r.d.Elastic
				granted = granted || r.d.Granted
				enforced = true
			}
			if !found || r.d.moreRestrictive(&best) {
				best, found, decisive = r.d, true, len(rs)-1
			}
		}
	}
	for i := range rs {
		l := checks[rs[i].check].Limiter
		l.report(&rs[i], all[rs[i].off:rs[i].off+len(l.limits)], true, i == decisive)
		if each != nil {
			each[rs[i].check] = rs[i].d
		}
	}
	if !found {
		return Decision{Allowed: true}, nil
	}
	best.Delay, best.Soft, best.Elastic, best.Granted = delay, soft, elastic, granted
	best.Policies = policiesOf(checks)
	return best, firstErr
}

// reject ends takeMany when the last result of rs rejected the request:
// the checks before it give back what they counted, and the enforcing
// checks not yet asked are asked without counting, so that the rejection
// carries the longest RetryAfter.
//
// With each, it also fills in every check's decision (see TakeEach):
// those refunded, as before the request; the shadow checks, asked without
// counting.
func reject(ctx context.Context, checks []Check, cost int, rs []result, all []Decision, each []Decision) (Decision, error) {
	last := &rs[len(rs)-1]
	for i := len(rs) - 2; i >= 0; i-- {
		r := &rs[i]
		if r.counted {
			l := checks[r.check].Limiter
			_ = l.refund(ctx, checks[r.check].Key, cost, r, all[r.off:r.off+len(l.limits)])
		}
		if each != nil {
			each[r.check] = uncounted(r.d, cost)
		}
	}
	if each != nil {
		each[last.check] = last.d
	}
	worst, worstErr := last.d, last.err
	// The checks not yet asked are asked before any is reported, so that
	// the event of the worst is the decisive one.
	type peek struct {
		r  result
		ds []Decision
	}
	var peeks []peek
	decisive := -1 // the peek whose decision is worst; -1: last's
	for i := range checks {
		l := checks[i].Limiter
		if asked(rs, i) || (l.margins.shadow && each == nil) {
			continue
		}
		p := peek{r: result{check: i}, ds: make([]Decision, len(l.limits))}
		l.decide(ctx, checks[i].Key, cost, false, &p.r, p.ds)
		if each != nil {
			each[i] = uncounted(p.r.d, cost)
			if l.margins.shadow {
				continue // asked for each only: it neither decides nor is reported
			}
		}
		if !p.r.d.Allowed && p.r.d.moreRestrictive(&worst) {
			worst, worstErr, decisive = p.r.d, p.r.err, len(peeks)
		}
		peeks = append(peeks, p)
	}
	ll := checks[last.check].Limiter
	ll.report(last, all[last.off:last.off+len(ll.limits)], false, decisive < 0)
	for i := range peeks {
		checks[peeks[i].r.check].Limiter.report(&peeks[i].r, peeks[i].ds, false, i == decisive)
	}
	worst.Policies = policiesOf(checks)
	return worst, worstErr
}

// uncounted is an admitting decision d of a request of cost that was not
// counted or was given back: its Remaining as before the request.
func uncounted(d Decision, cost int) Decision {
	if d.Allowed && !d.Shadow && !d.Soft && !d.Elastic {
		d.Remaining = min(d.Remaining+cost, max(d.Quota, d.Remaining))
	}
	return d
}

func asked(rs []result, check int) bool {
	for i := range rs {
		if rs[i].check == check {
			return true
		}
	}
	return false
}

// A result is one check's part of a decision.
type result struct {
	check   int
	d       Decision // the check's decision, its limits' combined
	err     error
	at      time.Time // the store's time of the decision, for a refund
	memAt   int64     // at, in a memory store: its own time
	counted bool      // the store counted the request
	latency time.Duration
	off     int // where its limits' decisions start, in takeMany
}

// decide asks the store for limiter l's decisions on key, into ds (one
// per limit), and combines them into r.d, applying soft throttling, shadow mode and
// the fail mode. With commit false it counts nothing.
func (l *Limiter) decide(ctx context.Context, key string, cost int, commit bool, r *result, ds []Decision) {
	if m := l.counts.mem; m != nil {
		// The memory store's entry; it times itself for the observers,
		// and cannot fail: the key and cost are checked.
		var lat *time.Duration
		if len(l.watch.observers) > 0 {
			lat = &r.latency
		}
		r.memAt = m.decide(key, cost, commit, ds, lat)
	} else if err := l.ask(ctx, key, cost, commit, r, ds); err != nil {
		r.err = fmt.Errorf("ratekit: limit %q: %w", l.limits[0].Name, err)
		l.storeFailed(r.err)
		r.d = Decision{Allowed: !l.fail.closed, Name: l.limits[0].Name, Window: l.limits[0].Window, Policies: l.policies}
		if !r.d.Allowed {
			r.d.RetryAfter = failRetry
		}
		if l.margins.shadow {
			r.d = shadowed(r.d)
		}
		return
	}
	if l.elastic.owes {
		l.repay(ctx, key, ds)
	}
	r.d = l.combine(ds)
	r.counted = commit && cost > 0 && r.d.Allowed
}

// combine returns the decision of the limits' decisions ds: soft or
// elastic throttling, the most restrictive limit, the longest delay,
// shadow mode.
func (l *Limiter) combine(ds []Decision) (d Decision) {
	d = l.merge(ds)
	if l.margins.shadow {
		d = shadowed(d)
	}
	d.Policies = l.policies
	return d
}

// merge is combine without shadow mode.
func (l *Limiter) merge(ds []Decision) (d Decision) {
	if len(ds) == 1 {
		if l.margins.extra[0] != 0 {
			soften(l.margins.extra[0], l.elastic.base != nil, &ds[0])
		}
		return ds[0]
	}
	best, delay, soft, elastic, granted := l.pick(ds)
	d = ds[best]
	d.Delay, d.Soft, d.Elastic, d.Granted = delay, soft, elastic, granted && d.Allowed
	return d
}

// pick softens the decisions of ds where a limit has a margin and returns
// the most restrictive of them, with what the merged decision takes from
// all: the longest delay, and whether any is soft, elastic or granted.
func (l *Limiter) pick(ds []Decision) (best int, delay time.Duration, soft, elastic, granted bool) {
	stretched := l.elastic.base != nil // the margin is elastic throttling's
	for i := range ds {
		if l.margins.extra[i] != 0 {
			soften(l.margins.extra[i], stretched, &ds[i])
		}
		delay = max(delay, ds[i].Delay)
		soft = soft || ds[i].Soft
		elastic = elastic || ds[i].Elastic
		granted = granted || ds[i].Granted
		if i > 0 && ds[i].moreRestrictive(&ds[best]) {
			best = i
		}
	}
	return best, delay, soft, elastic, granted
}

// ask is decide's call of a store other than the memory store, timed when
// there are observers. The decisions pass through a slice of their own,
// which an interface call moves to the heap, so that r and ds do not.
func (l *Limiter) ask(ctx context.Context, key string, cost int, commit bool, r *result, ds []Decision) (err error) {
	var start time.Time
	if len(l.watch.observers) > 0 {
		start = time.Now()
	}
	out := make([]Decision, len(ds))
	if commit {
		r.at, err = l.counts.counter.Take(ctx, key, cost, out)
	} else {
		err = l.counts.counter.Peek(ctx, key, cost, out)
	}
	copy(ds, out)
	if len(l.watch.observers) > 0 {
		r.latency = time.Since(start)
	}
	return err
}

// refund gives back a request that r counted with decisions ds.
func (l *Limiter) refund(ctx context.Context, key string, cost int, r *result, ds []Decision) error {
	if m := l.counts.mem; m != nil {
		m.refund(key, cost, r.memAt, ds)
		return nil
	}
	// A slice of its own, as ask's: passed to an interface call, ds would
	// move the decisions of every TakeAll to the heap, not only of those
	// that refund.
	out := make([]Decision, len(ds))
	copy(out, ds)
	err := l.counts.counter.Refund(ctx, key, cost, r.at, out)
	if err != nil {
		l.storeFailed(fmt.Errorf("ratekit: limit %q: refund: %w", l.limits[0].Name, err))
	}
	return err
}

// report tells the observers about result r: every limit's decision when
// the request passed, the rejecting limits' when it did not. A store
// failure is reported either way. When decisive is set, r.d is the
// request's decision, and the event of the limit it came from (the first
// of that name) is Decisive.
func (l *Limiter) report(r *result, ds []Decision, passed, decisive bool) {
	if len(l.watch.observers) == 0 {
		return
	}
	if r.err != nil {
		e := Event{Limit: l.limits[0].Name, Outcome: ErrorAllowed, Err: r.err, Latency: r.latency,
			Decision: Decision{Allowed: !l.fail.closed, Name: l.limits[0].Name}, Decisive: decisive}
		if l.fail.closed {
			e.Outcome = ErrorDenied
			e.Decision.RetryAfter = failRetry
		}
		l.emit(e)
		return
	}
	for i := range l.limits {
		d := &ds[i]
		e := Event{Limit: d.Name, Decision: *d, Latency: r.latency}
		switch {
		case !d.Allowed && l.margins.shadow:
			e.Outcome = ShadowDenied
		case !d.Allowed:
			e.Outcome = Denied
		case !passed:
			continue
		case d.Soft:
			e.Outcome = SoftAllowed
		case d.Elastic:
			e.Outcome = ElasticAllowed
		default:
			e.Outcome = Allowed
		}
		if decisive && d.Name == r.d.Name {
			e.Decisive, decisive = true, false
		}
		l.emit(e)
	}
}

// unkeyed tells the observers of a request that had no key: a
// MissingKey event.
func (l *Limiter) unkeyed() {
	if len(l.watch.observers) == 0 {
		return
	}
	name := ""
	if len(l.limits) > 0 { // a plan limiter has none of its own
		name = l.limits[0].Name
	}
	l.emit(Event{Limit: name, Outcome: MissingKey, Decision: Decision{Name: name}})
}

func (l *Limiter) emit(e Event) {
	for _, o := range l.watch.observers {
		o(e)
	}
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

// soften restates a decision of a limit raised by extra in terms of the
// limit itself: Quota is its capacity, and an admission beyond it is Soft,
// or Elastic when the margin is elastic throttling's.
func soften(extra int, elastic bool, d *Decision) {
	if d.Quota == 0 {
		return
	}
	d.Quota -= extra
	if d.Granted { // paid by a grant, not by the soft margin
		d.Remaining = max(d.Remaining-extra, 0)
		return
	}
	if d.Remaining < extra {
		if elastic {
			d.Elastic = d.Allowed
		} else {
			d.Soft = d.Allowed
		}
		d.Remaining = 0
	} else {
		d.Remaining -= extra
	}
}

// storeFailed counts a store failure into the limiter's episode, and logs
// the episode's start.
func (l *Limiter) storeFailed(err error) {
	if start, _ := l.fail.episodes.Fail(); start {
		mode := "open"
		if l.fail.closed {
			mode = "closed"
		}
		l.watch.log.Warn("ratekit: store failing", "fail_mode", mode, "error", err)
	}
}

// failing reports whether a store failure episode is going on.
func (l *Limiter) failing() bool {
	return l.fail.episodes.Failing()
}

// recovered ends the episode of store failures, and logs its end.
func (l *Limiter) recovered() {
	if end, n := l.fail.episodes.Recover(); end {
		l.watch.log.Info("ratekit: store answering again", "failed_decisions", n)
	}
}
