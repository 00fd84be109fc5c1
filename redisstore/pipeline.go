package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// Decisions share round trips. At most Store.inflight round trips are on
// the wire at once; a decision that arrives while all of them are busy
// waits in a queue, and the next round trip to leave takes every decision
// that queued meanwhile as one FCALL (on a cluster, one per client,
// pipelined). Each decision is still atomic on its own client's keys (one
// decision by every limit of a limiter, or one refund) and answered on
// its own; sharing saves round trips, system calls and, in Redis, the
// fixed cost of a command and of a script run. A decision that
// finds a round trip free sends it at once from the caller's goroutine,
// so a lone decision waits for nothing but its own answer.
//
// A round trip that finds decisions queued when it ends sends them in a
// goroutine of its own (its caller returns), and goes on until the queue
// is empty; so under load the round trips in flight are a few loops that
// each carry everything that queued while the previous answer travelled.

// maxBatch bounds the decisions sent in one round trip, so that one
// pipeline never holds a connection long.
const maxBatch = 256

// A call is one decision (or refund) on its way to Redis and back. Calls
// are pooled: the keys stay with the call.
type call struct {
	keys     [core.MaxLimits]string // the Redis keys
	nkeys    int
	args     [4]any // the decision's spec, mode, cost and time (decide.lua)
	deadline time.Time
	data     int                         // the integers the script answers beyond the status and the time (decide.lua)
	res      [2 + 8*core.MaxLimits]int64 // the time, the status, the data
	err      error
	done     chan struct{} // signalled when res or err is set, by a round trip the caller did not send
	alone    [1]*call      // the call itself, as the calls of a round trip of its own
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// free returns k to the pool. Only the caller may free a call, and only
// once no round trip refers to it: after its own round trip returned, or
// after it received on done.
func (k *call) free() {
	clear(k.keys[:])
	k.args = [4]any{}
	k.alone[0] = nil
	callPool.Put(k)
}

// errWrongType is the error of a decision one of whose keys holds a value
// of another type than the store writes (another program wrote it): the
// decision's own, not Redis's (see outage).
var errWrongType error = keyError("WRONGTYPE a Redis key of this client holds a value of the wrong type; the store wrote nothing")

// A keyError is an error about the keys of one decision, which Redis
// reported in the script's answer.
type keyError string

// Error returns the error's text, as Redis would have answered it.
func (e keyError) Error() string { return string(e) }

// RedisError marks the error as Redis's answer (redis.Error).
func (keyError) RedisError() {}

// answer reads the call's answer from the front of vals, a batch's
// answer, and returns the rest: a status, the time and, when the status
// is 1, k.data integers (decide.lua).
func (k *call) answer(vals []int64) ([]int64, error) {
	if len(vals) < 2 {
		return nil, errShortAnswer
	}
	k.res[0], k.res[1] = vals[1], vals[0]
	vals = vals[2:]
	switch k.res[1] {
	case 0:
	case 1:
		if len(vals) < k.data {
			return nil, errShortAnswer
		}
		copy(k.res[2:], vals[:k.data])
		vals = vals[k.data:]
	case 2:
		k.err = errWrongType
	case 3: // a grant beyond a limit's capacity: which, and its grant
		if len(vals) < 2 {
			return nil, errShortAnswer
		}
		copy(k.res[2:], vals[:2])
		vals = vals[2:]
	default:
		return nil, fmt.Errorf("script answered status %d", k.res[1])
	}
	return vals, nil
}

var errShortAnswer = errors.New("script answered fewer integers than the decisions sent")

// The ways to run the code (library.go): the function, the function that
// may write when Redis is out of memory, the script and the script that
// may write then, and the plain script of Redis before 7.0: each script
// by its hash, then by its source (NOSCRIPT moves to the next way).
const (
	viaFunction = iota
	viaFull
	viaHash
	viaSource
	viaFullHash
	viaFullSource
	viaOldHash
	viaOldSource
)

var viaArgs = [...][2]any{
	viaFunction:   {"fcall", functionTake},
	viaFull:       {"fcall", functionFull},
	viaHash:       {"evalsha", takeScript.Hash()},
	viaSource:     {"eval", takeSource},
	viaFullHash:   {"evalsha", fullScript.Hash()},
	viaFullSource: {"eval", fullSource},
	viaOldHash:    {"evalsha", oldScript.Hash()},
	viaOldSource:  {"eval", oldSource},
}

// viaStart is the way a round trip first runs the code, by how the store
// runs it (Store.code).
var viaStart = [...]int{codeFunctions: viaFunction, codeScripts: viaHash, codeOldScripts: viaOldHash}

// viaOOM is the way to run again a batch that Redis refused because it is
// out of memory: the code that may write then, if there is one (there is
// none for Redis before 7.0).
func viaOOM(via int) (int, bool) {
	switch via {
	case viaFunction:
		return viaFull, true
	case viaHash:
		return viaFullHash, true
	case viaSource:
		return viaFullSource, true // the script cache was emptied: send the source at once
	}
	return 0, false
}

// isFull reports a way that may write when Redis is out of memory.
func isFull(via int) bool { return via == viaFull || via == viaFullHash || via == viaFullSource }

// A batch is one command that runs several calls, in one script run
// (decide.lua's many): their keys must be in one Cluster slot, or on one
// server.
type batch struct {
	calls []*call
	via   int
	args  []any
	cmd   *redis.IntSliceCmd
}

// command builds the batch's command, to run the code the given way.
func (b *batch) command(ctx context.Context, via int) {
	b.via = via
	n := 0
	for _, k := range b.calls {
		n += k.nkeys
	}
	b.args = append(b.args[:0], viaArgs[via][0], viaArgs[via][1], intArg(n))
	for _, k := range b.calls {
		for i := range k.nkeys {
			b.args = append(b.args, &k.keys[i])
		}
	}
	for _, k := range b.calls {
		b.args = append(b.args, k.args[:]...)
	}
	b.cmd = redis.NewIntSliceCmd(ctx, b.args...)
	b.cmd.SetFirstKeyPos(3)
}

// answer gives every call of b its answer or error.
func (b *batch) answer() {
	err := b.cmd.Err()
	vals := b.cmd.Val()
	for _, k := range b.calls {
		if err == nil {
			vals, err = k.answer(vals)
		}
		if err != nil {
			k.err = err
		}
	}
	if err == nil && len(vals) > 0 {
		for _, k := range b.calls {
			k.err = errors.New("script answered more integers than the decisions sent")
		}
	}
}

// decide runs k, by its deadline at the latest, and fills in k.res, or
// returns the error of the call. When the caller's ctx ends first, decide
// returns ctx.Err() at once and k stays with its round trip: only when
// decide returned that error must the caller not free k.
func (s *Store) decide(ctx context.Context, k *call) (abandoned bool, err error) {
	k.deadline = time.Now().Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(k.deadline) {
		k.deadline = d
	}
	if !s.bounded {
		return s.alone(ctx, k)
	}
	s.mu.Lock()
	if s.running < s.inflight {
		s.running++
		s.mu.Unlock()
		k.alone[0] = k
		s.send(ctx, k.alone[:])
		s.next()
		return false, k.err
	}
	s.queue = append(s.queue, k)
	s.mu.Unlock()
	select {
	case <-k.done:
		return false, k.err
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// next ends a round trip: if decisions queued while it was on the wire,
// a goroutine sends them, else the round trip's slot is free.
func (s *Store) next() {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.running--
		s.mu.Unlock()
		return
	}
	batch := s.take()
	s.mu.Unlock()
	go s.drain(batch)
}

// take removes up to maxBatch calls from the queue; s.mu is held.
func (s *Store) take() []*call {
	n := min(len(s.queue), maxBatch)
	var batch []*call
	if last := len(s.batches) - 1; last >= 0 {
		batch, s.batches = s.batches[last], s.batches[:last]
	} else {
		batch = make([]*call, 0, maxBatch)
	}
	batch = append(batch, s.queue[:n]...)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return batch
}

// drain sends batch, then every batch that queued meanwhile, until the
// queue is empty, and wakes the caller of each call.
func (s *Store) drain(batch []*call) {
	for {
		// Calls whose deadline passed in the queue are not sent.
		now := time.Now()
		live := batch[:0]
		for _, k := range batch {
			if k.deadline.After(now) {
				live = append(live, k)
				continue
			}
			k.err = context.DeadlineExceeded
			k.done <- struct{}{}
		}
		if len(live) > 0 {
			s.send(context.Background(), live)
			for _, k := range live {
				k.done <- struct{}{} // the caller may free k from here on
			}
		}
		s.mu.Lock()
		clear(batch)
		s.batches = append(s.batches, batch[:0])
		if len(s.queue) == 0 {
			s.running--
			s.mu.Unlock()
			return
		}
		batch = s.take()
		s.mu.Unlock()
	}
}

// send sends calls in one round trip (one per cluster node), by the
// earliest deadline of its calls, and sets each call's answer or error.
// On one server, one command runs them all; on a cluster or a ring, one
// command per client (hash tag), pipelined. Commands that Redis refused
// before running anything are sent again, at most twice: with the source,
// after NOSCRIPT (the script cache was emptied by a restart, a failover
// or SCRIPT FLUSH); after the library was loaded again, when the function
// was not found (the same, for Functions); to the function or the script
// that may write when Redis is out of memory (OOM), which decides
// existing keys only (see outOfMemory). Nothing that may have run is ever
// sent twice.
func (s *Store) send(ctx context.Context, calls []*call) {
	deadline := calls[0].deadline
	for _, k := range calls[1:] {
		if k.deadline.Before(deadline) {
			deadline = k.deadline
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	via := viaStart[s.code.Load()]
	batches, free := s.group(calls)
	defer free()
	for _, b := range batches {
		b.command(ctx, via)
	}
	s.exec(ctx, batches)
	sent := batches
	for range 2 {
		var again []*batch
		reload := false
		for _, b := range sent {
			err := b.cmd.Err()
			switch {
			case err == nil:
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				b.command(ctx, b.via+1) // the same script's source
				again = append(again, b)
			case redis.HasErrorPrefix(err, "Function not found"):
				reload = true
				again = append(again, b)
			case redis.HasErrorPrefix(err, "OOM"):
				if via, ok := viaOOM(b.via); ok {
					b.command(ctx, via)
					again = append(again, b)
				}
			}
		}
		if len(again) == 0 {
			break
		}
		if reload {
			if err := s.load(ctx); err != nil {
				break // the calls keep their error
			}
			for _, b := range again {
				switch {
				case !redis.HasErrorPrefix(b.cmd.Err(), "Function not found"):
				case s.code.Load() != codeFunctions:
					b.command(ctx, viaStart[s.code.Load()])
				default:
					b.command(ctx, b.via)
				}
			}
		}
		s.exec(ctx, again)
		sent = again
	}
	full, answered := 0, false
	for _, b := range batches {
		b.answer()
		if b.cmd.Err() != nil {
			continue
		}
		if !isFull(b.via) {
			answered = true
			continue
		}
		for _, k := range b.calls {
			if k.err == nil {
				full++
			}
		}
	}
	s.outOfMemory(full, answered)
}

// group returns the batches of calls: one on a single server, one per
// hash tag on a cluster or a ring; and a function to call once they are
// answered, which recycles them.
func (s *Store) group(calls []*call) ([]*batch, func()) {
	if _, one := s.client.(*redis.Client); one {
		t := tripPool.Get().(*trip)
		t.batch.calls = calls
		return t.list[:], t.free
	}
	var out []*batch
	byTag := map[string]*batch{}
	for _, k := range calls {
		key := k.keys[0]
		tag := key[strings.IndexByte(key, '{') : strings.IndexByte(key, '}')+1]
		b := byTag[tag]
		if b == nil {
			b = &batch{}
			byTag[tag] = b
			out = append(out, b)
		}
		b.calls = append(b.calls, k)
	}
	return out, func() {}
}

// A trip is the one batch of a round trip to a single server, pooled
// with its argument slice.
type trip struct {
	batch batch
	list  [1]*batch
}

var tripPool = sync.Pool{New: func() any {
	t := &trip{}
	t.list[0] = &t.batch
	return t
}}

// free returns t to the pool, keeping the capacity of its arguments.
func (t *trip) free() {
	clear(t.batch.args)
	t.batch = batch{args: t.batch.args[:0]}
	tripPool.Put(t)
}

// exec sends the commands of batches: alone, or pipelined.
func (s *Store) exec(ctx context.Context, batches []*batch) {
	if len(batches) == 1 {
		_ = s.client.Process(ctx, once{batches[0].cmd})
		return
	}
	pipe := s.client.Pipeline()
	for _, b := range batches {
		_ = pipe.Process(ctx, once{b.cmd})
	}
	_, _ = pipe.Exec(ctx)
}

// alone runs k as a round trip of its own, for a client that does not
// apply context deadlines: from a goroutine, so that the caller stops
// waiting at the deadline while the client waits for its ReadTimeout.
// The goroutine ends with the client's own timeout; waiting for a pooled
// connection ends at the deadline too, so at most one per pooled
// connection lingers.
func (s *Store) alone(ctx context.Context, k *call) (abandoned bool, err error) {
	ctx, cancel := context.WithDeadline(ctx, k.deadline)
	defer cancel()
	k.alone[0] = k
	go func() {
		s.send(ctx, k.alone[:])
		k.done <- struct{}{}
	}()
	select {
	case <-k.done:
		return false, k.err
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// once is a command that go-redis never sends again on its own: after a
// broken connection or a timeout, Redis may have run the script already,
// and a second run would count the request twice.
type once struct{ *redis.IntSliceCmd }

// NoRetry tells go-redis not to retry the command.
func (once) NoRetry() bool { return true }
