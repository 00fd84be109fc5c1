package core

import (
	"context"
	"fmt"
	"time"
)

// This file holds the memory store's side of the operator's controls:
// grants, Inspect and Reset.

// MaxGrantsPerShard bounds the grants outstanding in one shard of a
// memory store's set of limits (a key under every limit of the set counts
// once per limit): with the default 64 shards, 65,536 per set. A grant
// that finds its shard full, expired grants dropped, is an error.
const MaxGrantsPerShard = 1024

type grantKey struct {
	h     uint64
	limit int
}

type grantValue struct {
	amount int64
	until  int64 // expiry, in the store's time
}

// grant returns what is left of the grant of key hash h under limit i at
// time now, dropping it if it has expired. sh.mu is held.
func (sh *shard) grant(h uint64, i int, now int64) (grantValue, bool) {
	k := grantKey{h, i}
	g, ok := sh.grants[k]
	if ok && g.until <= now {
		delete(sh.grants, k)
		return grantValue{}, false
	}
	return g, ok
}

// spend takes cost from the grant of h under limit i. A grant used up
// stays, at 0, until it expires, so that a refund can give back. sh.mu is
// held.
func (sh *shard) spend(h uint64, i int, cost int64) {
	k := grantKey{h, i}
	g := sh.grants[k]
	g.amount -= cost
	sh.grants[k] = g
}

// regrant gives cost back to the grant of h under limit i, if it has not
// expired. sh.mu is held.
func (sh *shard) regrant(h uint64, i int, cost, now int64) {
	if g, ok := sh.grant(h, i, now); ok {
		g.amount += cost
		sh.grants[grantKey{h, i}] = g
	}
}

// granting reports whether a grant is still outstanding at time now.
// sh.mu is held.
func (sh *shard) granting(now int64) bool {
	for _, g := range sh.grants {
		if g.until > now {
			return true
		}
	}
	return false
}

// prune drops the expired grants. sh.mu is held.
func (sh *shard) prune(now int64) {
	for k, g := range sh.grants {
		if g.until <= now {
			delete(sh.grants, k)
		}
	}
}

// decideGranted is the decision of a key in a shard that holds grants:
// each limit whose grant covers the cost admits the request from the
// grant, the others decide it; when all admit it and commit is set, the
// grants pay and the other limits count. Remaining includes the grants.
// sh.mu is held.
func (c *memCounter) decideGranted(sh *shard, rs *rings, h uint64, w []int64, now, cost int64, commit bool, ds []Decision) {
	var paid [MaxLimits]bool
	all := true
	for i := range c.ps {
		p, st := &c.ps[i], w[c.offs[i]:c.offs[i+1]]
		g, _ := sh.grant(h, i, now)
		if cost > 0 && g.amount >= cost {
			paid[i] = true
			p.take(st, rs, now, 0, false, &ds[i])
			ds[i].Allowed, ds[i].RetryAfter, ds[i].Delay, ds[i].Granted = true, 0, 0, true
			ds[i].Remaining += int(g.amount - cost)
			continue
		}
		p.take(st, rs, now, cost, false, &ds[i])
		ds[i].Remaining += int(g.amount)
		all = all && ds[i].Allowed
	}
	if !all || !commit {
		return
	}
	for i := range c.ps {
		if paid[i] {
			sh.spend(h, i, cost)
			continue
		}
		var d Decision
		c.ps[i].take(w[c.offs[i]:c.offs[i+1]], rs, now, cost, true, &d)
	}
}

// Inspect writes what a request of cost 1 would get and the grants; see
// Counter.
func (c *memCounter) Inspect(ctx context.Context, key string, ds []Decision, gs []Grant) (bool, error) {
	if len(ds) < len(c.ps) || len(gs) < len(c.ps) {
		return false, fmt.Errorf("ratekit: %d decisions and %d grants for %d limits", len(ds), len(gs), len(c.ps))
	}
	now := c.store.now()
	sh, h, i, found := c.t.lookup(key)
	defer sh.mu.Unlock()
	w, rs := zeroWords[:c.t.stride], &sh.rings
	switch {
	case found:
		w = sh.words[i : i+c.t.stride]
	case sh.sketch != nil:
		w, rs = c.estimate(sh.sketch, h, now), nil // what Take would start from
	}
	c.decideGranted(sh, rs, h, w, now, 1, false, ds)
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
	sh, h, i, found := c.t.lookup(key)
	defer sh.mu.Unlock()
	now := c.store.now()
	if found {
		w := sh.words[i : i+c.t.stride]
		found = !c.full(w, &sh.rings, now)
		for j := range c.ps {
			if p := &c.ps[j]; p.Algorithm == SlidingWindowLog && !p.Block {
				if r := sh.rings.get(w[c.offs[j]]); r != nil {
					r.head, r.n = 0, 0
				}
			}
		}
		clear(w[1:])
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
	sh, h, _, _ := c.t.lookup(key)
	defer sh.mu.Unlock()
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
	for i := range c.ps {
		g, _ := sh.grant(h, i, now)
		sh.grants[grantKey{h, i}] = grantValue{amount: g.amount + int64(amount), until: now + int64(ttl)}
	}
	return nil
}

// CheckGrant returns the error a store returns for a grant of amount for
// ttl under limits ps (the bound limits' Params): nil when the grant may
// be given. Every store calls it first in Counter.Grant.
func CheckGrant(ps []Params, amount int, ttl time.Duration) error {
	if amount < 1 {
		return fmt.Errorf("%w: amount %d must be at least 1", ErrInvalidGrant, amount)
	}
	if ttl <= 0 || ttl > 2*MaxPeriod {
		return fmt.Errorf("%w: duration %s must be positive and at most %s", ErrInvalidGrant, ttl, 2*MaxPeriod)
	}
	for i := range ps {
		if ps[i].Block {
			return fmt.Errorf("%w: limit %q blocks every request; a grant cannot open it", ErrInvalidGrant, ps[i].Name)
		}
		if int64(amount) > ps[i].Capacity {
			return fmt.Errorf("%w: amount %d exceeds the capacity %d of limit %q", ErrInvalidGrant, amount, ps[i].Capacity, ps[i].Name)
		}
	}
	return nil
}
