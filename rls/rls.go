package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// Service answers Envoy's RateLimitService (v3) by the rules of its
// engines, one engine per domain. Register it on a gRPC server with
// Register; it is safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	engines   atomic.Pointer[[]*rules.Engine]
	o         options
	overrides overrides
}

// An Option configures a Service.
type Option func(*options) error

type options struct {
	shadow  bool
	headers *headerNames
	log     *slog.Logger
	store   core.Store // for limit overrides; nil: overrides are ignored
	limOpts []core.Option
}

type headerNames struct{ limit, remaining, reset string }

// WithShadow puts the whole service in shadow mode, as the Envoy
// service's SHADOW_MODE: requests are counted and every answer's overall
// code is OK; the descriptors' statuses still say which are over their
// limits.
func WithShadow() Option {
	return func(o *options) error { o.shadow = true; return nil }
}

// WithResponseHeaders adds three headers to every answer with a limit, for
// Envoy to add to the client's response, as the Envoy service's
// RATE_LIMIT_RESPONSE_HEADERS_ENABLED does: the named headers carry the
// requests per unit, the requests remaining and the seconds until the
// reset of the descriptor closest to its limit (of the one over its limit,
// when the request is rejected). Empty names take the Envoy service's
// defaults: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
func WithResponseHeaders(limit, remaining, reset string) Option {
	return func(o *options) error {
		h := headerNames{limit: limit, remaining: remaining, reset: reset}
		if h.limit == "" {
			h.limit = "RateLimit-Limit"
		}
		if h.remaining == "" {
			h.remaining = "RateLimit-Remaining"
		}
		if h.reset == "" {
			h.reset = "RateLimit-Reset"
		}
		for _, n := range []string{h.limit, h.remaining, h.reset} {
			if !validHeader(n) {
				return fmt.Errorf("rls: %q is not a header name", n)
			}
		}
		o.headers = &h
		return nil
	}
}

// WithLimitOverrides honours the limit that a descriptor may carry in a
// request (Envoy's per-route limit override, a descriptor's "limit"), as
// the Envoy service does: such a descriptor of a domain the service knows
// is decided by a fixed window of that many requests per unit, counted in
// store under a key made of its entries, by a limiter built with opts
// (the engines' limiter options: observers, fail mode, logger). Up to
// 1,024 distinct overrides are kept; a request with another is answered
// by its configured limit. Without this option the configured limit
// applies, and the override is ignored.
func WithLimitOverrides(store core.Store, opts ...core.Option) Option {
	return func(o *options) error {
		if store == nil {
			return errors.New("rls: WithLimitOverrides needs a store")
		}
		o.store, o.limOpts = store, opts
		return nil
	}
}

// WithLogger sets the logger of the service's warnings (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("rls: WithLogger needs a logger")
		}
		o.log = l
		return nil
	}
}

// New returns a Service that decides the requests of each engine's domain
// (its rules' Config.Domain) by that engine's rules. An engine whose rules
// are reloaded (rulesfile.Watch, rulesredis) serves its new rules, and
// its new domain, at once. Requests for a domain that no engine has get
// an answer of OK with no limit, as from the Envoy service.
func New(engines []*rules.Engine, opts ...Option) (*Service, error) {
	s := &Service{}
	for _, opt := range opts {
		if err := opt(&s.o); err != nil {
			return nil, err
		}
	}
	if s.o.log == nil {
		s.o.log = slog.Default()
	}
	if err := s.SetEngines(engines); err != nil {
		return nil, err
	}
	return s, nil
}

// SetEngines replaces the service's engines, as when a configuration
// directory gains or loses a domain's file. Requests decided meanwhile use
// either the old engines or the new ones.
func (s *Service) SetEngines(engines []*rules.Engine) error {
	seen := map[string]bool{}
	for _, e := range engines {
		if e == nil {
			return errors.New("rls: a nil engine")
		}
		d := e.Config().Domain
		if d != "" && seen[d] {
			return fmt.Errorf("rls: two engines serve domain %q", d)
		}
		seen[d] = true
	}
	es := append([]*rules.Engine(nil), engines...)
	s.engines.Store(&es)
	return nil
}

