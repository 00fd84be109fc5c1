package core

import (
	"context"
	"fmt"
	"time"
)

// This file holds the ways into the memory store once a set of limits is
// bound: decide (with decideOne, the form it takes for one limit) and
// refund, the entry of the Limiter's lanes, and the Counter methods,
// which check their arguments and go through the same entry (Take, Peek,
// Refund) or through the table and the grants (Inspect, Reset, Grant).
// Everything here calls down: into the clock, the table, the sketch, the
// grants and the algorithms.

// memCounter is a Counter over one table of a memory store, for one
// binding of a set of limits.
type memCounter struct {
	store  *MemoryStore
	t      *table
	layout // of the limits of this binding
}

// zeroWords is the state of a key never seen, for decisions that do not
// count: read, never written.
var zeroWords [1 + 2*MaxLimits]int64

// decide is the memory store's entry for a decision, the one the
// Limiter's lanes call: it decides a request of the given cost for key by
// every limit, writing limit i's decision to ds[i], and with commit counts
// it when every limit admits it. It returns the store's time of the
// decision, for refund. With lat not nil it writes its latency to *lat,
// for observers (see timed).
//
// The cost must be one every limit can take (0 to its capacity; any for a
// limit that blocks), and ds must hold a decision per limit: what a
// Limiter has checked already, and the Counter methods check.
//
// The walk goes down once: the store's clock, the table, the algorithms.
// A key the table holds, in a shard without grants, under limits without
// a log, is decided under its slot's lock alone (held); any other goes
// through the shard's lock (slow).
func (c *memCounter) decide(key string, cost int, commit bool, ds []Decision, lat *time.Duration) int64 {
	switch {
	case lat != nil:
		return c.timed(key, cost, commit, ds, lat)
	case len(c.ps) == 1:
		return c.decideOne(key, cost, commit, &ds[0])
	}
	ds = ds[:len(c.ps)]
	commit = commit && cost > 0 && c.t.stride > 1 // a block-only set keeps no state
	h := c.t.hash(key)
	sh := c.t.shardOf(h)
	now := c.store.now()
	if c.logs || sh.granted.Load() || c.t.stride > 8 {
		return c.slow(h, cost, commit, ds, now)
	}
	w := c.t.held(sh, h)
	if w == nil {
		return c.slow(h, cost, commit, ds, now)
	}
	now = c.clamp(w, now)
	c.takeAll(w, now, cost, commit, ds)
	unlockSlot(w, h)
	return now
}

// takeAll decides a request on slot w by every limit, none of them a log,
// in one pass, each limit counting the request in its own words; when
// some limit rejects it, the words are put back as they were. The slot is
// locked, so no one sees them in between. The slot has at most 8 words.
func (c *memCounter) takeAll(w []int64, now int64, cost int, commit bool, ds []Decision) {
	var saved [8]int64
	if commit {
		for j := 1; j < len(w); j++ { // word 0, the hash and the lock, is not the state
			saved[j&7] = w[j]
		}
	}
	all := true
	for i := range c.ps {
		c.ps[i].take(w[c.offs[i]:c.offs[i+1]], nil, now, int64(cost), commit, &ds[i])
		all = all && ds[i].Allowed
	}
	if commit && !all {
		for j := 1; j < len(w); j++ {
			w[j] = saved[j&7]
		}
	}
}

// slow is decide under the lock of the shard of key hash h: for a key
// the table does not hold yet, which it inserts or counts in the sketch,
// for a shard that holds grants, and for limits with a log.
func (c *memCounter) slow(h uint64, cost int, commit bool, ds []Decision, now int64) int64 {
	sh, w, over, now := c.t.acquire(h, commit, now, &c.layout)
	slot := w
	if w == nil {
		w = zeroWords[:c.t.stride]
		commit = false
	} else if !over {
		now = c.clamp(w, now)
	}
	rs := &sh.rings
	if over {
		rs = nil // the sketch's logs are window counts
	}
	switch {
	case len(sh.grants) != 0:
		sh.decideGranted(&c.layout, rs, h, w, now, int64(cost), commit, ds)
	case !c.logs && c.t.stride <= 8:
		c.takeAll(w, now, cost, commit, ds)
	default:
		// A log is counted in its ring, not in the slot: ask every limit
		// first, then count.
		all := true
		for i := range c.ps {
			c.ps[i].take(w[c.offs[i]:c.offs[i+1]], rs, now, int64(cost), false, &ds[i])
			all = all && ds[i].Allowed
		}
		if all && commit {
			for i := range c.ps {
				c.ps[i].take(w[c.offs[i]:c.offs[i+1]], rs, now, int64(cost), true, &ds[i])
			}
		}
	}
	if over {
		if commit {
			sh.sketch.settle(&c.layout, h, now)
		}
		c.spill(ds, now, commit)
	}
	sh.unlock(slot, h)
	return now
}

