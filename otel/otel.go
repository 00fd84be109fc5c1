// Package ratekitotel records the decisions of ratekit limiters and the
// operator's actions on their keys as OpenTelemetry metrics. It is a ready
// observer for core's hooks, in a module of its own so that the root
// module does not depend on OpenTelemetry. One option attaches it, and a
// second records the operator's actions (Limiter.Reset and Limiter.Grant):
//
//	m, err := ratekitotel.New(otel.GetMeterProvider())
//	// ...
//	lim, err := core.NewLimiter(limit,
//		core.WithObserver(m.Observe),
//		core.WithActionObserver(m.ObserveAction))
//
// The instruments, from the meter "github.com/ratekit/ratekit/otel", carry
// the attributes of the Prometheus metrics of package ratekitprom, and
// count alike: both follow one model, described in docs/operations.md.
// OpenTelemetry's Prometheus exporter turns the dots into underscores and
// adds "_total" to counters and the unit to the histogram, which gives the
// Prometheus names:
//
//	OpenTelemetry              attributes              Prometheus
//	ratekit.requests           limit, decision         ratekit_requests_total
//	ratekit.decisions          limit, decision         ratekit_decisions_total
//	ratekit.near_limit         limit                   ratekit_near_limit_total
//	ratekit.actions            limit, action, result   ratekit_actions_total
//	ratekit.store.duration     store, limit            ratekit_store_duration_seconds
//	ratekit.store.errors       store                   ratekit_store_errors_total
//	ratekit.tracked_keys       limit                   ratekit_tracked_keys
//	ratekit.store.out_of_memory store                   ratekit_store_out_of_memory_total (WithOutOfMemory)
//	ratekit.missing_key        limit                   ratekit_missing_key_total
//
// ratekit.requests counts each request once, under the limit whose
// decision is the request's (the core.Event marked Decisive: the most
// restrictive), and ratekit.decisions once per limit that decided it. The
// decision attribute names the core.Outcome: "allowed", "denied",
// "shadow_denied", "soft_allowed", "elastic_allowed", "error_allowed" or
// "error_denied" (the store failed, fail open or closed), and "outcome_N"
// for an outcome N that core adds later. The action attribute is "reset"
// or "grant", the result "ok", "error" or "not_found" (a reset of a key
// the store did not track). ratekit.missing_key counts the requests
// answered 400 because they had no key (core.MissingKey: a key function
// or plan that found no value, an empty key), under the first limit of
// the limiter they came to ("" for a plan limiter); no limit decided
// them, so they are not in ratekit.requests.
//
// Attribute values come only from limit names, the store name and these
// fixed names: never from a client key, an IP address, an error message or
// an operator's reason, so the number of series is bounded by the number
// of configured limits. With rules, a reload may remove limits, and
// OpenTelemetry has no way to delete a series: ratekit.tracked_keys stops
// reporting a removed limit, but the series of the counters and of the
// histogram stay. With cumulative temporality (the SDK's default, and
// what the Prometheus exporter uses) the SDK exports them, no longer
// changing, for as long as the meter provider lives; with delta
// temporality they stop once nothing more is recorded for them.
package ratekitotel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/observe"
	"github.com/ratekit/ratekit/rules"
)

// meterName is the instrumentation scope of every instrument.
const meterName = "github.com/ratekit/ratekit/otel"

// Metrics records limiter decisions and operator actions as OpenTelemetry
// metrics. Build it with New and attach its Observe method with
// core.WithObserver and its ObserveAction method with
// core.WithActionObserver; one Metrics may observe any number of
// limiters. It is safe for concurrent use.
type Metrics struct {
	cfg    *observe.Config
	limits *observe.Limits[limitOptions]

	ctx         context.Context
	requests    metric.Int64Counter
	decisions   metric.Int64Counter
	nearLimit   metric.Int64Counter
	actions     metric.Int64Counter
	duration    metric.Float64Histogram
	storeErrors metric.Int64Counter
	errorOpts   []metric.AddOption // {store}
	missingKeys metric.Int64Counter

	// keyOpts holds the options of tracked_keys{limit} of the limits
	// reported at the last collection, so that it does not grow with
	// reloads; keyMu guards it and serialises collections.
	keyMu   sync.Mutex
	keyOpts map[string][]metric.ObserveOption
}

