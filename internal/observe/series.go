package observe

import (
	"sync"
	"sync/atomic"

	"github.com/ratekit/ratekit/core"
)

// Limits maps limit names to an exporter's series of each, S, built at a
// limit's first event. Reading is lock-free and allocation-free: the map
// is copied on write, and limits are few and written once each. It is
// safe for concurrent use.
type Limits[S any] struct {
	build  func(name string) *S
	limits atomic.Pointer[map[string]*S]
	mu     sync.Mutex // serialises writers
}

// NewLimits returns an empty table whose limits build builds.
func NewLimits[S any](build func(name string) *S) *Limits[S] {
	l := &Limits[S]{build: build}
	l.limits.Store(&map[string]*S{})
	return l
}

// Get returns the series of limit name, building them on its first call.
func (l *Limits[S]) Get(name string) *S {
	if s := (*l.limits.Load())[name]; s != nil {
		return s
	}
	return l.add(name)
}

func (l *Limits[S]) add(name string) *S {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.limits.Load()
	if s := old[name]; s != nil {
		return s
	}
	s := l.build(name)
	next := make(map[string]*S, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = s
	l.limits.Store(&next)
	return s
}

// Delete forgets limit name, if it has series, and calls remove, which
// deletes them from the exporter, before an event of the limit can build
// them afresh.
func (l *Limits[S]) Delete(name string, remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.limits.Load()
	if old[name] == nil {
		return
	}
	next := make(map[string]*S, len(old))
	for k, v := range old {
		if k != name {
			next[k] = v
		}
	}
	l.limits.Store(&next)
	remove()
}

// ByOutcome holds an exporter's T for each core.Outcome of one limit:
// those of Outcomes built with it, any other on its first event. It is
// safe for concurrent use.
type ByOutcome[T any] struct {
	build func(core.Outcome) *T
	known [1 << 8]*T // Outcomes', by the whole range of core.Outcome; read-only once built

	mu    sync.Mutex
	later map[core.Outcome]*T // the others, built on their first event
}

// NewByOutcome returns the values of build for Outcomes, and builds the
// others when asked for.
func NewByOutcome[T any](build func(core.Outcome) *T) *ByOutcome[T] {
	b := &ByOutcome[T]{build: build}
	for _, o := range Outcomes {
		b.known[o] = build(o)
	}
	return b
}

// Get returns the value of o. It is small enough to inline, on the
// request path.
func (b *ByOutcome[T]) Get(o core.Outcome) *T {
	if v := b.known[o]; v != nil {
		return v
	}
	return b.add(o)
}

// add returns the value of an outcome not among Outcomes, which core
// adds later: rare enough for a lock.
func (b *ByOutcome[T]) add(o core.Outcome) *T {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.later[o]
	if v == nil {
		v = b.build(o)
		if b.later == nil {
			b.later = map[core.Outcome]*T{}
		}
		b.later[o] = v
	}
	return v
}

// ByAction holds an exporter's T for each of Actions of one limit. It is
// read-only once built, and so safe for concurrent use.
type ByAction[T any] struct {
	build   func(Action) T
	actions map[Action]T
}

// NewByAction returns the values of build for Actions.
func NewByAction[T any](build func(Action) T) *ByAction[T] {
	b := &ByAction[T]{build: build, actions: make(map[Action]T, len(Actions))}
	for _, a := range Actions {
		b.actions[a] = build(a)
	}
	return b
}

// Get returns the value of a; for an action that core adds later, which
// is not among Actions, a value built at each call.
func (b *ByAction[T]) Get(a Action) T {
	if v, ok := b.actions[a]; ok {
		return v
	}
	return b.build(a)
}
