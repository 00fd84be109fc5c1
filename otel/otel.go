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
// the same attributes as the Prometheus metrics of the ratekitprom package.
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
//
// ratekit.requests counts each request once, under the limit whose
// decision is the request's (the core.Event marked Decisive: the most
// restrictive of its limits), and ratekit.decisions counts each limit's
// decision, once per limit that decided the request. A request under two
// limits (core.WithLimit, or two rules) thus adds 1 to ratekit.requests
// and 2 to ratekit.decisions: the sum of ratekit.requests over its
// attributes is the number of requests, and ratekit.decisions tells what
// each limit decided.
//
// The decision attribute names the core.Outcome: "allowed", "denied",
// "shadow_denied" (shadow mode, core.WithShadow), "soft_allowed" (soft
// throttling, core.WithSoftPercent), "elastic_allowed" (admitted beyond
// the limit while the server had room, core.WithElastic),
// "error_allowed" (the store failed,
// fail open), "error_denied" (the store failed, fail closed), and
// "outcome_N" for an outcome N that core adds later.
//
// ratekit.store.duration records, in seconds, the time the store took for
// each decision of a limit, the memory store's included: it decides in
// about 100ns, so the histogram's buckets start at 1µs, and a decision
// faster than the clock's resolution is recorded as 0. A store call that
// decides several limits is recorded once for each.
//
// ratekit.tracked_keys reports, at each collection, the keys memory stores
// track for each limit: the limits given to WithMemoryStore, and the
// limits of the rules in force in the engines given to TrackRules.
//
// The action attribute names the core.ActionKind of an operator's action
// on a key, "reset" or "grant", and the result attribute tells how it
// went: "ok", "error", or "not_found" for a reset of a key the store did
// not track. The limit of an action is the limiter's first limit
// (core.Action.Limit).
//
// Attribute values come only from limit names, the store name and these
// decision, action and result names: never from a client key, an IP
// address, an error message or the reason an operator gives for an
// action, so the number of series is bounded by the number of configured
// limits. With rules, the limits are the rules' (named after their
// descriptor path, such as "auth/remote_address@POST/login"), and a reload
// may remove some. OpenTelemetry has no way to delete a series:
// ratekit.tracked_keys, an observable gauge, reports only the limits in
// force and so simply stops reporting a removed one, but the series of the
// counters and of the histogram stay. With cumulative temporality (the
// SDK's default, and what the Prometheus exporter uses) the SDK exports
// them, no longer changing, for as long as the meter provider lives; with
// delta temporality they stop once nothing more is recorded for them.
package ratekitotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// meterName is the instrumentation scope of every instrument.
const meterName = "github.com/ratekit/ratekit/otel"

// durationBuckets are the boundaries, in seconds, of the store-duration
// histogram: from 1µs (the memory store decides in about 100ns) to 1s (a
// struggling remote store).
var durationBuckets = []float64{
	0.000001, 0.0000025, 0.000005,
	0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1,
}

// Metrics records limiter decisions and operator actions as OpenTelemetry
// metrics. Build it with New and attach its Observe method with
// core.WithObserver and its ObserveAction method with
// core.WithActionObserver; one Metrics may observe any number of
// limiters. It is safe for concurrent use.
type Metrics struct {
	store    string
	nearFrac float64
	keys     *trackedKeys

	ctx         context.Context
	requests    metric.Int64Counter
	decisions   metric.Int64Counter
	nearLimit   metric.Int64Counter
	actions     metric.Int64Counter
	duration    metric.Float64Histogram
	storeErrors metric.Int64Counter
	errorOpts   []metric.AddOption // {store}

	// limits maps a limit name to its precomputed options. It is copied on
	// write: a limit is added once, on its first event, and read on every
	// event after that without a lock.
	limits atomic.Pointer[map[string]*limitOptions]
	mu     sync.Mutex // serialises writers of limits
}

// limitOptions holds the measurement options of one limit, built once so
// that recording a decision builds no attribute set.
type limitOptions struct {
	near     []metric.AddOption    // {limit}
	duration []metric.RecordOption // {store, limit}

	// actions holds the options of actions{limit, action, result} for
	// each of actionSeries; read-only once built.
	actions map[actionLabels][]metric.AddOption

	// outcomes holds the options of requests and decisions{limit,
	// decision} for each outcome, filled on the outcome's first event.
	// Indexing by the whole range of core.Outcome lets outcomes added to
	// core later flow through under their numbers (Outcome.String).
	outcomes [math.MaxUint8 + 1]atomic.Pointer[[]metric.AddOption]
}