// Register registers the service on a gRPC server as
// envoy.service.ratelimit.v3.RateLimitService.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	rlspb.RegisterRateLimitServiceServer(r, s)
}

// engine returns the engine of domain, or nil.
func (s *Service) engine(domain string) *rules.Engine {
	for _, e := range *s.engines.Load() {
		if e.Config().Domain == domain {
			return e
		}
	}
	return nil
}

// errNoDomain and errNoDescriptors are the answers to requests that Envoy
// never sends; their messages are the Envoy service's.
var (
	errNoDomain      = status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	errNoDescriptors = status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	errStore         = status.Error(codes.Unavailable, "rate limit store unavailable")
	errDecide        = status.Error(codes.Internal, "rate limit decision failed")
)

// A descriptor is one descriptor of a request, being decided.
type descriptor struct {
	applied   rules.Applied
	ok        bool // a rate limit applies (applied holds it)
	unlimited bool
	cost      int
	over      bool // its cost exceeds its limit: over without asking
	decided   bool // d holds its decision
	d         core.Decision
}

// ShouldRateLimit decides a request of Envoy's rate limit filter: the
// rate limit of each descriptor is looked up in the engine of the
// request's domain (rules.Engine.Lookup) and the descriptors' limits
// decide the request together, all or nothing (core.TakeEach): a request
// over any limit is counted by none. Each descriptor's status gives its
// code, its limit, what remains of it and the time until its reset, in
// whole seconds as the Envoy service gives them; the overall code is
// OVER_LIMIT if any is over, unless the limit, or the service, is in
// shadow mode. A request admitted beyond a limit by soft throttling (a
// rule's soft_percent) is answered OK with the header X-Ratelimit-Soft:
// true for Envoy to add to the response.
//
// A request's hits_addend is the cost of every descriptor (0 means 1), a
// descriptor's own hits_addend its cost (0 checks without counting).
// Descriptors of different costs are decided in groups of the same cost,
// each all or nothing. A cost above a descriptor's limit is over that
// limit. The time until the reset is how long until the descriptor's
// counter is back to its full quota: for a fixed window, the end of the
// window, but 0 when nothing is counted (the Envoy service counts every
// request, and always gives the window's end).
//
// When the store fails, a limit that fails open (the default) admits and
// the answer is OK; one that fails closed makes the call fail with
// codes.Unavailable, which Envoy treats as its failure_mode_deny says.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, errNoDomain
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, errNoDescriptors
	}
	e := s.engine(req.Domain)
	ds := make([]descriptor, len(req.Descriptors))
	if e != nil {
		s.lookup(e, req, ds)
	}
	if err := s.decide(ctx, ds); err != nil {
		return nil, err
	}
	return s.answer(ds), nil
}

