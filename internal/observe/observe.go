// Package observe is the model of ratekit's metrics exporters, the
// Prometheus module (ratekitprom) and the OpenTelemetry module
// (ratekitotel): which metrics there are, what each of core's events and
// operator actions counts in them, and the options both take. Each
// exporter keeps its own Option type and API and writes to its own
// backend; this package decides what to write.
//
// The metrics (Metric), under their Prometheus and OpenTelemetry names:
//
//	ratekit_requests_total          ratekit.requests        {limit, decision}         counter
//	ratekit_decisions_total         ratekit.decisions       {limit, decision}         counter
//	ratekit_near_limit_total        ratekit.near_limit      {limit}                   counter
//	ratekit_actions_total           ratekit.actions         {limit, action, result}   counter
//	ratekit_store_duration_seconds  ratekit.store.duration  {store, limit}            histogram (s)
//	ratekit_store_errors_total      ratekit.store.errors    {store}                   counter
//	ratekit_tracked_keys            ratekit.tracked_keys    {limit}                   gauge
//	ratekit_missing_key_total       ratekit.missing_key     {limit}                   counter
//
// A core.Event (Config.Classify) counts one decision of its limit, under
// the decision named by its core.Outcome, and, when it is Decisive (the
// most restrictive limit of the request), one request: the requests count
// each request once, the decisions once per limit. An Allowed event that
// leaves less than the near-limit fraction (WithNearLimit, default 0.2) of
// its Quota counts near the limit; ErrorAllowed and ErrorDenied (the store
// failed, fail open or closed) count a store error; every event's Latency
// is a store-duration sample, the memory store's and zeros included. A
// MissingKey event (a request without a key, answered 400) counts only
// one missing-key request of its limit: no limit decided it, so it is in
// neither the requests nor the decisions, and took no store time.
//
// A core.Action (ActionOf) counts under its kind (reset, grant) and its
// result: error when it failed, not_found for a reset of a key the store
// did not track, ok otherwise.
//
// A limit's series exist from its first event or action (Limits): the
// decisions of Outcomes and the actions of Actions at zero, so that
// dashboards see zeros rather than gaps; an outcome or action that core
// adds later is counted under its own name (ByOutcome, ByAction).
//
// ratekit_tracked_keys (Config.TrackedKeys) is the keys memory stores
// track, summed per limit name, for the limits of WithMemoryStore and
// those of the rules in force in the engines of TrackRules.
//
// ratekit_store_out_of_memory_total (ratekit.store.out_of_memory,
// {store}, a counter: Config.OutOfMemory) is the decisions that Redis
// stores made while Redis was out of memory, summed over the stores of
// WithOutOfMemory; without it, the metric is not exported.
//
// Label values come only from limit names, the store name (WithStore) and
// the fixed decision, action and result names: never from a client key,
// an address, an error message or an operator's reason, so the number of
// series is bounded by the number of limits.
package observe

import (
	"strings"

	"github.com/ratekit/ratekit/core"
)

// The names of the labels (OpenTelemetry: attributes).
const (
	LabelLimit    = "limit"    // the limit's name, as in core.Event.Limit
	LabelDecision = "decision" // the core.Outcome's name
	LabelStore    = "store"    // the store's name, WithStore
	LabelAction   = "action"   // the core.ActionKind
	LabelResult   = "result"   // ResultOK, ResultNotFound or ResultError
)

// A Metric is one of the metrics both exporters export.
type Metric struct {
	Prometheus string   // its Prometheus name
	OTel       string   // its OpenTelemetry instrument name
	Unit       string   // its OpenTelemetry unit
	Labels     []string // its labels, in the order of Prometheus's label values
	Help       string   // its description; see Config.Help
}

