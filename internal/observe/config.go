package observe

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// Config is what an exporter's options set, and the rules engines it
// follows. Its setters check their arguments as the options of the same
// names document them, and return errors prefixed with the exporter's
// package name. Set it up before the exporter observes; after that, only
// Follow changes it. It must not be copied.
type Config struct {
	pkg string // prefix of the errors

	Store     string    // the store label's value: WithStore (default "memory")
	NearLimit float64   // the near-limit fraction: WithNearLimit (default 0.2)
	Buckets   []float64 // the store-duration buckets, in seconds: WithBuckets (default DefaultBuckets)

	memory      []memoryLimit  // WithMemoryStore; read-only once set up
	outOfMemory []func() int64 // WithOutOfMemory; read-only once set up

	mu      sync.Mutex      // guards engines
	engines []*rules.Engine // TrackRules
}

// memoryLimit is one limit of a memory store of WithMemoryStore.
type memoryLimit struct {
	store *core.MemoryStore
	limit core.Limit
	name  string
}

// DefaultBuckets span 1µs to 1s, in seconds: the memory store decides in
// about 100ns, Redis in 100µs to a few milliseconds.
var DefaultBuckets = []float64{
	1e-6, 2.5e-6, 5e-6,
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	0.1, 0.25, 0.5, 1,
}

// NewConfig returns the defaults of the exporter of package pkg, such as
// "ratekitprom".
func NewConfig(pkg string) *Config {
	return &Config{pkg: pkg, Store: "memory", NearLimit: 0.2, Buckets: DefaultBuckets}
}

func (c *Config) errorf(format string, args ...any) error {
	return fmt.Errorf(c.pkg+": "+format, args...)
}

// Apply applies an exporter's options to t, in order, and fails on a nil
// one or on the first error.
func Apply[T any, O ~func(*T) error](c *Config, t *T, opts []O) error {
	for _, o := range opts {
		if o == nil {
			return c.errorf("nil option")
		}
		if err := o(t); err != nil {
			return err
		}
	}
	return nil
}

// SetStore is WithStore: the store label's value, such as "redis". It
// must be valid UTF-8, of 1 to 64 bytes.
func (c *Config) SetStore(name string) error {
	switch {
	case name == "":
		return c.errorf("WithStore: the store name is empty")
	case !utf8.ValidString(name):
		return c.errorf("WithStore: the store name %q is not valid UTF-8", name)
	case len(name) > 64:
		return c.errorf("WithStore: the store name %.20q... is longer than 64 bytes", name)
	}
	c.Store = name
	return nil
}

// SetNearLimit is WithNearLimit: the fraction of a limit's capacity below
// which an admitted request's remaining count is near the limit. It must
// be in (0, 1].
func (c *Config) SetNearLimit(fraction float64) error {
	if !(fraction > 0 && fraction <= 1) { // also rejects NaN
		return c.errorf("WithNearLimit: fraction %v must be in (0, 1]", fraction)
	}
	c.NearLimit = fraction
	return nil
}

// SetBuckets is WithBuckets: the upper bounds, in seconds, of the
// store-duration histogram's buckets, positive, finite and increasing.
func (c *Config) SetBuckets(seconds []float64) error {
	if len(seconds) == 0 {
		return c.errorf("WithBuckets: no buckets")
	}
	for i, b := range seconds {
		if !(b > 0) || math.IsInf(b, 0) {
			return c.errorf("WithBuckets: bucket %v must be positive and finite", b)
		}
		if i > 0 && b <= seconds[i-1] {
			return c.errorf("WithBuckets: buckets must increase, %v follows %v", b, seconds[i-1])
		}
	}
	c.Buckets = slices.Clone(seconds)
	return nil
}

// AddMemoryStore is WithMemoryStore: TrackedKeys reports the keys s
// tracks for each of limits, given as configured on the limiters. A limit
// without a name is reported under its default name, as core's events
// name it; limits of the same name, in one store or several, are summed.
func (c *Config) AddMemoryStore(s *core.MemoryStore, limits []core.Limit) error {
	if s == nil {
		return c.errorf("WithMemoryStore: the store is nil")
	}
	if len(limits) == 0 {
		return c.errorf("WithMemoryStore: no limits to count keys for")
	}
	for _, l := range limits {
		p, err := l.Params(time.Nanosecond)
		if err != nil {
			return c.errorf("WithMemoryStore: %w", err)
		}
		c.memory = append(c.memory, memoryLimit{s, l, p.Name})
	}
	return nil
}

// Help returns m's description: m.Help, with NearLimit's fraction filled
// in.
func (c *Config) Help(m Metric) string {
	if m.Prometheus == NearLimit.Prometheus {
		return fmt.Sprintf(m.Help, c.NearLimit*100)
	}
	return m.Help
}

// Follow is TrackRules: TrackedKeys follows the rules in force in e,
// which reloads may replace. It fails for a nil engine or one already
// followed.
func (c *Config) Follow(e *rules.Engine) error {
	if e == nil {
		return c.errorf("TrackRules: the engine is nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Contains(c.engines, e) {
		return c.errorf("TrackRules: the engine is already followed")
	}
	c.engines = append(c.engines, e)
	return nil
}

// A KeyCount is the number of keys memory stores track for a limit.
type KeyCount struct {
	Limit string
	Keys  int64
}

// TrackedKeys reads the keys the memory stores track, summed per limit
// name: the limits of AddMemoryStore, always, in the order given, then
// those of the rules in force in the followed engines whose store counts
// its keys (rules.Engine.TrackedKeys). It also returns the names of all
// the rules' limits in force, whatever their store, or nil when it
// follows no engine.
func (c *Config) TrackedKeys() (counts []KeyCount, inForce map[string]bool) {
	index := map[string]int{} // limit name → index in counts
	add := func(name string, n int) {
		i, ok := index[name]
		if !ok {
			i = len(counts)
			index[name] = i
			counts = append(counts, KeyCount{Limit: name})
		}
		counts[i].Keys += int64(n)
	}
	for _, m := range c.memory {
		add(m.name, m.store.TrackedKeys(m.limit))
	}
	c.mu.Lock()
	engines := c.engines
	c.mu.Unlock()
	if len(engines) == 0 {
		return counts, nil
	}
	inForce = map[string]bool{}
	for _, e := range engines {
		for _, l := range e.Limits() {
			name := l.Name
			if name == "" {
				name = LimitName(l)
			}
			inForce[name] = true
			if n, ok := e.TrackedKeys(l); ok {
				add(name, n)
			}
		}
	}
	return counts, inForce
}

// LimitName returns the name core's events give l: its Name, or for a
// limit without one, a name derived from its rate. It is "" for an
// invalid limit.
func LimitName(l core.Limit) string {
	p, err := l.Params(time.Nanosecond)
	if err != nil {
		return ""
	}
	return p.Name
}