// limitOptions holds the measurement options of one limit, built once so
// that recording a decision builds no attribute set.
type limitOptions struct {
	outcomes *observe.ByOutcome[[]metric.AddOption] // requests and decisions{limit, decision}
	actions  *observe.ByAction[[]metric.AddOption]  // actions{limit, action, result}
	near     []metric.AddOption                     // {limit}: near_limit's, and missing_key's
	duration []metric.RecordOption                  // {store, limit}
}

// Option configures Metrics.
type Option func(*Metrics) error

// WithStore sets the value of the store attribute of the store-duration
// and store-error instruments, such as "redis" (default "memory"): valid
// UTF-8, of at most 64 bytes.
func WithStore(name string) Option {
	return func(m *Metrics) error { return m.cfg.SetStore(name) }
}

// WithNearLimit sets the fraction of a limit below which the remaining
// requests of an admitted decision count as near the limit (default 0.2):
// with 0.2, a limit of 10 counts the admissions that leave 0 or 1 request.
// The fraction must be in (0, 1].
func WithNearLimit(fraction float64) Option {
	return func(m *Metrics) error { return m.cfg.SetNearLimit(fraction) }
}

// WithMemoryStore reports the number of keys s tracks for each of limits
// in the gauge ratekit.tracked_keys, read at collection time. It may be
// given more than once; limits with the same name, in one store or in
// several, are reported as one sum. For the limits of rules, which
// reloads replace, see Metrics.TrackRules.
func WithMemoryStore(s *core.MemoryStore, limits ...core.Limit) Option {
	return func(m *Metrics) error { return m.cfg.AddMemoryStore(s, limits) }
}

// WithOutOfMemory records ratekit.store.out_of_memory{store}: the
// decisions a Redis store made while Redis was out of memory (maxmemory),
// read with count at collection time. Pass the store's method,
// WithOutOfMemory(store.OutOfMemory) (package redisstore); given several
// times, the counts are summed. A rate above zero means Redis is full:
// the store still decides, clients with a key in Redis and new clients in
// process, so ratekit.store.errors does not show it.
func WithOutOfMemory(count func() int64) Option {
	return func(m *Metrics) error { return m.cfg.AddOutOfMemory(count) }
}

// New returns Metrics whose instruments come from the meter
// "github.com/ratekit/ratekit/otel" of mp, ready to attach with
// core.WithObserver(m.Observe) and core.WithActionObserver(m.ObserveAction).
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if v := reflect.ValueOf(mp); mp == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, errors.New("ratekitotel: New: the meter provider is nil")
	}
	m := &Metrics{cfg: observe.NewConfig("ratekitotel"), ctx: context.Background()}
	if err := observe.Apply(m.cfg, m, opts); err != nil {
		return nil, err
	}
	m.limits = observe.NewLimits(m.newLimit)
	m.errorOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(observe.LabelStore, m.cfg.Store)))}

	meter := mp.Meter(meterName)
	var err error
	counter := func(c observe.Metric) metric.Int64Counter {
		i, e := meter.Int64Counter(c.OTel, metric.WithDescription(m.cfg.Help(c)), metric.WithUnit(c.Unit))
		err = errors.Join(err, e)
		return i
	}
	m.requests = counter(observe.Requests)
	m.decisions = counter(observe.Decisions)
	m.nearLimit = counter(observe.NearLimit)
	m.actions = counter(observe.OperatorActions)
	m.storeErrors = counter(observe.StoreErrors)
	m.missingKeys = counter(observe.MissingKeys)
	var e1, e2 error
	d, k := observe.StoreDuration, observe.TrackedKeys
	m.duration, e1 = meter.Float64Histogram(d.OTel, metric.WithDescription(m.cfg.Help(d)), metric.WithUnit(d.Unit),
		metric.WithExplicitBucketBoundaries(m.cfg.Buckets...))
	// The gauge is there even without memory stores, for TrackRules; it
	// reports only what its callback observes, nothing until then.
	_, e2 = meter.Int64ObservableGauge(k.OTel, metric.WithDescription(m.cfg.Help(k)), metric.WithUnit(k.Unit),
		metric.WithInt64Callback(m.observeKeys))
	if _, ok := m.cfg.OutOfMemory(); ok {
		o := observe.OutOfMemory
		_, e := meter.Int64ObservableCounter(o.OTel, metric.WithDescription(m.cfg.Help(o)), metric.WithUnit(o.Unit),
			metric.WithInt64Callback(func(_ context.Context, obs metric.Int64Observer) error {
				n, _ := m.cfg.OutOfMemory()
				obs.Observe(n, metric.WithAttributeSet(attribute.NewSet(attribute.String(observe.LabelStore, m.cfg.Store))))
				return nil
			}))
		err = errors.Join(err, e)
	}
	if err = errors.Join(err, e1, e2); err != nil {
		return nil, fmt.Errorf("ratekitotel: creating instruments: %w", err)
	}
	return m, nil
}

