package hybrid

import (
	"context"
	"errors"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
)

// This file holds the decisions of a counter: in process, within this
// server's lease, after a sync when a lease is needed, and within this
// server's share while Redis is away.

// counter is the core.Counter of one limiter's limits in a Store.
type counter struct {
	h        *Store
	params   []core.Params // in nanoseconds
	lims     []*limit      // per limit; nil for a limit of 0 requests
	capacity int64
}

// states points ls at the client's state under each of the counter's
// limits (nil for a limit of 0 requests), adding what the entry lacks;
// with the shard locked. The pointers hold until the shard is unlocked.
func (c *counter) states(e *entry, ls *[core.MaxLimits]*state) {
	for _, m := range c.lims {
		if m != nil && e.index(m) < 0 {
			// lastHits: not pruned before a request it was made for is
			// decided (prune).
			e.lims = append(e.lims, state{lim: m, lastHits: 1})
		}
	}
	for i, m := range c.lims {
		ls[i] = nil
		if m != nil {
			ls[i] = &e.lims[e.index(m)]
			ls[i].top = max(ls[i].top, c.params[i].Count)
		}
	}
}

// The verdicts of one limit on a request.
const (
	admit  = iota // within the lease (or the grant's)
	reject        // over the limit, as far as this server knows
	ask           // a lease is needed first
)