// The metrics.
var (
	Requests = Metric{Prometheus: "ratekit_requests_total", OTel: "ratekit.requests", Unit: "{request}",
		Labels: []string{LabelLimit, LabelDecision},
		Help:   "Requests decided, once each, by the limit whose decision was the request's and that decision (" + outcomeNames() + ")."}
	Decisions = Metric{Prometheus: "ratekit_decisions_total", OTel: "ratekit.decisions", Unit: "{decision}",
		Labels: []string{LabelLimit, LabelDecision},
		Help:   "Decisions of each limit, one per limit that decided a request, by limit and decision."}
	NearLimit = Metric{Prometheus: "ratekit_near_limit_total", OTel: "ratekit.near_limit", Unit: "{request}",
		Labels: []string{LabelLimit},
		Help:   "Requests admitted with less than %g%% of the limit remaining."} // the fraction, in percent
	OperatorActions = Metric{Prometheus: "ratekit_actions_total", OTel: "ratekit.actions", Unit: "{action}",
		Labels: []string{LabelLimit, LabelAction, LabelResult},
		Help:   "Operator actions on keys, by limit, action (reset, grant) and result (ok, not_found, error)."}
	StoreDuration = Metric{Prometheus: "ratekit_store_duration_seconds", OTel: "ratekit.store.duration", Unit: "s",
		Labels: []string{LabelStore, LabelLimit},
		Help:   "Time the store took for each decision of a limit."}
	StoreErrors = Metric{Prometheus: "ratekit_store_errors_total", OTel: "ratekit.store.errors", Unit: "{error}",
		Labels: []string{LabelStore},
		Help:   "Decisions whose store call failed; their decision, error_allowed or error_denied, tells the fail mode."}
	TrackedKeys = Metric{Prometheus: "ratekit_tracked_keys", OTel: "ratekit.tracked_keys", Unit: "{key}",
		Labels: []string{LabelLimit},
		Help:   "Keys the memory store tracks for the limit."}
	MissingKeys = Metric{Prometheus: "ratekit_missing_key_total", OTel: "ratekit.missing_key", Unit: "{request}",
		Labels: []string{LabelLimit},
		Help:   "Requests answered 400 Bad Request, undecided, because they had no rate-limit key (an empty key, or a key function or plan that found no value), by the first limit of the limiter they came to (\"\" for a plan limiter)."}
)

// Outcomes are the decisions whose series a limit has from its first
// event, in the order the help of Requests names them.
var Outcomes = []core.Outcome{
	core.Allowed, core.Denied, core.ShadowDenied, core.SoftAllowed, core.ElasticAllowed,
	core.ErrorAllowed, core.ErrorDenied,
}

func outcomeNames() string {
	names := make([]string, len(Outcomes))
	for i, o := range Outcomes {
		names[i] = o.String()
	}
	return strings.Join(names, ", ")
}

// A Count is what one event counts, besides its decision (always, under
// its Outcome) and its store-duration sample (always, its Latency), but
// for a MissingKey event, which counts only a missing key.
type Count struct {
	Request    bool // the event is Decisive: count a request under its Outcome
	Near       bool // admitted with less than the near-limit fraction left
	StoreError bool // the store failed (ErrorAllowed, ErrorDenied)
	MissingKey bool // the request had no key (MissingKey): count it, and nothing else
}

// Classify returns what e counts. It takes a pointer, for the request
// path: an event is too large to copy for free.
func (c *Config) Classify(e *core.Event) Count {
	if e.Outcome == core.MissingKey {
		return Count{MissingKey: true}
	}
	n := Count{Request: e.Decisive}
	switch e.Outcome {
	case core.Allowed:
		d := &e.Decision
		n.Near = d.Quota > 0 && float64(d.Remaining) < c.NearLimit*float64(d.Quota)
	case core.ErrorAllowed, core.ErrorDenied:
		n.StoreError = true
	}
	return n
}

// The values of the result label.
const (
	ResultOK       = "ok"
	ResultNotFound = "not_found" // a reset of a key the store did not track
	ResultError    = "error"
)

// An Action is the action and result labels of an operator's action.
type Action struct {
	Kind   core.ActionKind
	Result string
}

// Actions are the action series a limit has from its first event. A grant
// finds nothing to reset, so it has no not_found.
var Actions = []Action{
	{core.ActionReset, ResultOK}, {core.ActionReset, ResultNotFound}, {core.ActionReset, ResultError},
	{core.ActionGrant, ResultOK}, {core.ActionGrant, ResultError},
}

// ActionOf returns the labels a counts under. The action's reason is the
// operator's text and never becomes a label.
func ActionOf(a core.Action) Action {
	switch {
	case a.Err != nil:
		return Action{a.Kind, ResultError}
	case a.Kind == core.ActionReset && !a.Found:
		return Action{a.Kind, ResultNotFound}
	}
	return Action{a.Kind, ResultOK}
}
