package rules

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/keyfuncs"
)

// A KeyFunc returns a request's value for a descriptor key. A request
// without a value (the function returns "" and a nil error, or an error
// wrapping keyfuncs.ErrMissing) is not matched by descriptors with that
// key; any other error fails the request (500).
type KeyFunc func(r Request) (string, error)

// An Option configures an Engine.
type Option func(*options) error

type options struct {
	store    core.Store
	limOpts  []core.Option
	clientIP *clientip.ClientIP
	userKey  any
	keys     map[string]KeyFunc
	shadow   bool
	anyKey   bool
}

// WithStore sets the store of the rules' counters (default: a memory
// store of the engine's own). Every rule set the engine loads binds its
// limits in this store, which is how counts survive a reload.
func WithStore(s core.Store) Option {
	return func(o *options) error {
		if s == nil {
			return errors.New("rules: WithStore(nil)")
		}
		o.store = s
		return nil
	}
}

// WithLimiterOptions passes options to the limiter of every rule, such as
// core.WithFailClosed, core.WithObserver and core.WithLogger. (Use
// WithStore, not core.WithStore; the header style is the middleware's
// WithHeaders.)
func WithLimiterOptions(opts ...core.Option) Option {
	return func(o *options) error {
		o.limOpts = append(o.limOpts, opts...)
		return nil
	}
}

// WithClientIP sets how descriptor key remote_address finds the client
// IP, as keyfuncs.IP(opts...) does: with keyfuncs.TrustedProxies, the
// proxy header, the IPv6 prefix. An invalid option is an error of
// NewEngine, as of keyfuncs.IP. The default is the TCP peer address (no
// options), which clients cannot spoof; a later WithClientIP replaces an
// earlier one.
func WithClientIP(opts ...keyfuncs.IPOption) Option {
	return func(o *options) error {
		c, err := clientip.New(opts...)
		if err != nil {
			return fmt.Errorf("rules: WithClientIP: %w", err)
		}
		o.clientIP = c
		return nil
	}
}

// WithUserKey sets where descriptor key user finds the authenticated user:
// Request.Value(key), the context key (or Gin/Echo key, Fiber local) under
// which the authentication middleware stored the user ID. Without it, a
// rules file that uses user is rejected.
func WithUserKey(key any) Option {
	return func(o *options) error {
		if key == nil {
			return errors.New("rules: WithUserKey(nil)")
		}
		o.userKey = key
		return nil
	}
}

// WithKey registers the descriptor key name, whose value for a request is
// what f returns: for example "plan", read from what the application's
// auth layer stored. name must not be a built-in key or start with
// "header:" or "query:".
func WithKey(name string, f KeyFunc) Option {
	return func(o *options) error {
		switch {
		case f == nil:
			return fmt.Errorf("rules: WithKey(%q, nil)", name)
		case name == "" || builtin(name) || hasPrefix(name, "header:") || hasPrefix(name, "query:"):
			return fmt.Errorf("rules: WithKey(%q): name is empty or taken by a built-in key", name)
		}
		if o.keys == nil {
			o.keys = map[string]KeyFunc{}
		}
		o.keys[name] = f
		return nil
	}
}

// WithShadow puts every rule in shadow mode, as if each had shadow_mode:
// true: requests are counted, never rejected.
func WithShadow() Option {
	return func(o *options) error { o.shadow = true; return nil }
}

// WithAnyKey accepts every descriptor key a config names, as the Envoy
// rate-limit service does, for an engine that decides the descriptors a
// proxy sends (Lookup; package rls) rather than requests: every key but
// generic_key is then the proxy's, with no value in a request of Checks,
// which no descriptor keyed by it matches.
func WithAnyKey() Option {
	return func(o *options) error { o.anyKey = true; return nil }
}

// An Engine decides requests by a set of rules that can be replaced while
// it runs. Checks reads the rules in force from an atomic pointer, with
// no lock; Load builds a new set and swaps it in. It is safe for
// concurrent use.
type Engine struct {
	opts options
	cur  atomic.Pointer[set]
	mu   sync.Mutex // serializes Load
}

