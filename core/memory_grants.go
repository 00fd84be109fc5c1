package core

// This file holds the memory store's grants (Limiter.Grant): kept per
// shard, beside the slots, and the decision of a key in a shard that holds
// any. The counter's entry calls it; it calls down into the algorithms.

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

// decideGranted is the decision of key hash h, whose state is w, under
// the limits of lo in a shard that holds grants: each limit whose grant
// covers the cost admits the request from the grant, the others decide
// it; when all admit it and commit is set, the grants pay and the other
// limits count. Remaining includes the grants. sh.mu is held.
func (sh *shard) decideGranted(lo *layout, rs *rings, h uint64, w []int64, now, cost int64, commit bool, ds []Decision) {
	var paid [MaxLimits]bool
	all := true
	for i := range lo.ps {
		p, st := &lo.ps[i], w[lo.offs[i]:lo.offs[i+1]]
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
	for i := range lo.ps {
		if paid[i] {
			sh.spend(h, i, cost)
			continue
		}
		var d Decision
		lo.ps[i].take(w[lo.offs[i]:lo.offs[i+1]], rs, now, cost, true, &d)
	}
}
