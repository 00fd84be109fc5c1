// Package ratekitprom exports ratekit's decisions and operator actions as
// Prometheus metrics.
//
// A Metrics is both a prometheus.Collector and an observer for core's
// hooks; attaching it is one option per hook, the second for the
// operator's actions (Limiter.Reset and Limiter.Grant):
//
//	m, _ := ratekitprom.New()
//	prometheus.MustRegister(m)
//	lim, _ := core.NewLimiter(limit,
//		core.WithObserver(m.Observe),
//		core.WithActionObserver(m.ObserveAction))
//
// It exports:
//
//	ratekit_requests_total{limit, decision}        counter, once per request
//	ratekit_decisions_total{limit, decision}       counter, once per limit of a request
//	ratekit_near_limit_total{limit}                counter
//	ratekit_actions_total{limit, action, result}   counter
//	ratekit_store_duration_seconds{store, limit}   histogram
//	ratekit_store_errors_total{store}              counter
//	ratekit_tracked_keys{limit}                    gauge (memory stores: WithMemoryStore, TrackRules)
//
// A request decided by several limits (WithLimit, or several rules) counts
// once in ratekit_requests_total, under the limit whose decision is the
// request's (the core.Event marked Decisive: the most restrictive), and
// once per limit in ratekit_decisions_total. So
// sum(rate(ratekit_requests_total[5m])) is the request rate, and
// ratekit_decisions_total tells what each limit decided.
//
// The decision label names the core.Outcome: allowed, denied,
// shadow_denied, soft_allowed, elastic_allowed (admitted beyond the limit
// while the server had room, core.WithElastic), error_allowed (the store
// failed, fail open) or error_denied (fail closed). A request is near its limit when it is
// admitted with fewer than a fraction (WithNearLimit, default 20%) of the
// limit's capacity remaining, as Envoy reports near-limit.
//
// The store duration is the time the store took for each decision, the
// memory store's included (about 100ns: the default buckets start at
// 1µs); a store call that decides several limits is observed for each.
//
// The action label names the core.ActionKind of an operator's action on a
// key, reset or grant, and the result label tells how it went: ok, error,
// or not_found for a reset of a key the store did not track. The limit of
// an action is the limiter's first limit (core.Action.Limit).
//
// Label values come only from the names of the configured limits, the
// store name given to New and the fixed decision, action and result names,
// never from a request or an operator: a client key, address or API key,
// or the reason an operator gives for an action, never becomes a label, so
// the number of series is bounded by the number of limits. With rules
// (TrackRules), the limits are the rules' (named after their descriptor
// path, such as "auth/remote_address@POST/login"), and the series of a
// limit that a reload removed are removed at the next scrape.
//
// Register one Metrics per registry; one Metrics may observe any number of
// limiters on the same kind of store.
package ratekitprom

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// decisions are the values of the decision label, created for every limit
// at its first event so that dashboards see zeros rather than gaps.
var decisions = []string{"allowed", "denied", "shadow_denied", "soft_allowed", "elastic_allowed", "error_allowed", "error_denied"}

// actionSeries are the values of the action and result labels, created
// for every limit at its first event like its decisions. A grant finds
// nothing to reset, so it has no not_found.
var actionSeries = []actionLabels{
	{core.ActionReset, "ok"}, {core.ActionReset, "not_found"}, {core.ActionReset, "error"},
	{core.ActionGrant, "ok"}, {core.ActionGrant, "error"},
}

// actionLabels are the action and result labels of an action's series.
type actionLabels struct {
	action core.ActionKind
	result string
}

// outcomeSlots bounds the core.Outcome values whose counters a limit keeps
// ready; an outcome beyond it is still counted, through a label lookup.
const outcomeSlots = 16

// Metrics is a prometheus.Collector of ratekit's metrics and an observer
// for core.WithObserver and core.WithActionObserver. It is safe for
// concurrent use.
type Metrics struct {
	store     string
	nearLimit float64
	buckets   []float64
	tracked   []trackedStore

	requests    *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	near        *prometheus.CounterVec
	actions     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrs   *prometheus.CounterVec
	storeErrors prometheus.Counter
	trackedKeys *prometheus.Desc

	// limits maps a limit name to its series. It is copied on write, so
	// that Observe reads it without a lock; limits are few and written
	// once each.
	limits atomic.Pointer[map[string]*limitSeries]
	mu     sync.Mutex // serializes writers of limits

	// The rules engines followed (TrackRules), the names of their limits
	// in force at the last scrape, and the names of limits a reload
	// retired, whose series are removed; guarded by rulesMu, taken by
	// scrapes and TrackRules only.
	rulesMu sync.Mutex
	engines []*rules.Engine
	inForce map[string]bool
	retired map[string]bool
}