// unlock unlocks slot w of key hash h, unless nil, then the shard, noting
// whether grants may still be outstanding.
func (sh *shard) unlock(w []int64, h uint64) {
	if w != nil {
		unlockSlot(w, h)
	}
	if sh.granted.Load() && len(sh.grants) == 0 {
		sh.granted.Store(false)
	}
	sh.mu.Unlock()
}

// spill admits a request of a key in the sketch that the sketch denied,
// when the store's Overflow budget has room, taking it from the budget
// when commit is set: every decision of ds becomes an admission with
// nothing remaining. The key's cells do not count it.
func (c *memCounter) spill(ds []Decision, now int64, commit bool) {
	denied := false
	for i := range ds {
		denied = denied || !ds[i].Allowed
	}
	if !denied || !c.t.press.spill(now, commit) {
		return
	}
	for i := range ds {
		spilled(&ds[i])
	}
}

// spilled makes d an admission from the overflow budget.
func spilled(d *Decision) { d.Allowed, d.RetryAfter, d.Remaining = true, 0, 0 }

// decideOne is decide for a counter of one limit, untimed, writing the
// decision to d: the lane of most requests, which the Limiter's Take
// calls directly, so that the decision is written in place.
func (c *memCounter) decideOne(key string, cost int, commit bool, d *Decision) int64 {
	commit = commit && cost > 0 && c.t.stride > 1 // a block-only set keeps no state
	h := c.t.hash(key)
	sh := c.t.shardOf(h)
	now := c.store.now()
	if !c.logs && !sh.granted.Load() {
		if w := c.t.held(sh, h); w != nil {
			now = c.clamp(w, now)
			c.ps[0].take(w[1:], nil, now, int64(cost), commit, d)
			unlockSlot(w, h)
			return now
		}
	}
	var ds [1]Decision
	now = c.slow(h, cost, commit, ds[:], now)
	*d = ds[0]
	return now
}

// timed is decide that writes its latency to *lat, for observers: on the
// system clock, from the store's own time of the decision, which spares a
// reading (25 ns on some virtual machines), unless the store's clock is
// injected (and may stand still).
func (c *memCounter) timed(key string, cost int, commit bool, ds []Decision, lat *time.Duration) int64 {
	if c.store.Clock != nil {
		start := monotonic()
		now := c.decide(key, cost, commit, ds, nil)
		*lat = monotonic() - start
		return now
	}
	now := c.decide(key, cost, commit, ds, nil)
	*lat = c.store.elapsed(now)
	return now
}

// refund is the memory store's entry for giving back a request of the
// given cost that decide counted at the store's time at, with the
// decisions ds: a grant that paid gets the cost back, the other limits
// refund it to the key's state. A key the sketch counts gets nothing
// back: its cells count other keys too.
func (c *memCounter) refund(key string, cost int, at int64, ds []Decision) {
	if cost <= 0 {
		return
	}
	h := c.t.hash(key)
	sh, w, over, now := c.t.acquire(h, false, c.store.now(), &c.layout)
	for i := range c.ps {
		switch {
		case ds[i].Granted:
			sh.regrant(h, i, int64(cost), now)
		case w != nil && !over:
			c.ps[i].refund(w[c.offs[i]:c.offs[i+1]], &sh.rings, at, int64(cost))
		}
	}
	sh.unlock(w, h)
}

// valid returns the error of a cost or of decisions that decide cannot
// take.
func (c *memCounter) valid(cost int, ds []Decision) error {
	if len(ds) < len(c.ps) {
		return fmt.Errorf("ratekit: %d decisions for %d limits", len(ds), len(c.ps))
	}
	for i := range c.ps {
		if cost < 0 || int64(cost) > c.ps[i].Capacity && !c.ps[i].Block {
			return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, cost, c.ps[i].Capacity)
		}
	}
	return nil
}

// Take decides and counts a request; see Counter.
func (c *memCounter) Take(ctx context.Context, key string, cost int, ds []Decision) (time.Time, error) {
	if err := c.valid(cost, ds); err != nil {
		return time.Time{}, err
	}
	return c.store.timeOf(c.decide(key, cost, true, ds, nil)), nil
}

