package queue

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Bounds of MemoryOptions.
const (
	MaxMemoryCapacity = 1 << 20
	DefaultVisibility = 30 * time.Second
)

// MemoryOptions configure NewMemory.
type MemoryOptions struct {
	// Capacity is the most items the queue holds, waiting or leased:
	// from 1 to MaxMemoryCapacity. Required. With the Offer's MaxBody it
	// bounds the queue's memory.
	Capacity int

	// Visibility is how long a received item stays leased to its worker:
	// past it, the item is delivered again. Longer than a handler takes.
	// Default DefaultVisibility; at most a day.
	Visibility time.Duration

	// Now, when set, is read instead of the system clock, for tests.
	Now func() time.Time
}

// A Memory is a Queue in this process's memory: for tests, and for a
// single server that accepts losing its queue when it stops. Its items
// are delivered in the order pushed, an item delivered again before newer
// ones.
type Memory struct {
	capacity   int
	visibility time.Duration
	now        func() time.Time

	mu     sync.Mutex
	items  map[string]*entry // by ID: waiting and leased
	ready  list.List         // of *entry, waiting, oldest first
	leased map[*entry]struct{}
	wake   chan struct{} // closed and replaced when an item becomes ready
}

type entry struct {
	it    Item
	elem  *list.Element // in ready; nil while leased
	until time.Time     // while leased: the end of the lease
}

// NewMemory returns an empty memory queue.
func NewMemory(o MemoryOptions) (*Memory, error) {
	if o.Capacity < 1 || o.Capacity > MaxMemoryCapacity {
		return nil, fmt.Errorf("queue: capacity %d must be from 1 to %d", o.Capacity, MaxMemoryCapacity)
	}
	if o.Visibility == 0 {
		o.Visibility = DefaultVisibility
	}
	if o.Visibility < 0 || o.Visibility > 24*time.Hour {
		return nil, fmt.Errorf("queue: visibility %s must be positive and at most 24h", o.Visibility)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Memory{capacity: o.Capacity, visibility: o.Visibility, now: o.Now,
		items: map[string]*entry{}, leased: map[*entry]struct{}{}, wake: make(chan struct{})}, nil
}

// Push adds a copy of it to the queue, or returns ErrFull.
func (m *Memory) Push(_ context.Context, it *Item) error {
	if it.ID == "" {
		return errors.New("queue: Push of an item without an ID")
	}
	e := &entry{it: *it}
	e.it.Header = it.Header.Clone()
	e.it.Body = append([]byte(nil), it.Body...)
	e.it.Attempt, e.it.Receipt = 0, ""
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.items[it.ID]; dup {
		return fmt.Errorf("queue: an item with ID %q is in the queue already", it.ID)
	}
	if len(m.items) >= m.capacity {
		return ErrFull
	}
	m.items[it.ID] = e
	e.elem = m.ready.PushBack(e)
	m.signal()
	return nil
}

// signal wakes the receivers waiting.
func (m *Memory) signal() {
	close(m.wake)
	m.wake = make(chan struct{})
}

// Receive waits for an item and leases it for the visibility timeout.
// The item returned is a copy: the caller may keep and change it.
func (m *Memory) Receive(ctx context.Context) (*Item, error) {
	for {
		m.mu.Lock()
		now := m.now()
		next := m.reclaim(now)
		if f := m.ready.Front(); f != nil {
			e := m.ready.Remove(f).(*entry)
			e.elem, e.until = nil, now.Add(m.visibility)
			m.leased[e] = struct{}{}
			e.it.Attempt++
			it := e.it
			it.Receipt = it.ID
			it.Header = e.it.Header.Clone()
			it.Body = append([]byte(nil), e.it.Body...)
			m.mu.Unlock()
			return &it, nil
		}
		wake := m.wake
		m.mu.Unlock()
		if err := wait(ctx, wake, next); err != nil {
			return nil, err
		}
	}
}

// wait returns when wake is closed, after poll when it is not zero (a
// lease may end then), or with ctx's error when ctx ends.
func wait(ctx context.Context, wake <-chan struct{}, poll time.Duration) error {
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-wake:
	case <-tick:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// maxPoll bounds how long a receiver sleeps while items are leased, so
// that it sees their leases end even under a test clock.
const maxPoll = 100 * time.Millisecond

// reclaim puts the items whose lease has ended at now back in front of
// the ready list, and returns how long a receiver may sleep before
// checking again: zero when no item is leased.
func (m *Memory) reclaim(now time.Time) time.Duration {
	if len(m.leased) == 0 {
		return 0
	}
	poll := maxPoll
	var back []*entry
	for e := range m.leased {
		if left := e.until.Sub(now); left > 0 {
			poll = min(poll, left)
			continue
		}
		back = append(back, e)
	}
	// Delivered again before newer items, oldest first.
	slices.SortFunc(back, func(a, b *entry) int { return a.it.Enqueued.Compare(b.it.Enqueued) })
	for i := len(back) - 1; i >= 0; i-- {
		e := back[i]
		delete(m.leased, e)
		e.elem = m.ready.PushFront(e)
	}
	return max(poll, time.Millisecond)
}

// Ack removes the item for good, leased or waiting again.
func (m *Memory) Ack(_ context.Context, it *Item) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.items[it.Receipt]
	if !ok {
		return nil
	}
	delete(m.items, it.Receipt)
	if e.elem != nil {
		m.ready.Remove(e.elem)
	}
	delete(m.leased, e)
	return nil
}

// Len returns the number of items in the queue, waiting or leased.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

var _ Queue = (*Memory)(nil)