// limitSeries holds the series of one limit, resolved at its first event
// so that later events cost a map lookup and an increment.
type limitSeries struct {
	requests [outcomeSlots]prometheus.Counter // by core.Outcome; nil for unnamed outcomes
	outcomes [outcomeSlots]prometheus.Counter // decisions, likewise
	near     prometheus.Counter
	duration prometheus.Observer
	actions  map[actionLabels]prometheus.Counter // by action and result; read-only once built
}

// trackedStore is a memory store and the limits whose keys it counts.
type trackedStore struct {
	store  *core.MemoryStore
	limits []core.Limit
	names  []string // the limits' names, defaults filled in
}

// Option configures a Metrics.
type Option func(*Metrics) error

// WithStore sets the value of the store label (default "memory"), such as
// "redis".
func WithStore(name string) Option {
	return func(m *Metrics) error {
		if name == "" {
			return errors.New("ratekitprom: WithStore: the store name is empty")
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("ratekitprom: WithStore: the store name %q is not valid UTF-8", name)
		}
		m.store = name
		return nil
	}
}

// WithNearLimit sets the fraction of a limit's capacity below which an
// admitted request's remaining count is counted as near the limit (default
// 0.2). It must be in (0, 1].
func WithNearLimit(fraction float64) Option {
	return func(m *Metrics) error {
		if !(fraction > 0 && fraction <= 1) {
			return fmt.Errorf("ratekitprom: WithNearLimit: fraction %v must be in (0, 1]", fraction)
		}
		m.nearLimit = fraction
		return nil
	}
}

// WithMemoryStore exports ratekit_tracked_keys{limit}: the number of keys s
// tracks for each of the given limits, read with s.TrackedKeys when the
// registry is scraped. Give the limits as configured on the limiters; a
// limit without a name is labelled with its default name. It may be given
// several times, for several stores, but a limit name only once.
func WithMemoryStore(s *core.MemoryStore, limits ...core.Limit) Option {
	return func(m *Metrics) error {
		if s == nil {
			return errors.New("ratekitprom: WithMemoryStore: the store is nil")
		}
		if len(limits) == 0 {
			return errors.New("ratekitprom: WithMemoryStore: no limits to count keys for")
		}
		t := trackedStore{store: s, limits: slices.Clone(limits)}
		for _, l := range limits {
			p, err := l.Params(time.Nanosecond)
			if err != nil {
				return fmt.Errorf("ratekitprom: WithMemoryStore: %w", err)
			}
			name := p.Name // with its default filled in
			if m.tracksName(name) || slices.Contains(t.names, name) {
				return fmt.Errorf("ratekitprom: WithMemoryStore: limit %q given twice", name)
			}
			t.names = append(t.names, name)
		}
		m.tracked = append(m.tracked, t)
		return nil
	}
}

func (m *Metrics) tracksName(name string) bool {
	for _, t := range m.tracked {
		if slices.Contains(t.names, name) {
			return true
		}
	}
	return false
}

// WithBuckets sets the upper bounds, in seconds, of the store-duration
// histogram's buckets; they must be positive, finite and increasing. The
// default spans 1µs to 1s: the memory store decides in about 100ns, Redis
// in 100µs to a few milliseconds.
func WithBuckets(seconds []float64) Option {
	return func(m *Metrics) error {
		if len(seconds) == 0 {
			return errors.New("ratekitprom: WithBuckets: no buckets")
		}
		for i, b := range seconds {
			if !(b > 0) || math.IsInf(b, 0) {
				return fmt.Errorf("ratekitprom: WithBuckets: bucket %v must be positive and finite", b)
			}
			if i > 0 && b <= seconds[i-1] {
				return fmt.Errorf("ratekitprom: WithBuckets: buckets must increase, %v follows %v", b, seconds[i-1])
			}
		}
		m.buckets = slices.Clone(seconds)
		return nil
	}
}

// defaultBuckets spans 1µs to 1s, in seconds.
var defaultBuckets = []float64{
	1e-6, 2.5e-6, 5e-6,
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	0.1, 0.25, 0.5, 1,
}

