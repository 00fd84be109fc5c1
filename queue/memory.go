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

	// PerKey is the most items of one client key (Item.Key) the queue
	// holds, waiting or leased: from 1 to Capacity. A push beyond it is
	// ErrKeyFull, and the client gets the rejection it would have got
	// without a queue. Default DefaultPerKey(Capacity): 1% of the
	// capacity, at least 1.
	PerKey int

	// Visibility is how long a received item stays leased to its worker:
	// past it, the item is delivered again. Longer than a handler takes.
	// Default DefaultVisibility; at most a day.
	Visibility time.Duration

	// Now, when set, is read instead of the system clock, for tests.
	Now func() time.Time
}

// DefaultPerKey is the share of one client key in a queue of capacity
// items unless the queue's options say otherwise: 1% of the capacity,
// rounded up, so at least 1.
func DefaultPerKey(capacity int) int { return max(1, (capacity+99)/100) }

// A Memory is a Queue in this process's memory: for tests, and for a
// single server that accepts losing its queue when it stops.
//
// It serves the client keys in turn: Receive takes the oldest waiting
// item of the key whose turn it is, then that key goes to the back of
// the turn, so one key's backlog delays another key's next item by at
// most one item of each key waiting. Within a key, items are delivered in
// the order pushed, an item delivered again before newer ones.
type Memory struct {
	capacity   int
	perKey     int
	visibility time.Duration
	now        func() time.Time

	mu     sync.Mutex
	items  map[string]*entry  // by ID: waiting and leased
	keys   map[string]*client // the keys that hold items
	turn   list.List          // of *client with items waiting, next first
	leased map[*entry]struct{}
	wake   chan struct{} // closed and replaced when an item becomes ready
}

// A client is the items of one key.
type client struct {
	key   string
	held  int           // waiting and leased
	ready list.List     // of *entry, waiting, next first
	place *list.Element // in Memory.turn; nil when none waits
}

type entry struct {
	it    Item
	c     *client
	elem  *list.Element // in c.ready; nil while leased
	until time.Time     // while leased: the end of the lease
}

// NewMemory returns an empty memory queue.
func NewMemory(o MemoryOptions) (*Memory, error) {
	if o.Capacity < 1 || o.Capacity > MaxMemoryCapacity {
		return nil, fmt.Errorf("queue: capacity %d must be from 1 to %d", o.Capacity, MaxMemoryCapacity)
	}
	if o.PerKey == 0 {
		o.PerKey = DefaultPerKey(o.Capacity)
	}
	if o.PerKey < 1 || o.PerKey > o.Capacity {
		return nil, fmt.Errorf("queue: PerKey %d must be from 1 to the capacity, %d", o.PerKey, o.Capacity)
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
	return &Memory{capacity: o.Capacity, perKey: o.PerKey, visibility: o.Visibility, now: o.Now,
		items: map[string]*entry{}, keys: map[string]*client{}, leased: map[*entry]struct{}{}, wake: make(chan struct{})}, nil
}

// Push adds a copy of it to the queue, or returns ErrKeyFull or ErrFull.
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
	c := m.keys[it.Key]
	if c != nil && c.held >= m.perKey {
		return ErrKeyFull
	}
	if c == nil {
		c = &client{key: it.Key}
		m.keys[it.Key] = c
	}
	c.held++
	e.c = c
	m.items[it.ID] = e
	e.elem = c.ready.PushBack(e)
	m.enter(c)
	m.signal()
	return nil
}

// enter puts c at the back of the turn, unless it is in it already.
func (m *Memory) enter(c *client) {
	if c.place == nil {
		c.place = m.turn.PushBack(c)
	}
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
		if f := m.turn.Front(); f != nil {
			c := m.turn.Remove(f).(*client)
			c.place = nil
			e := c.ready.Remove(c.ready.Front()).(*entry)
			if c.ready.Len() > 0 {
				m.enter(c) // back of the turn
			}
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
// their key's waiting items, the key at the back of the turn if it was
// not in it, and returns how long a receiver may sleep before
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
	// Delivered again before the newer items of their key, oldest first.
	slices.SortFunc(back, func(a, b *entry) int { return a.it.Enqueued.Compare(b.it.Enqueued) })
	for i := len(back) - 1; i >= 0; i-- {
		e := back[i]
		delete(m.leased, e)
		e.elem = e.c.ready.PushFront(e)
	}
	for _, e := range back {
		m.enter(e.c)
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
	c := e.c
	if e.elem != nil {
		c.ready.Remove(e.elem)
		if c.ready.Len() == 0 && c.place != nil {
			m.turn.Remove(c.place)
			c.place = nil
		}
	}
	delete(m.leased, e)
	if c.held--; c.held == 0 {
		delete(m.keys, c.key)
	}
	return nil
}

// Len returns the number of items in the queue, waiting or leased.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

var _ Queue = (*Memory)(nil)