// actionSeries are the action and result attributes whose options are
// built for a limit at its first event. A grant finds nothing to reset, so
// it has no not_found.
var actionSeries = []actionLabels{
	{core.ActionReset, "ok"}, {core.ActionReset, "not_found"}, {core.ActionReset, "error"},
	{core.ActionGrant, "ok"}, {core.ActionGrant, "error"},
}

// actionLabels are the action and result attributes of an action.
type actionLabels struct {
	action core.ActionKind
	result string
}

// trackedStore is a memory store whose keys are reported per limit.
type trackedStore struct {
	store  *core.MemoryStore
	limits []core.Limit
}

// Option configures Metrics.
type Option func(*Metrics) error

// WithStore sets the value of the store attribute of the store-duration
// and store-error instruments, such as "redis" (default "memory").
func WithStore(name string) Option {
	return func(m *Metrics) error {
		if name == "" {
			return errors.New("ratekitotel: WithStore: the store name is empty")
		}
		if len(name) > 64 {
			return fmt.Errorf("ratekitotel: WithStore: store name %.20q... is longer than 64 bytes", name)
		}
		m.store = name
		return nil
	}
}

// WithNearLimit sets the fraction of a limit below which the remaining
// requests of an admitted decision count as near the limit (default 0.2):
// with 0.2, a limit of 10 counts the admissions that leave 0 or 1 request.
// The fraction must be in (0, 1].
func WithNearLimit(fraction float64) Option {
	return func(m *Metrics) error {
		if !(fraction > 0 && fraction <= 1) { // also rejects NaN
			return fmt.Errorf("ratekitotel: WithNearLimit: fraction %v must be in (0, 1]", fraction)
		}
		m.nearFrac = fraction
		return nil
	}
}

// WithMemoryStore reports the number of keys s tracks for each of limits
// in the gauge ratekit.tracked_keys, read at collection time. It may be
// given more than once; limits with the same name, in one store or in
// several, are reported as one sum. For the limits of rules, which
// reloads replace, see Metrics.TrackRules.
func WithMemoryStore(s *core.MemoryStore, limits ...core.Limit) Option {
	return func(m *Metrics) error {
		if s == nil {
			return errors.New("ratekitotel: WithMemoryStore: the store is nil")
		}
		if len(limits) == 0 {
			return errors.New("ratekitotel: WithMemoryStore: no limits to report")
		}
		for _, l := range limits {
			if _, err := l.Params(time.Nanosecond); err != nil {
				return fmt.Errorf("ratekitotel: WithMemoryStore: %w", err)
			}
		}
		m.keys.stores = append(m.keys.stores, trackedStore{s, slices.Clone(limits)})
		return nil
	}
}

