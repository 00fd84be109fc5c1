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
//	ratekit_store_out_of_memory_total{store}       counter (Redis stores: WithOutOfMemory)
//	ratekit_missing_key_total{limit}               counter
//
// A request counts once in ratekit_requests_total, under the limit whose
// decision is the request's (the core.Event marked Decisive: the most
// restrictive), and once per limit in ratekit_decisions_total; so
// sum(rate(ratekit_requests_total[5m])) is the request rate. The decision
// label names the core.Outcome: allowed, denied, shadow_denied,
// soft_allowed, elastic_allowed, error_allowed or error_denied (the store
// failed, fail open or closed). The action label is reset or grant, the
// result ok, error or not_found (a reset of a key the store did not
// track). ratekit_missing_key_total counts the requests answered 400
// because they had no key (core.MissingKey: a key function or plan that
// found no value, an empty key), under the first limit of the limiter
// they came to ("" for a plan limiter); no limit decided them, so they
// are not in ratekit_requests_total. These are counted exactly as package ratekitotel counts them:
// both follow one model, described in docs/operations.md.
//
// Label values come only from the names of the configured limits, the
// store name and the fixed decision, action and result names, never from
// a request or an operator, so the number of series is bounded by the
// number of limits. With rules (TrackRules), the limits are the rules'
// (named after their descriptor path, such as
// "auth/remote_address@POST/login"), and the series of a limit that a
// reload removed are removed at the next scrape.
//
// Register one Metrics per registry; one Metrics may observe any number of
// limiters on the same kind of store.
package ratekitprom

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/observe"
	"github.com/ratekit/ratekit/rules"
)

// Metrics is a prometheus.Collector of ratekit's metrics and an observer
// for core.WithObserver and core.WithActionObserver. It is safe for
// concurrent use.
type Metrics struct {
	cfg    *observe.Config
	limits *observe.Limits[limitSeries]

	requests    *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	near        *prometheus.CounterVec
	actions     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrs   *prometheus.CounterVec
	storeErrors prometheus.Counter
	trackedKeys *prometheus.Desc
	outOfMemory *prometheus.Desc // nil without WithOutOfMemory
	missing     *prometheus.CounterVec
	unnamed     func() prometheus.Counter // missing's series of limit "": a plan limiter's

	// The names of the rules' limits in force at the last scrape, and of
	// those a reload retired, whose series are removed; guarded by
	// rulesMu, which serialises the scrapes' reading of the rules.
	rulesMu sync.Mutex
	inForce map[string]bool
	retired map[string]bool
}

// limitSeries holds the series of one limit, resolved at its first event
// so that later events cost a map lookup and an increment.
type limitSeries struct {
	outcomes *observe.ByOutcome[outcomeSeries]
	actions  *observe.ByAction[prometheus.Counter]
	near     prometheus.Counter
	duration prometheus.Observer
	missing  prometheus.Counter
}

// outcomeSeries are the request and decision counters of one outcome.
type outcomeSeries struct{ requests, decisions prometheus.Counter }

// Option configures a Metrics.
type Option func(*Metrics) error

// WithStore sets the value of the store label (default "memory"), such as
// "redis": valid UTF-8, of at most 64 bytes.
func WithStore(name string) Option {
	return func(m *Metrics) error { return m.cfg.SetStore(name) }
}

// WithNearLimit sets the fraction of a limit's capacity below which an
// admitted request's remaining count is counted as near the limit (default
// 0.2). It must be in (0, 1].
func WithNearLimit(fraction float64) Option {
	return func(m *Metrics) error { return m.cfg.SetNearLimit(fraction) }
}

// WithMemoryStore exports ratekit_tracked_keys{limit}: the number of keys s
// tracks for each of the given limits, read with s.TrackedKeys when the
// registry is scraped. Give the limits as configured on the limiters; a
// limit without a name is labelled with its default name. It may be given
// several times, for several stores; limits of the same name, here or in
// the rules of TrackRules, are reported as one sum.
func WithMemoryStore(s *core.MemoryStore, limits ...core.Limit) Option {
	return func(m *Metrics) error { return m.cfg.AddMemoryStore(s, limits) }
}

// WithOutOfMemory exports ratekit_store_out_of_memory_total{store}: the
// decisions a Redis store made while Redis was out of memory (maxmemory),
// read with count when the registry is scraped. Pass the store's method,
// WithOutOfMemory(store.OutOfMemory) (package redisstore); given several
// times, the counts are summed. A rate above zero means Redis is full:
// the store still decides, clients with a key in Redis and new clients in
// process, so ratekit_store_errors_total does not show it.
func WithOutOfMemory(count func() int64) Option {
	return func(m *Metrics) error { return m.cfg.AddOutOfMemory(count) }
}

// WithBuckets sets the upper bounds, in seconds, of the store-duration
// histogram's buckets; they must be positive, finite and increasing. The
// default spans 1µs to 1s: the memory store decides in about 100ns, Redis
// in 100µs to a few milliseconds.
func WithBuckets(seconds []float64) Option {
	return func(m *Metrics) error { return m.cfg.SetBuckets(seconds) }
}

