package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
)

// counter is the core.Counter of one limiter's limits in a Store.
type counter struct {
	store    *Store
	limits   []core.Limit  // as bound, for the fallback
	params   []core.Params // per limit, in the store's unit
	tags     []string      // per limit with state, in KEYS order
	keyLen   int           // the length of one key
	spec     any           // the limits with state as the script reads them (decide.lua), boxed
	capacity int64         // the smallest capacity of the limits with state
	take     any           // the mode of Take: argOne, or argZero when a limit blocks

	localOnce    sync.Once
	localCounter core.Counter // the fallback's counter, bound on first use
	localErr     error
}

// Script arguments boxed once: a string converted to an interface at each
// call would be allocated each time.
var (
	argOne, argZero, argRefund, argNone any = "1", "0", "r", ""
	argInts                                 = func() (a [256]any) {
		for i := range a {
			a[i] = strconv.Itoa(i)
		}
		return a
	}()
)

func intArg(n int) any {
	if n >= 0 && n < len(argInts) {
		return argInts[n]
	}
	return strconv.Itoa(n)
}

// Take decides a request of the given cost by every limit and, when all
// of them admit it, counts it in each; see core.Counter.
func (c *counter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	return c.decide(ctx, key, cost, c.take, ds)
}

// Peek decides a request of the given cost without counting it; see
// core.Counter.
func (c *counter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	_, err := c.decide(ctx, key, cost, argZero, ds)
	return err
}

// Refund gives back a request of the given cost that Take admitted at
// time at with decisions ds, in one script; see core.Counter. While the
// circuit is open, the refund goes to the fallback, where decisions go.
func (c *counter) Refund(ctx context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	if cost <= 0 || len(c.tags) == 0 || c.take != argOne {
		return nil // nothing was counted
	}
	if c.store.circuit.IsOpen() {
		if local, err := c.fallback(); err == nil && c.store.fallback > 0 {
			return local.Refund(ctx, key, cost, at, ds)
		}
		return nil
	}
	k := c.call(key, c.refundMode(ds), intArg(cost), strconv.FormatInt(c.store.fromTime(at), 10), 0)
	abandoned, err := c.store.decide(ctx, k)
	if !abandoned {
		k.free()
	}
	if err != nil {
		c.store.circuit.Failed(err)
		return fmt.Errorf("redisstore: refund: %w", err)
	}
	c.store.circuit.Answered()
	return nil
}

// call returns a call of the script on the keys of client key, with the
// given mode, cost and time, whose answer holds perKey integers per limit
// with state (decide.lua): 5 for a decision, 8 for an inspection, none
// for a refund or a grant.
func (c *counter) call(key string, mode, cost, now any, perKey int) *call {
	k := callPool.Get().(*call)
	c.keys(key, &k.keys)
	k.nkeys = len(c.tags)
	k.args = [4]any{c.spec, mode, cost, now}
	k.data = perKey * k.nkeys
	k.err = nil
	return k
}

// refundMode is the mode of the refund of a take whose decisions were ds:
// per limit with state, whether the take was paid from its grant; plain
// argRefund when no grant paid.
func (c *counter) refundMode(ds []core.Decision) any {
	var buf [1 + core.MaxLimits]byte
	b, granted := append(buf[:0], 'r'), false
	for i := range c.params {
		if c.params[i].Block {
			continue
		}
		f := byte('0')
		if i < len(ds) && ds[i].Granted {
			f, granted = '1', true
		}
		b = append(b, f)
	}
	if !granted {
		return argRefund
	}
	return string(b)
}

func (c *counter) decide(ctx context.Context, key string, cost int, mode any, ds []core.Decision) (time.Time, error) {
	if err := limits.CheckRequest(ds, len(c.params), cost, c.capacity); err != nil {
		return time.Time{}, err
	}
	if len(c.tags) == 0 {
		// Only limits that block: nothing to ask Redis.
		for i := range c.params {
			limits.Block(&c.params[i], &ds[i])
		}
		if c.store.clock != nil {
			return c.store.clock(), nil
		}
		return time.Now(), nil
	}
	if c.store.circuit.IsOpen() {
		return c.unavailable(ctx, key, cost, mode, ds)
	}
	k := c.call(key, mode, intArg(cost), c.store.now(), 5)
	abandoned, err := c.store.decide(ctx, k)
	if !abandoned && err == nil && k.res[1] == 0 {
		// Redis is out of memory and this client has no key yet.
		k.free()
		c.store.circuit.Answered()
		return c.local(ctx, key, cost, mode, ds)
	}
	if err != nil {
		if !abandoned {
			k.free()
		}
		if c.store.circuit.Failed(err) && c.store.fallback > 0 {
			return c.local(ctx, key, cost, mode, ds)
		}
		return time.Time{}, fmt.Errorf("redisstore: %w", err)
	}
	c.store.circuit.Answered()
	u := c.store.unit
	res := k.res[2 : 2+k.data]
	for i := range c.params {
		p := &c.params[i]
		if p.Block {
			limits.Block(p, &ds[i])
			continue
		}
		ds[i] = decision(p, res, u)
		res = res[5:]
	}
	at := c.store.toTime(k.res[0])
	k.free()
	return at, nil
}

// decision reads the decision of limit p from the first five numbers of
// its part of a script's reply (allowed, remaining, reset, retry, delay),
// in the store's unit u: Take's reply and Inspect's alike.
func decision(p *core.Params, res []int64, u time.Duration) core.Decision {
	d := core.Decision{
		Allowed:    res[0] >= 1,
		Granted:    res[0] == 2,
		Name:       p.Name,
		Quota:      int(p.Capacity),
		Remaining:  int(max(res[1], 0)),
		Window:     p.Window,
		ResetAfter: time.Duration(max(res[2], 0)) * u,
		Delay:      time.Duration(res[4]) * u,
	}
	if !d.Allowed {
		d.RetryAfter = time.Duration(res[3]) * u
	}
	return d
}