// New returns Metrics whose instruments come from the meter
// "github.com/ratekit/ratekit/otel" of mp, ready to attach with
// core.WithObserver(m.Observe) and core.WithActionObserver(m.ObserveAction).
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if v := reflect.ValueOf(mp); mp == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, errors.New("ratekitotel: New: the meter provider is nil")
	}
	m := &Metrics{store: "memory", nearFrac: 0.2, ctx: context.Background(), keys: &trackedKeys{}}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("ratekitotel: New: nil option")
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	m.limits.Store(&map[string]*limitOptions{})
	m.errorOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("store", m.store)))}
	m.keys.index()

	meter := mp.Meter(meterName)
	var err, e error
	m.requests, e = meter.Int64Counter("ratekit.requests",
		metric.WithDescription("Requests decided, each counted once, by the limit whose decision was the request's and that decision."),
		metric.WithUnit("{request}"))
	err = errors.Join(err, e)
	m.decisions, e = meter.Int64Counter("ratekit.decisions",
		metric.WithDescription("Decisions of limits, one for each limit that decided a request, by limit and decision."),
		metric.WithUnit("{decision}"))
	err = errors.Join(err, e)
	m.nearLimit, e = meter.Int64Counter("ratekit.near_limit",
		metric.WithDescription("Admitted requests that left less than the near-limit fraction of the limit."),
		metric.WithUnit("{request}"))
	err = errors.Join(err, e)
	m.actions, e = meter.Int64Counter("ratekit.actions",
		metric.WithDescription("Operator actions on keys, by limit, action (reset, grant) and result (ok, not_found, error)."),
		metric.WithUnit("{action}"))
	err = errors.Join(err, e)
	m.duration, e = meter.Float64Histogram("ratekit.store.duration",
		metric.WithDescription("Time the store took for each decision of a limit."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	m.storeErrors, e = meter.Int64Counter("ratekit.store.errors",
		metric.WithDescription("Decisions on which the store failed."),
		metric.WithUnit("{error}"))
	err = errors.Join(err, e)
	// The gauge is there even without memory stores, for TrackRules; it
	// reports only what its callback observes, nothing until then.
	_, e = meter.Int64ObservableGauge("ratekit.tracked_keys",
		metric.WithDescription("Keys the memory store tracks, by limit."),
		metric.WithUnit("{key}"),
		metric.WithInt64Callback(m.keys.observe))
	err = errors.Join(err, e)
	if err != nil {
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
func (m *Metrics) TrackRules(e *rules.Engine) error {
	if e == nil {
		return errors.New("ratekitotel: TrackRules: the engine is nil")
	}
	k := m.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if slices.Contains(k.engines, e) {
		return errors.New("ratekitotel: TrackRules: the engine is already followed")
	}
	k.engines = append(k.engines, e)
	return nil
}

// trackedKeys feeds the gauge ratekit.tracked_keys: the memory stores
// given to New and the rules engines that TrackRules follows.
type trackedKeys struct {
	// stores are the memory stores of WithMemoryStore; sources, series
	// and byName are built from them by index, once options are applied,
	// and read-only after.
	stores  []trackedStore
	sources []keySource
	series  [][]metric.ObserveOption // {limit}, one per limit name
	byName  map[string]int           // index in series of a limit name

	// mu guards the engines and ruleSeries, and serialises the
	// collections that read them.
	mu      sync.Mutex
	engines []*rules.Engine
	// ruleSeries holds the options of the rules' limits reported at the
	// last collection, those in force only, so that it does not grow
	// with reloads.
	ruleSeries map[string][]metric.ObserveOption
}

// keySource is one limit of a memory store and the series it adds to.
type keySource struct {
	store  *core.MemoryStore
	limit  core.Limit
	series int
}

// index builds the sources and series of the memory stores.
func (k *trackedKeys) index() {
	k.byName = map[string]int{}
	for _, ts := range k.stores {
		for _, l := range ts.limits {
			name := limitName(l)
			i, ok := k.byName[name]
			if !ok {
				i = len(k.series)
				k.byName[name] = i
				k.series = append(k.series, limitObserveOptions(name))
			}
			k.sources = append(k.sources, keySource{ts.store, l, i})
		}
	}
}

// observe is the callback of the tracked-keys gauge: it reports the
// memory stores' limits, and the limits in force of the followed engines
// whose store counts its keys.
func (k *trackedKeys) observe(_ context.Context, o metric.Int64Observer) error {
	sums := make([]int64, len(k.series))
	for _, s := range k.sources {
		sums[s.series] += int64(s.store.TrackedKeys(s.limit))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var names []string // the rules' limits of no memory-store series, in order
	var ruleSums map[string]int64
	for _, e := range k.engines {
		for _, l := range e.Limits() {
			n, ok := e.TrackedKeys(l)
			if !ok {
				break // the engine's store does not count its keys
			}
			name := l.Name
			if name == "" {
				name = limitName(l)
			}
			if i, ok := k.byName[name]; ok {
				sums[i] += int64(n)
				continue
			}
			if ruleSums == nil {
				ruleSums = map[string]int64{}
			}
			if _, ok := ruleSums[name]; !ok {
				names = append(names, name)
			}
			ruleSums[name] += int64(n)
		}
	}
	for i, opts := range k.series {
		o.Observe(sums[i], opts...)
	}
	if len(k.engines) == 0 {
		return nil
	}
	next := make(map[string][]metric.ObserveOption, len(names))
	for _, name := range names {
		opts := k.ruleSeries[name]
		if opts == nil {
			opts = limitObserveOptions(name)
		}
		next[name] = opts
		o.Observe(ruleSums[name], opts...)
	}
	k.ruleSeries = next
	return nil
}

// limitObserveOptions returns the options of tracked_keys{limit}.
func limitObserveOptions(name string) []metric.ObserveOption {
	return []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("limit", name)))}
}

// limitName returns the name core reports for l in its events, which for
// a limit without a name is derived from its rate. l was validated by
// WithMemoryStore, or is a rule's.
func limitName(l core.Limit) string {
	p, _ := l.Params(time.Nanosecond)
	return p.Name
}

// Observe records one decision: in ratekit.decisions, and in
// ratekit.requests when the event is Decisive. Attach it with
// core.WithObserver(m.Observe).
func (m *Metrics) Observe(e core.Event) {
	lo := (*m.limits.Load())[e.Limit]
	if lo == nil {
		lo = m.add(e.Limit)
	}
	opts := lo.outcomes[e.Outcome].Load()
	if opts == nil {
		opts = lo.outcome(e.Limit, e.Outcome)
	}
	m.decisions.Add(m.ctx, 1, *opts...)
	if e.Decisive {
		m.requests.Add(m.ctx, 1, *opts...)
	}
	switch e.Outcome {
	case core.Allowed:
		d := e.Decision
		if d.Quota > 0 && float64(d.Remaining) < m.nearFrac*float64(d.Quota) {
			m.nearLimit.Add(m.ctx, 1, lo.near...)
		}
	case core.ErrorAllowed, core.ErrorDenied:
		m.storeErrors.Add(m.ctx, 1, m.errorOpts...)
	}
	m.duration.Record(m.ctx, e.Latency.Seconds(), lo.duration...)
}

// ObserveAction records one operator action, Limiter.Reset or
// Limiter.Grant. Attach it with core.WithActionObserver(m.ObserveAction).
// The action's reason is the operator's text and never becomes an
// attribute.
func (m *Metrics) ObserveAction(a core.Action) {
	lo := (*m.limits.Load())[a.Limit]
	if lo == nil {
		lo = m.add(a.Limit)
	}
	l := actionLabels{a.Kind, actionResult(a)}
	opts, ok := lo.actions[l]
	if !ok { // an action that core adds later
		opts = actionOptions(a.Limit, l)
	}
	m.actions.Add(m.ctx, 1, opts...)
}

// actionResult returns the value of the result attribute of an action.
func actionResult(a core.Action) string {
	switch {
	case a.Err != nil:
		return "error"
	case a.Kind == core.ActionReset && !a.Found:
		return "not_found"
	}
	return "ok"
}

// actionOptions returns the options of actions{limit, action, result}.
func actionOptions(name string, l actionLabels) []metric.AddOption {
	set := attribute.NewSet(attribute.String("limit", name),
		attribute.String("action", string(l.action)), attribute.String("result", l.result))
	return []metric.AddOption{metric.WithAttributeSet(set)}
}

// add returns the options of limit name, building them on its first event.
func (m *Metrics) add(name string) *limitOptions {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.limits.Load()
	if lo := old[name]; lo != nil {
		return lo
	}
	limit := attribute.String("limit", name)
	lo := &limitOptions{
		near: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limit))},
		duration: []metric.RecordOption{metric.WithAttributeSet(
			attribute.NewSet(attribute.String("store", m.store), limit))},
		actions: make(map[actionLabels][]metric.AddOption, len(actionSeries)),
	}
	for _, a := range actionSeries {
		lo.actions[a] = actionOptions(name, a)
	}
	next := make(map[string]*limitOptions, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = lo
	m.limits.Store(&next)
	return lo
}

// outcome returns the options of requests and decisions{limit, decision}
// for outcome o, building them on the outcome's first event. Two
// goroutines may build them at once; they build equal options, and either
// may win.
func (lo *limitOptions) outcome(name string, o core.Outcome) *[]metric.AddOption {
	set := attribute.NewSet(attribute.String("limit", name), attribute.String("decision", o.String()))
	opts := []metric.AddOption{metric.WithAttributeSet(set)}
	if lo.outcomes[o].CompareAndSwap(nil, &opts) {
		return &opts
	}
	return lo.outcomes[o].Load()
}