// New returns the metrics, ready to register and to attach with
// core.WithObserver(m.Observe) and core.WithActionObserver(m.ObserveAction).
func New(opts ...Option) (*Metrics, error) {
	m := &Metrics{store: "memory", nearLimit: 0.2, buckets: defaultBuckets}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("ratekitprom: nil option")
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratekit_requests_total",
		Help: "Requests decided, once each, by the limit whose decision was the request's and that decision (allowed, denied, shadow_denied, soft_allowed, elastic_allowed, error_allowed, error_denied).",
	}, []string{"limit", "decision"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratekit_decisions_total",
		Help: "Decisions of each limit, one per limit that decided a request, by limit and decision.",
	}, []string{"limit", "decision"})
	m.near = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratekit_near_limit_total",
		Help: fmt.Sprintf("Requests admitted with less than %g%% of the limit remaining.", m.nearLimit*100),
	}, []string{"limit"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratekit_actions_total",
		Help: "Operator actions on keys, by limit, action (reset, grant) and result (ok, not_found, error).",
	}, []string{"limit", "action", "result"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ratekit_store_duration_seconds",
		Help:    "Time the store took for each decision of a limit.",
		Buckets: m.buckets,
	}, []string{"store", "limit"})
	m.storeErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratekit_store_errors_total",
		Help: "Decisions whose store call failed; the decision label of ratekit_requests_total tells the fail mode.",
	}, []string{"store"})
	m.storeErrors = m.storeErrs.WithLabelValues(m.store)
	m.trackedKeys = prometheus.NewDesc("ratekit_tracked_keys",
		"Keys the memory store tracks for the limit.", []string{"limit"}, nil)
	m.inForce, m.retired = map[string]bool{}, map[string]bool{}
	m.limits.Store(&map[string]*limitSeries{})
	return m, nil
}

// Observe counts one decision, and the request when the event is
// Decisive. Pass it to core.WithObserver; it is called on the request
// path, and after a limit's first event it does not allocate.
func (m *Metrics) Observe(e core.Event) {
	s := (*m.limits.Load())[e.Limit]
	if s == nil {
		s = m.addLimit(e.Limit)
	}
	if int(e.Outcome) < outcomeSlots && s.outcomes[e.Outcome] != nil {
		s.outcomes[e.Outcome].Inc()
		if e.Decisive {
			s.requests[e.Outcome].Inc()
		}
	} else {
		m.decisions.WithLabelValues(e.Limit, e.Outcome.String()).Inc()
		if e.Decisive {
			m.requests.WithLabelValues(e.Limit, e.Outcome.String()).Inc()
		}
	}
	switch e.Outcome {
	case core.Allowed:
		if d := e.Decision; d.Quota > 0 && float64(d.Remaining) < m.nearLimit*float64(d.Quota) {
			s.near.Inc()
		}
	case core.ErrorAllowed, core.ErrorDenied:
		m.storeErrors.Inc()
	}
	s.duration.Observe(e.Latency.Seconds())
}

// ObserveAction counts one operator action, Limiter.Reset or
// Limiter.Grant. Pass it to core.WithActionObserver. The action's reason
// is the operator's text and never becomes a label.
func (m *Metrics) ObserveAction(a core.Action) {
	s := (*m.limits.Load())[a.Limit]
	if s == nil {
		s = m.addLimit(a.Limit)
	}
	l := actionLabels{a.Kind, actionResult(a)}
	if c := s.actions[l]; c != nil {
		c.Inc()
	} else { // an action that core adds later
		m.actions.WithLabelValues(a.Limit, string(a.Kind), l.result).Inc()
	}
}

// actionResult returns the value of the result label of an action.
func actionResult(a core.Action) string {
	switch {
	case a.Err != nil:
		return "error"
	case a.Kind == core.ActionReset && !a.Found:
		return "not_found"
	}
	return "ok"
}