// NewEngine returns an engine with no rules, under which every request
// passes, until Load gives it some.
func NewEngine(opts ...Option) (*Engine, error) {
	e := &Engine{}
	for _, o := range opts {
		if err := o(&e.opts); err != nil {
			return nil, err
		}
	}
	if e.opts.store == nil {
		e.opts.store = &core.MemoryStore{}
	}
	if e.opts.clientIP == nil {
		e.opts.clientIP = clientip.NewPeer()
	}
	e.cur.Store(&set{})
	return e, nil
}

// Load validates cfg, builds its rules and puts them in force, atomically:
// a request is decided either entirely by the old rules or entirely by the
// new ones. If cfg is invalid, Load returns every problem found (each an
// *Error, joined; at most 100, then one saying there are too many) and
// the rules in force stay.
//
// A rule whose identity, its domain and descriptor path (keys, values and
// match), is unchanged keeps its counters, in the engine's store, with
// its new limit applied to them: a client that used 3 of 5 of a window
// has 3 left when the limit becomes 6 (a bucket keeps the time it needs
// to refill: 2 left). Changing a rule's algorithm or unit starts its
// counts afresh.
func (e *Engine) Load(cfg Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.compile(cfg)
	if err != nil {
		return err
	}
	e.cur.Store(s)
	return nil
}

// Limits returns the limits of the rules in force, in the order of their
// config, named as in decisions and metrics; for metrics (see
// ratekitprom.Metrics.TrackRules) and debugging.
func (e *Engine) Limits() []core.Limit {
	s := e.cur.Load()
	limits := make([]core.Limit, 0, len(s.rules))
	for _, r := range s.rules {
		limits = append(limits, r.limit)
	}
	return limits
}

// TrackedKeys returns the number of keys the engine's store tracks for l,
// one of Limits, and true, when the store counts its keys (a
// *core.MemoryStore, the default); 0 and false for other stores.
func (e *Engine) TrackedKeys(l core.Limit) (int, bool) {
	m, ok := e.opts.store.(*core.MemoryStore)
	if !ok {
		return 0, false
	}
	return m.TrackedKeys(l), true
}

// Config returns the config in force, as last given to a successful Load.
// Its slices are shared with the engine and must not be modified.
func (e *Engine) Config() Config { return e.cur.Load().cfg }

// Checks appends to dst the checks of the rules in force that match r:
// each rule's limiter, with the key made of r's values along the rule's
// descriptor path. A request must pass them all, decided together by
// core.TakeAll (middleware: adapter.Middleware.Rules); a request
// that no rule matches gets no checks, and passes. A KeyFunc error other
// than a missing value is returned, and then the request is not decided.
//
// The checks are taken from the rules in force when Checks is called: a
// Load that happens while the request is decided does not mix rule sets.
func (e *Engine) Checks(r Request, dst []core.Check) ([]core.Check, error) {
	w := walkers.Get().(*walker)
	checks, err := e.cur.Load().collect(w, r)
	dst = append(dst, checks...)
	w.reset()
	walkers.Put(w)
	if err != nil {
		return dst[:0], err
	}
	return dst, nil
}

// walkers recycles the walkers of Checks, with their check buffers: a
// tree walk is recursive, so a buffer on the caller's stack would escape.
var walkers = sync.Pool{New: func() any { return new(walker) }}

// Matches returns the names of the limits that apply to r under the rules
// in force, with their keys; for tests and debugging. A KeyFunc error is
// returned as by Checks, and then no limit: the request is not decided.
func (e *Engine) Matches(r Request) (names, keys []string, err error) {
	w := new(walker)
	if _, err = e.cur.Load().collect(w, r); err != nil {
		return nil, nil, err
	}
	for _, m := range w.matched {
		if m.rule.lim == nil || w.replaces && w.replaced(m.rule.name) {
			continue
		}
		names = append(names, m.rule.limit.Name)
		keys = append(keys, m.key)
	}
	return names, keys, nil
}

// joinKey makes the key of a rule from the request's values along its
// path: the value itself when there is one, "-" when the path has none
// (a limit shared by every request it matches), and the values with their
// lengths otherwise, so that no two value lists give the same key.
func joinKey(vals []string) string {
	switch len(vals) {
	case 0:
		return "-"
	case 1:
		return vals[0]
	}
	n := 0
	for _, v := range vals {
		n += len(v) + 4
	}
	b := make([]byte, 0, n)
	for _, v := range vals {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return string(b)
}