// judge decides the request by limit i, whose state for the client is l,
// at now, into d, and says what may happen next. With outage set, Redis is
// away: a request that needs a lease is admitted within the server's share
// instead.
func (c *counter) judge(l *state, i int, now, cost int64, outage bool, d *core.Decision) (verdict int, granted bool) {
	p := &c.params[i]
	if p.Block {
		limits.Block(p, d)
		return reject, false
	}
	l.roll(floorDiv(now, p.Period))
	l.hits++
	prev := int64(0)
	if l.prev.known || l.prev.mine > 0 {
		prev = l.prev.view()
	}
	if !l.grant.known || !l.cur.known || (p.Algorithm == core.SlidingWindowCounter && !l.prev.known) {
		if !outage {
			l.want, l.count = max(l.want, cost), max(l.count, p.Count)
			return ask, false
		}
	}
	if gl := l.grant.left(now); cost > 0 && gl >= cost {
		p.DecideWindow(l.cur.view(), prev, now, 0, d)
		d.Allowed, d.Granted, d.RetryAfter = true, true, 0
		d.Remaining += int(gl - cost)
		if l.grant.reserved-l.grant.mine >= cost {
			return admit, true
		}
		if !outage {
			l.wantGrant = max(l.wantGrant, cost)
			return ask, true
		}
	}
	p.DecideWindow(l.cur.view(), prev, now, cost, d)
	if !d.Allowed {
		return reject, false
	}
	if cost == 0 || l.cur.reserved-l.cur.mine >= cost {
		return admit, false
	}
	if !outage {
		l.want, l.count = max(l.want, cost), max(l.count, p.Count)
		return ask, false
	}
	// Redis is away: admit within the lease, and this server's share of
	// what no server had leased at the last sync.
	n := max(l.cur.servers, c.h.servers.Load(), 1)
	unleased := p.Count
	if l.cur.known {
		unleased -= l.cur.total
	}
	if l.cur.mine+cost <= max(l.cur.reserved, 0)+max(unleased, 0)/n {
		return admit, false
	}
	d.Allowed, d.Remaining = false, 0
	d.RetryAfter = time.Duration(p.Period - floorMod(now, p.Period))
	return reject, false
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// decide runs the request through every limit (the client's states ls)
// and, with commit, counts it when all admit. It returns ask when a sync
// must come first.
func (c *counter) decide(e *entry, ls *[core.MaxLimits]*state, now, cost int64, commit, outage, final bool, ds []core.Decision) int {
	e.active = true
	verdict := admit
	var paid [core.MaxLimits]bool
	for i := range c.params {
		v, g := c.judge(ls[i], i, now, cost, outage, &ds[i])
		paid[i] = g
		if v == reject {
			verdict = reject
		} else if v == ask && verdict == admit {
			verdict = ask
		}
	}
	if verdict == ask && final {
		// Redis answered every sync, but the leases it gave fell short
		// of what the view admits: reject, as Redis would have.
		for i := range c.params {
			if d := &ds[i]; d.Allowed && !c.params[i].Block {
				d.Allowed, d.Remaining, d.Granted = false, 0, false
				d.RetryAfter = max(time.Duration(c.params[i].Period/max(c.params[i].Count, 1)), time.Millisecond)
			}
		}
		verdict = reject
	}
	if verdict == reject {
		for _, l := range ls[:len(c.params)] { // a request rejected waits for no lease
			if l != nil {
				l.want, l.wantGrant = 0, 0
			}
		}
		return reject
	}
	if verdict == admit && commit && cost > 0 {
		for i := range c.params {
			l := ls[i]
			switch {
			case c.params[i].Block:
			case paid[i]:
				l.grant.mine += cost
			default:
				l.cur.mine += cost
			}
		}
	}
	return verdict
}

// maxRounds is the most syncs one request waits for: a fresh client under
// a sliding window counter needs two (its previous window, then a lease).
const maxRounds = 3

// take is Take (commit) and Peek: decided locally, after a sync when a
// lease is needed, locally within a share when Redis is away.
func (c *counter) take(ctx context.Context, key string, cost int, commit bool, ds []core.Decision) (time.Time, error) {
	if err := limits.CheckRequest(ds, len(c.params), cost, c.capacity); err != nil {
		return time.Time{}, err
	}
	sh := c.h.shardOf(key)
	outage := c.h.circuit.IsOpen()
	var ls [core.MaxLimits]*state
	for round := 0; ; round++ {
		at := c.h.now()
		sh.mu.Lock()
		e := c.h.entryOf(sh, key, len(c.params))
		c.states(e, &ls)
		v := c.decide(e, &ls, at.UnixNano(), int64(cost), commit, outage, round == maxRounds, ds)
		if v != ask {
			sh.mu.Unlock()
			return at, nil
		}
		if err := c.h.await(ctx, sh, e); err != nil {
			// Decide this request locally; a sync that does not answer in
			// time counts toward opening the circuit, as a failed one does.
			outage = true
			c.h.circuit.Failed(err)
		}
	}
}

// await asks the sync loop for a sync of e and waits for it; it is called
// with the shard locked and returns with it unlocked.
func (h *Store) await(ctx context.Context, sh *shard, e *entry) error {
	e.want = true
	if e.wait == nil {
		e.wait = make(chan struct{})
	}
	wait := e.wait
	sh.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(h.timeout)
	defer t.Stop()
	select {
	case <-wait:
		sh.mu.Lock()
		err := e.err
		sh.mu.Unlock()
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return context.DeadlineExceeded
	case <-h.stop:
		return errors.New("redisstore: hybrid store closed")
	}
}

// Take decides a request locally, within this server's lease; see
// core.Counter.
func (c *counter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	return c.take(ctx, key, cost, true, ds)
}

// Peek decides a request without counting it.
func (c *counter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	_, err := c.take(ctx, key, cost, false, ds)
	return err
}

// Refund gives back a request admitted at time at: to this server's lease
// of the window it was counted in, or of the grant that paid it.
func (c *counter) Refund(_ context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	if cost <= 0 {
		return nil
	}
	sh := c.h.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil {
		return nil
	}
	for i, m := range c.lims {
		j := e.index(m)
		if j < 0 {
			continue
		}
		p, l := &c.params[i], &e.lims[j]
		var w *window
		switch floorDiv(at.UnixNano(), p.Period) {
		case l.win:
			w = &l.cur
		case l.win - 1:
			w = &l.prev
		}
		switch {
		case i < len(ds) && ds[i].Granted:
			l.grant.mine = max(l.grant.mine-int64(cost), 0)
		case w != nil:
			w.mine = max(w.mine-int64(cost), 0)
		}
	}
	return nil
}