// TrackRules makes the gauge ratekit.tracked_keys follow the rules in
// force in e, which reloads (rules.Engine.Load) may replace: at each
// collection, it reports the keys the engine's store tracks for each
// limit of e.Limits(), when that store is a memory store (the engine's
// default); a limit that a reload removed is no longer reported. A rule's
// limit named as a limit given to WithMemoryStore, or as one of another
// engine, is reported as one sum with it. Attach the metrics to the rules'
// limiters as well, with rules.WithLimiterOptions(core.WithObserver(m.Observe)).
//
// The counters and the histogram of a removed rule's limit are not
// removed: OpenTelemetry cannot delete a series (see the package
// documentation). TrackRules returns an error for a nil engine or one
// already followed.
func (m *Metrics) TrackRules(e *rules.Engine) error { return m.cfg.Follow(e) }

// observeKeys is the callback of the tracked-keys gauge.
func (m *Metrics) observeKeys(_ context.Context, o metric.Int64Observer) error {
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	counts, _ := m.cfg.TrackedKeys()
	next := make(map[string][]metric.ObserveOption, len(counts))
	for _, c := range counts {
		opts := m.keyOpts[c.Limit]
		if opts == nil {
			opts = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(observe.LabelLimit, c.Limit)))}
		}
		next[c.Limit] = opts
		o.Observe(c.Keys, opts...)
	}
	m.keyOpts = next
	return nil
}

// Observe records one decision: in ratekit.decisions, and in
// ratekit.requests when the event is Decisive; or a request without a key
// (core.MissingKey), in ratekit.missing_key. Attach it with
// core.WithObserver(m.Observe).
func (m *Metrics) Observe(e core.Event) {
	lo := m.limits.Get(e.Limit)
	c := m.cfg.Classify(&e)
	if c.MissingKey {
		m.missingKeys.Add(m.ctx, 1, lo.near...)
		return
	}
	opts := *lo.outcomes.Get(e.Outcome)
	m.decisions.Add(m.ctx, 1, opts...)
	if c.Request {
		m.requests.Add(m.ctx, 1, opts...)
	}
	if c.Near {
		m.nearLimit.Add(m.ctx, 1, lo.near...)
	}
	if c.StoreError {
		m.storeErrors.Add(m.ctx, 1, m.errorOpts...)
	}
	m.duration.Record(m.ctx, e.Latency.Seconds(), lo.duration...)
}

// ObserveAction records one operator action, Limiter.Reset or
// Limiter.Grant. Attach it with core.WithActionObserver(m.ObserveAction).
// The action's reason is the operator's text and never becomes an
// attribute.
func (m *Metrics) ObserveAction(a core.Action) {
	m.actions.Add(m.ctx, 1, m.limits.Get(a.Limit).actions.Get(observe.ActionOf(a))...)
}

// newLimit builds the options of a limit at its first event.
func (m *Metrics) newLimit(name string) *limitOptions {
	limit := attribute.String(observe.LabelLimit, name)
	return &limitOptions{
		outcomes: observe.NewByOutcome(func(o core.Outcome) *[]metric.AddOption {
			return &[]metric.AddOption{metric.WithAttributeSet(
				attribute.NewSet(limit, attribute.String(observe.LabelDecision, o.String())))}
		}),
		actions: observe.NewByAction(func(a observe.Action) []metric.AddOption {
			return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limit,
				attribute.String(observe.LabelAction, string(a.Kind)), attribute.String(observe.LabelResult, a.Result)))}
		}),
		near:     []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limit))},
		duration: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(observe.LabelStore, m.cfg.Store), limit))},
	}
}