// New returns the metrics, ready to register and to attach with
// core.WithObserver(m.Observe) and core.WithActionObserver(m.ObserveAction).
func New(opts ...Option) (*Metrics, error) {
	m := &Metrics{cfg: observe.NewConfig("ratekitprom"), inForce: map[string]bool{}, retired: map[string]bool{}}
	if err := observe.Apply(m.cfg, m, opts); err != nil {
		return nil, err
	}
	m.requests = m.counterVec(observe.Requests)
	m.decisions = m.counterVec(observe.Decisions)
	m.near = m.counterVec(observe.NearLimit)
	m.actions = m.counterVec(observe.OperatorActions)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: observe.StoreDuration.Prometheus, Help: m.cfg.Help(observe.StoreDuration), Buckets: m.cfg.Buckets,
	}, observe.StoreDuration.Labels)
	m.storeErrs = m.counterVec(observe.StoreErrors)
	m.storeErrors = m.storeErrs.WithLabelValues(m.cfg.Store)
	m.trackedKeys = prometheus.NewDesc(observe.TrackedKeys.Prometheus, m.cfg.Help(observe.TrackedKeys), observe.TrackedKeys.Labels, nil)
	if _, ok := m.cfg.OutOfMemory(); ok {
		o := observe.OutOfMemory
		m.outOfMemory = prometheus.NewDesc(o.Prometheus, m.cfg.Help(o), o.Labels, nil)
	}
	m.missing = m.counterVec(observe.MissingKeys)
	m.unnamed = sync.OnceValue(func() prometheus.Counter { return m.missing.WithLabelValues("") })
	m.limits = observe.NewLimits(m.newLimit)
	return m, nil
}

func (m *Metrics) counterVec(c observe.Metric) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: c.Prometheus, Help: m.cfg.Help(c)}, c.Labels)
}

// newLimit creates the series of a limit at its first event.
func (m *Metrics) newLimit(name string) *limitSeries {
	return &limitSeries{
		outcomes: observe.NewByOutcome(func(o core.Outcome) *outcomeSeries {
			return &outcomeSeries{m.requests.WithLabelValues(name, o.String()), m.decisions.WithLabelValues(name, o.String())}
		}),
		actions: observe.NewByAction(func(a observe.Action) prometheus.Counter {
			return m.actions.WithLabelValues(name, string(a.Kind), a.Result)
		}),
		near:     m.near.WithLabelValues(name),
		duration: m.duration.WithLabelValues(m.cfg.Store, name),
		missing:  m.missing.WithLabelValues(name),
	}
}

// Observe counts one decision, and the request when the event is
// Decisive; or a request without a key (core.MissingKey). Pass it to
// core.WithObserver; it is called on the request path, and after a
// limit's first event it does not allocate.
func (m *Metrics) Observe(e core.Event) {
	c := m.cfg.Classify(&e)
	if c.MissingKey {
		if e.Limit == "" {
			m.unnamed().Inc()
		} else {
			m.limits.Get(e.Limit).missing.Inc()
		}
		return
	}
	s := m.limits.Get(e.Limit)
	o := s.outcomes.Get(e.Outcome)
	o.decisions.Inc()
	if c.Request {
		o.requests.Inc()
	}
	if c.Near {
		s.near.Inc()
	}
	if c.StoreError {
		m.storeErrors.Inc()
	}
	s.duration.Observe(e.Latency.Seconds())
}

// ObserveAction counts one operator action, Limiter.Reset or
// Limiter.Grant. Pass it to core.WithActionObserver. The action's reason
// is the operator's text and never becomes a label.
func (m *Metrics) ObserveAction(a core.Action) {
	m.limits.Get(a.Limit).actions.Get(observe.ActionOf(a)).Inc()
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
	m.missing.Describe(ch)
	ch <- m.trackedKeys
	if m.outOfMemory != nil {
		ch <- m.outOfMemory
	}
}

// TrackRules makes the metrics follow the rules in force in e, which
// reloads may replace: at each scrape, ratekit_tracked_keys reports the
// keys of each of their limits (when e's store is a memory store), and
// the series of a limit that a reload removed are removed. Attach the
// metrics to the rules' limiters as well, with
// rules.WithLimiterOptions(core.WithObserver(m.Observe)). TrackRules
// returns an error for a nil engine or one already followed.
func (m *Metrics) TrackRules(e *rules.Engine) error { return m.cfg.Follow(e) }

// Collect sends the metrics' current values, reading the memory stores'
// key counts, and removes the series of the rules' limits that reloads
// removed. It implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.rulesMu.Lock()
	counts, inForce := m.cfg.TrackedKeys()
	if inForce != nil {
		m.retire(inForce)
	}
	m.rulesMu.Unlock()
	m.requests.Collect(ch)
	m.decisions.Collect(ch)
	m.near.Collect(ch)
	m.actions.Collect(ch)
	m.duration.Collect(ch)
	m.storeErrs.Collect(ch)
	m.missing.Collect(ch)
	for _, c := range counts {
		g, err := prometheus.NewConstMetric(m.trackedKeys, prometheus.GaugeValue, float64(c.Keys), c.Limit)
		if err != nil {
			g = prometheus.NewInvalidMetric(m.trackedKeys, err)
		}
		ch <- g
	}
	if m.outOfMemory != nil {
		n, _ := m.cfg.OutOfMemory()
		ch <- prometheus.MustNewConstMetric(m.outOfMemory, prometheus.CounterValue, float64(n), m.cfg.Store)
	}
}

// retire removes the series of the rules' limits no longer in force, at
// this scrape and at later ones, should a request still in flight under
// the old rules bring them back. The names of retired limits are kept
// until they come back in force, up to maxRetired of them. The caller
// holds rulesMu since it read now.
func (m *Metrics) retire(now map[string]bool) {
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
	m.limits.Delete(name, func() {
		match := prometheus.Labels{observe.LabelLimit: name}
		m.requests.DeletePartialMatch(match)
		m.decisions.DeletePartialMatch(match)
		m.near.DeletePartialMatch(match)
		m.actions.DeletePartialMatch(match)
		m.duration.DeletePartialMatch(match)
		m.missing.DeletePartialMatch(match)
	})
}