// Peek decides a request without counting it; see Counter.
func (c *memCounter) Peek(ctx context.Context, key string, cost int, ds []Decision) error {
	if err := c.valid(cost, ds); err != nil {
		return err
	}
	c.decide(key, cost, false, ds, nil)
	return nil
}

// Refund gives back a request admitted at time at; see Counter.
func (c *memCounter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []Decision) error {
	if cost <= 0 {
		return nil
	}
	if len(ds) < len(c.ps) {
		return fmt.Errorf("ratekit: %d decisions for %d limits", len(ds), len(c.ps))
	}
	c.refund(key, cost, c.store.sinceBase(at), ds)
	return nil
}

// Inspect writes what a request of cost 1 would get and the grants; see
// Counter.
func (c *memCounter) Inspect(ctx context.Context, key string, ds []Decision, gs []Grant) (bool, error) {
	if len(ds) < len(c.ps) || len(gs) < len(c.ps) {
		return false, fmt.Errorf("ratekit: %d decisions and %d grants for %d limits", len(ds), len(gs), len(c.ps))
	}
	now := c.store.now()
	sh, h, slot := c.t.lookup(key)
	defer sh.unlock(slot, h)
	found := slot != nil
	w, rs := zeroWords[:c.t.stride], &sh.rings
	switch {
	case found:
		w = slot
		now = c.clamp(w, now)
	case sh.sketch != nil:
		w, rs = sh.sketch.estimate(&c.layout, h, now), nil // what Take would start from
	}
	sh.decideGranted(&c.layout, rs, h, w, now, 1, false, ds)
	if rs == nil {
		c.spill(ds[:len(c.ps)], now, false)
	}
	found = found && !c.full(w, &sh.rings, now)
	for i := range c.ps {
		g, ok := sh.grant(h, i, now)
		gs[i] = Grant{}
		if g.amount > 0 {
			gs[i] = Grant{Amount: int(g.amount), ExpiresIn: time.Duration(g.until - now)}
		}
		found = found || ok
	}
	return found, nil
}

// Reset forgets the key's state and grants; see Counter.
func (c *memCounter) Reset(ctx context.Context, key string) (bool, error) {
	sh, h, w := c.t.lookup(key)
	defer sh.unlock(w, h)
	now := c.store.now()
	found := w != nil
	if found {
		found = !c.full(w, &sh.rings, now)
		for j := range c.ps {
			if p := &c.ps[j]; p.Algorithm == SlidingWindowLog && !p.Block {
				// The key keeps its log, emptied, and what it is charged.
				if r := sh.rings.get(w[c.offs[j]]); r != nil {
					r.head, r.n, r.used = 0, 0, 0
				}
				continue
			}
			clear(w[c.offs[j]:c.offs[j+1]])
		}
	}
	for j := range c.ps {
		if _, ok := sh.grant(h, j, now); ok {
			delete(sh.grants, grantKey{h, j})
			found = true
		}
	}
	return found, nil
}

// Grant adds to the key's grants; see Counter.
func (c *memCounter) Grant(ctx context.Context, key string, amount int, ttl time.Duration) error {
	if err := CheckGrant(c.ps, amount, ttl); err != nil {
		return err
	}
	now := c.store.now()
	h := c.t.hash(key)
	sh := c.t.shardOf(h)
	sh.mu.Lock()
	defer sh.unlock(nil, h)
	fresh := 0
	for i := range c.ps {
		g, ok := sh.grant(h, i, now)
		if g.amount+int64(amount) > c.ps[i].Capacity {
			return fmt.Errorf("%w: %d more on the %d granted would exceed the capacity %d of limit %q",
				ErrInvalidGrant, amount, g.amount, c.ps[i].Capacity, c.ps[i].Name)
		}
		if !ok {
			fresh++
		}
	}
	if len(sh.grants)+fresh > MaxGrantsPerShard {
		sh.prune(now)
		if len(sh.grants)+fresh > MaxGrantsPerShard {
			return fmt.Errorf("ratekit: memory store: %d grants outstanding in the key's shard, the most it holds", len(sh.grants))
		}
	}
	if sh.grants == nil {
		sh.grants = map[grantKey]grantValue{}
	}
	sh.granted.Store(true) // the shard's decisions take its lock from now on
	for i := range c.ps {
		g, _ := sh.grant(h, i, now)
		sh.grants[grantKey{h, i}] = grantValue{amount: g.amount + int64(amount), until: now + int64(ttl)}
	}
	return nil
}
