package hybrid

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
)

// This file holds the operator's controls of a hybrid counter: Inspect
// syncs the client first, Reset and Grant are one script each in this
// region's Redis.

// Inspect syncs the client with Redis and answers what a request of cost 1
// would get from every limit here, and each limit's grant.
func (c *counter) Inspect(ctx context.Context, key string, ds []core.Decision, gs []core.Grant) (bool, error) {
	if err := limits.CheckInspect(ds, gs, len(c.params)); err != nil {
		return false, err
	}
	sh := c.h.shardOf(key)
	sh.mu.Lock()
	e := c.h.entryOf(sh, key, len(c.params))
	var ls [core.MaxLimits]*state
	c.states(e, &ls) // for the sync to read
	if err := c.h.await(ctx, sh, e); err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	now := c.h.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c.states(e, &ls)
	tracked := false
	for i := range c.params {
		c.judge(ls[i], i, now, 1, false, &ds[i]) // the view's decision, whatever the lease
		gs[i] = core.Grant{}
		if c.params[i].Block {
			continue
		}
		l := ls[i]
		l.want, l.wantGrant, l.count = 0, 0, 0
		if left := l.grant.left(now); left > 0 {
			gs[i] = core.Grant{Amount: int(left), ExpiresIn: time.Duration(l.grant.expiry - now)}
			tracked = true
		}
		if l.cur.view() > 0 || l.prev.view() > 0 {
			tracked = true
		}
	}
	return tracked, nil
}

// Reset clears the client's counts in this region, its grants, and what
// this server holds under the counter's limits (for every binding of
// them); other servers drop what they hold at their next sync. Counts
// that other regions sent stay.
func (c *counter) Reset(ctx context.Context, key string) (bool, error) {
	now := c.h.now().UnixNano()
	tag := keys.ClientTag(key)
	var g group
	for i, m := range c.lims {
		if m == nil {
			continue
		}
		p := &c.params[i]
		base := c.h.prefix + string(tag[:]) + m.tag
		win := floorDiv(now, p.Period)
		ttl := strconv.FormatInt(((win+2)*p.Period-now)/int64(time.Millisecond)+syncTTL.Milliseconds()+c.h.slack(), 10)
		for _, w := range [2]int64{win, win - 1} {
			g.keys = append(g.keys, base+"w"+strconv.FormatInt(w, 10))
			g.args = append(g.args, "w", ttl)
		}
		g.keys = append(g.keys, base+"g")
		g.args = append(g.args, "g", "60000")
	}
	sh := c.h.shardOf(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil {
		for _, m := range c.lims {
			if j := e.index(m); j >= 0 {
				l := &e.lims[j]
				*l = state{lim: m, resets: l.resets + 1} // a sync on the wire changes nothing
			}
		}
	}
	sh.mu.Unlock()
	if len(g.keys) == 0 {
		return false, nil
	}
	groups := []group{g}
	ctx, cancel := context.WithTimeout(ctx, c.h.timeout)
	defer cancel()
	c.h.run(ctx, c.h.client, []any{"x"}, groups, 0)
	if err := groups[0].err; err != nil {
		return false, fmt.Errorf("redisstore: reset: %w", err)
	}
	return len(groups[0].out) > 0 && groups[0].out[0] == 1, nil
}

// Grant adds amount to the client's grant under every limit, for ttl, in
// this region's Redis; see core.Counter. Servers learn of it at their next
// sync of the client, within a sync interval.
func (c *counter) Grant(ctx context.Context, key string, amount int, ttl time.Duration) error {
	if err := core.CheckGrant(c.params, amount, ttl); err != nil {
		return err
	}
	now := c.h.now()
	tag := keys.ClientTag(key)
	var g group
	for i, m := range c.lims {
		if m != nil {
			g.keys = append(g.keys, c.h.prefix+string(tag[:])+m.tag+"g")
			g.args = append(g.args, strconv.FormatInt(c.params[i].Capacity, 10))
		}
	}
	ms := max(ttl.Milliseconds(), 1)
	groups := []group{g}
	ctx, cancel := context.WithTimeout(ctx, c.h.timeout)
	defer cancel()
	c.h.run(ctx, c.h.client, []any{"g", strconv.FormatInt(now.UnixMilli(), 10), strconv.Itoa(amount), strconv.FormatInt(ms, 10)}, groups, 0)
	if err := groups[0].err; err != nil {
		return fmt.Errorf("redisstore: grant: %w", err)
	}
	if len(groups[0].out) > 0 && groups[0].out[0] == 3 {
		return fmt.Errorf("%w: more than a limit's capacity would be granted", core.ErrInvalidGrant)
	}
	sh := c.h.shardOf(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil {
		for _, m := range c.lims {
			if j := e.index(m); j >= 0 {
				e.lims[j].grant.known = false // learn it at the next decision
			}
		}
	}
	sh.mu.Unlock()
	return nil
}