// lookup finds the rate limit of each descriptor and its cost.
func (s *Service) lookup(e *rules.Engine, req *rlspb.RateLimitRequest, ds []descriptor) {
	var ebuf [8]rules.Entry
	replaced := map[string]bool(nil)
	for i, rd := range req.Descriptors {
		d := &ds[i]
		d.cost = max(1, int(min(req.HitsAddend, math.MaxInt32)))
		if h := rd.GetHitsAddend(); h != nil {
			d.cost = int(min(h.GetValue(), math.MaxInt32))
		}
		entries := ebuf[:0]
		for _, en := range rd.GetEntries() {
			entries = append(entries, rules.Entry{Key: en.GetKey(), Value: en.GetValue()})
		}
		d.applied, d.ok = e.Lookup(req.Domain, entries...)
		if o := rd.GetLimit(); o != nil && s.o.store != nil {
			if a, ok := s.overrides.applied(s.o.store, s.o.limOpts, req.Domain, rd.GetEntries(), o); ok {
				d.applied, d.ok = a, true
			}
		}
		if !d.ok {
			continue
		}
		for _, name := range d.applied.RateLimit.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		if d.applied.RateLimit.Unlimited || d.applied.Check.Limiter == nil {
			d.unlimited = d.applied.RateLimit.Unlimited
			d.ok = d.unlimited
		}
	}
	if replaced != nil {
		for i := range ds {
			if n := ds[i].applied.RateLimit.Name; ds[i].ok && n != "" && replaced[n] {
				ds[i] = descriptor{}
			}
		}
	}
	for i := range ds {
		d := &ds[i]
		if d.ok && !d.unlimited {
			if d.applied.Check.Key == "" {
				// An entry with an empty value, which Envoy can send for an
				// empty header: counted under a key no value gives.
				d.applied.Check.Key = "\x00"
			}
			rl := d.applied.RateLimit
			quota := rl.RequestsPerUnit
			if rl.Burst > 0 {
				quota = rl.Burst
			}
			d.over = d.cost > quota
		}
	}
}

// decide takes the decisions of the descriptors with a limit: those of
// each cost together.
func (s *Service) decide(ctx context.Context, ds []descriptor) error {
	var cbuf [8]core.Check
	var dbuf [8]core.Decision
	var ibuf [8]int
	over := false
	for i := range ds {
		over = over || ds[i].over
	}
	if over {
		// A cost above a limit rejects the request: the others are
		// reported without counting.
		for i := range ds {
			d := &ds[i]
			switch {
			case !d.ok || d.unlimited:
			case d.over:
				d.d = core.Decision{Name: d.applied.Limit, Quota: d.applied.RateLimit.RequestsPerUnit}
				d.d.ResetAfter = s.resetOf(ctx, d)
			default:
				dec, err := d.applied.Check.Limiter.Take(ctx, d.applied.Check.Key, 0)
				if err != nil && !dec.Allowed {
					return s.failure(err)
				}
				d.d = dec
			}
		}
		return nil
	}
	for {
		cost := -1
		checks, idx := cbuf[:0], ibuf[:0]
		for i := range ds {
			d := &ds[i]
			if !d.ok || d.unlimited || d.decided {
				continue
			}
			if cost < 0 {
				cost = d.cost
			}
			if d.cost == cost {
				checks = append(checks, d.applied.Check)
				idx = append(idx, i)
			}
		}
		if len(checks) == 0 {
			return nil
		}
		each := dbuf[:0]
		if len(checks) > len(dbuf) {
			each = make([]core.Decision, len(checks))
		}
		each = each[:len(checks)]
		dec, err := core.TakeEach(ctx, checks, cost, each)
		if err != nil && !dec.Allowed {
			return s.failure(err)
		}
		for j, i := range idx {
			ds[i].d, ds[i].decided = each[j], true
		}
	}
}

// resetOf is the time until the reset of a descriptor's window, for one
// whose cost exceeds its limit: asked without counting.
func (s *Service) resetOf(ctx context.Context, d *descriptor) time.Duration {
	dec, err := d.applied.Check.Limiter.Take(ctx, d.applied.Check.Key, 0)
	if err != nil {
		return 0
	}
	return dec.ResetAfter
}

// failure is the answer to a decision that failed and rejected.
func (s *Service) failure(err error) error {
	switch {
	case errors.Is(err, core.ErrMissingKey), errors.Is(err, core.ErrCostExceedsLimit):
		s.o.log.Error("rls: a decision failed", "error", err)
		return errDecide
	default:
		return errStore // the limiter logged the store's failure
	}
}

