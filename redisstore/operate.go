package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
)

// This file holds the operator's controls of a counter (core.Limiter's
// Inspect, Reset and Grant): each one script over all of a client's keys,
// which share a hash tag, so one round trip and one Cluster slot.

var argInspect, argReset any = "i", "x"

// run sends a call of the operator's and returns it answered; the caller
// frees it.
func (c *counter) run(ctx context.Context, k *call) (*call, error) {
	if c.store.circuit.IsOpen() {
		k.free()
		return nil, ErrUnavailable
	}
	abandoned, err := c.store.decide(ctx, k)
	if err != nil {
		if !abandoned {
			k.free()
		}
		c.store.circuit.Failed(err)
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	c.store.circuit.Answered()
	return k, nil
}

// Inspect answers what a request of cost 1 would get from every limit and
// each limit's grant, counting nothing; see core.Counter.
func (c *counter) Inspect(ctx context.Context, key string, ds []core.Decision, gs []core.Grant) (bool, error) {
	if err := limits.CheckInspect(ds, gs, len(c.params)); err != nil {
		return false, err
	}
	if len(c.tags) == 0 {
		for i := range c.params {
			limits.Block(&c.params[i], &ds[i])
			gs[i] = core.Grant{}
		}
		return false, nil
	}
	k, err := c.run(ctx, c.call(key, argInspect, argOne, c.store.now(), 8))
	if err != nil {
		return false, err
	}
	defer k.free()
	u := c.store.unit
	res := k.res[2 : 2+k.data]
	tracked := false
	for i := range c.params {
		p := &c.params[i]
		if p.Block {
			limits.Block(p, &ds[i])
			gs[i] = core.Grant{}
			continue
		}
		ds[i] = decision(p, res, u)
		gs[i] = core.Grant{}
		if res[5] > 0 {
			gs[i] = core.Grant{Amount: int(res[5]), ExpiresIn: time.Duration(res[6]) * u}
		}
		tracked = tracked || res[7] == 1
		res = res[8:]
	}
	return tracked, nil
}

// Reset deletes the client's keys under every limit, grants included, and
// its state in the fallback; see core.Counter.
func (c *counter) Reset(ctx context.Context, key string) (bool, error) {
	if local := c.bound(); local != nil {
		_, _ = local.Reset(ctx, key)
	}
	if len(c.tags) == 0 {
		return false, nil
	}
	k := c.call(key, argReset, argZero, c.store.now(), 0)
	k.data = 1 // whether a key was deleted
	k, err := c.run(ctx, k)
	if err != nil {
		return false, err
	}
	defer k.free()
	return k.res[2] == 1, nil
}

// Grant adds amount to the client's grant under every limit, for ttl; see
// core.Counter.
func (c *counter) Grant(ctx context.Context, key string, amount int, ttl time.Duration) error {
	if err := core.CheckGrant(c.params, amount, ttl); err != nil {
		return err
	}
	units := (int64(ttl) + int64(c.store.unit) - 1) / int64(c.store.unit)
	mode := "g" + strconv.FormatInt(units, 10)
	k, err := c.run(ctx, c.call(key, mode, intArg(amount), c.store.now(), 0))
	if err != nil {
		return err
	}
	defer k.free()
	if k.res[1] == 3 {
		p := c.params[c.withState(int(k.res[2]))]
		return fmt.Errorf("redisstore: %w: %d more on the %d granted would exceed the capacity %d of limit %q",
			core.ErrInvalidGrant, amount, k.res[3], p.Capacity, p.Name)
	}
	return nil
}

// withState returns the index in c.params of the i-th limit with state.
func (c *counter) withState(i int) int {
	for j := range c.params {
		if c.params[j].Block {
			continue
		}
		if i == 0 {
			return j
		}
		i--
	}
	return 0
}

// bound returns the fallback's counter if it has been bound, else nil.
func (c *counter) bound() core.Counter {
	if c.store.fallback == 0 {
		return nil
	}
	local, err := c.fallback()
	if err != nil {
		return nil
	}
	return local
}