// addLimit creates the series of a limit at its first event.
func (m *Metrics) addLimit(name string) *limitSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.limits.Load()
	if s := old[name]; s != nil {
		return s
	}
	s := &limitSeries{
		near:     m.near.WithLabelValues(name),
		duration: m.duration.WithLabelValues(m.store, name),
		actions:  make(map[actionLabels]prometheus.Counter, len(actionSeries)),
	}
	for _, a := range actionSeries {
		s.actions[a] = m.actions.WithLabelValues(name, string(a.action), a.result)
	}
	for o := range outcomeSlots {
		if d := core.Outcome(o).String(); slices.Contains(decisions, d) {
			s.requests[o] = m.requests.WithLabelValues(name, d)
			s.outcomes[o] = m.decisions.WithLabelValues(name, d)
		}
	}
	limits := make(map[string]*limitSeries, len(old)+1)
	for k, v := range old {
		limits[k] = v
	}
	limits[name] = s
	m.limits.Store(&limits)
	return s
}

// Describe sends the descriptions of the metrics. It implements
// prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.decisions.Describe(ch)
	m.near.Describe(ch)
	m.actions.Describe(ch)
	m.duration.Describe(ch)
	m.storeErrs.Describe(ch)
	ch <- m.trackedKeys
}

// TrackRules makes the metrics follow the rules in force in e, which
// reloads may replace: at each scrape, ratekit_tracked_keys reports the
// keys of each of their limits (when e's store is a memory store), and
// the series of a limit that a reload removed are removed. Attach the
// metrics to the rules' limiters as well, with
// rules.WithLimiterOptions(core.WithObserver(m.Observe)). TrackRules
// returns an error for a nil engine or one already followed.
func (m *Metrics) TrackRules(e *rules.Engine) error {
	if e == nil {
		return errors.New("ratekitprom: TrackRules: the engine is nil")
	}
	m.rulesMu.Lock()
	defer m.rulesMu.Unlock()
	if slices.Contains(m.engines, e) {
		return errors.New("ratekitprom: TrackRules: the engine is already followed")
	}
	m.engines = append(m.engines, e)
	return nil
}

// Collect sends the metrics' current values, reading the memory stores'
// key counts, and removes the series of the rules' limits that reloads
// removed. It implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.collectRules(ch)
	m.requests.Collect(ch)
	m.decisions.Collect(ch)
	m.near.Collect(ch)
	m.actions.Collect(ch)
	m.duration.Collect(ch)
	m.storeErrs.Collect(ch)
	for _, t := range m.tracked {
		for i, l := range t.limits {
			m.sendTracked(ch, t.names[i], t.store.TrackedKeys(l))
		}
	}
}

func (m *Metrics) sendTracked(ch chan<- prometheus.Metric, limit string, keys int) {
	g, err := prometheus.NewConstMetric(m.trackedKeys, prometheus.GaugeValue, float64(keys), limit)
	if err != nil {
		g = prometheus.NewInvalidMetric(m.trackedKeys, err)
	}
	ch <- g
}

// collectRules sends the tracked keys of the followed engines' limits and
// retires the limits no longer in force: their series are deleted, at
// this scrape and at later ones, should a request still in flight under
// the old rules bring them back. The names of retired limits are kept
// until they come back in force, up to maxRetired of them.
func (m *Metrics) collectRules(ch chan<- prometheus.Metric) {
	m.rulesMu.Lock()
	defer m.rulesMu.Unlock()
	if len(m.engines) == 0 {
		return
	}
	now := make(map[string]bool, len(m.inForce))
	for _, e := range m.engines {
		for _, l := range e.Limits() {
			now[l.Name] = true
			if n, ok := e.TrackedKeys(l); ok {
				m.sendTracked(ch, l.Name, n)
			}
		}
	}
	for name := range m.retired {
		if now[name] {
			delete(m.retired, name) // back in force
		} else {
			m.removeLimit(name)
		}
	}
	for name := range m.inForce {
		if !now[name] {
			if len(m.retired) >= maxRetired {
				clear(m.retired)
			}
			m.retired[name] = true
			m.removeLimit(name)
		}
	}
	m.inForce = now
}

// maxRetired bounds the names of retired limits that Metrics keeps.
const maxRetired = 4096

// removeLimit deletes the series of a limit, if it has any.
func (m *Metrics) removeLimit(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.limits.Load()
	if old[name] == nil {
		return
	}
	limits := make(map[string]*limitSeries, len(old))
	for k, v := range old {
		if k != name {
			limits[k] = v
		}
	}
	m.limits.Store(&limits)
	match := prometheus.Labels{"limit": name}
	m.requests.DeletePartialMatch(match)
	m.decisions.DeletePartialMatch(match)
	m.near.DeletePartialMatch(match)
	m.actions.DeletePartialMatch(match)
	m.duration.DeletePartialMatch(match)
}