// answer builds the response from the decided descriptors.
func (s *Service) answer(ds []descriptor) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	closest := -1
	closestRemaining := uint32(math.MaxUint32)
	soft := false
	for i := range ds {
		d := &ds[i]
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case !d.ok:
			continue
		case d.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		rl := d.applied.RateLimit
		st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
			Name:            rl.Name,
			RequestsPerUnit: uint32(rl.RequestsPerUnit),
			Unit:            unitOf(rl.Unit),
		}
		st.DurationUntilReset = &durationpb.Duration{Seconds: ceilSeconds(d.d.ResetAfter)}
		soft = soft || d.d.Soft
		rejected := !d.d.Allowed || d.d.Shadow
		if rejected {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(min(max(d.d.Remaining, 0), math.MaxUint32))
		}
		if d.d.Shadow || (rejected && d.applied.Shadow) {
			st.Code = rlspb.RateLimitResponse_OK
			rejected = false
		}
		if rejected {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			closest, closestRemaining = i, 0
		} else if st.LimitRemaining < closestRemaining || closest < 0 {
			closest, closestRemaining = i, st.LimitRemaining
		}
	}
	if h := s.o.headers; h != nil && closest >= 0 {
		st := resp.Statuses[closest]
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: h.limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			{Key: h.remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: h.reset, Value: strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	if soft {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: answer.HeaderSoft, Value: "true"})
	}
	if s.o.shadow {
		resp.OverallCode = rlspb.RateLimitResponse_OK
	}
	return resp
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// unitOf is the enum of a rules unit name.
func unitOf(unit string) rlspb.RateLimitResponse_RateLimit_Unit {
	return rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)])
}

// validHeader reports whether n is a header field name (an RFC 9110 token).
func validHeader(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// overrides keeps the limiters of the limit overrides requests carry.
type overrides struct {
	mu   sync.Mutex
	lims map[override]*core.Limiter
}

type override struct {
	rpu  uint32
	unit rlspb.RateLimitResponse_RateLimit_Unit
}

const maxOverrides = 1024

// periods are the Envoy units' lengths, as the Envoy service counts them.
var periods = map[rlspb.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlspb.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlspb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlspb.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlspb.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// applied returns the rate limit of a descriptor's limit override, with
// its check; false for a unit it does not know or past maxOverrides.
func (o *overrides) applied(store core.Store, limOpts []core.Option, domain string, entries []*rlv3.RateLimitDescriptor_Entry, lo *rlv3.RateLimitDescriptor_RateLimitOverride) (rules.Applied, bool) {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(lo.GetUnit())
	period, ok := periods[unit]
	if !ok || lo.GetRequestsPerUnit() > math.MaxInt32 {
		return rules.Applied{}, false
	}
	k := override{rpu: lo.GetRequestsPerUnit(), unit: unit}
	name := "override-" + strconv.FormatUint(uint64(k.rpu), 10) + "-per-" + strings.ToLower(unit.String())
	o.mu.Lock()
	lim := o.lims[k]
	if lim == nil && len(o.lims) < maxOverrides {
		l, err := core.NewLimiter(core.Limit{
			Name:      name,
			Algorithm: core.FixedWindow,
			Rate:      core.Rate{Count: int(k.rpu), Period: period},
		}, append([]core.Option{core.WithStore(store)}, limOpts...)...)
		if err == nil {
			if o.lims == nil {
				o.lims = map[override]*core.Limiter{}
			}
			o.lims[k], lim = l, l
		}
	}
	o.mu.Unlock()
	if lim == nil {
		return rules.Applied{}, false
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(domain)))
	b.WriteByte(':')
	b.WriteString(domain)
	for _, en := range entries {
		for _, part := range [2]string{en.GetKey(), en.GetValue()} {
			b.WriteString(strconv.Itoa(len(part)))
			b.WriteByte(':')
			b.WriteString(part)
		}
	}
	return rules.Applied{
		RateLimit: rules.RateLimit{Unit: strings.ToLower(unit.String()), RequestsPerUnit: int(k.rpu)},
		Limit:     name,
		Key:       b.String(),
		Check:     core.Check{Limiter: lim, Key: b.String()},
	}, true
}
