package hybrid

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// This file holds the hybrid store's synchronisation: the loop that
// batches the clients to sync into one round trip, and what the answers
// change.

// loop syncs every interval the clients used since the last time, and at
// once the clients that a request waits for.
func (h *Store) loop() {
	defer h.done.Done()
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			h.sync(true, true)
			close(h.synced) // the last sends to other regions carry its counts
			return
		case <-t.C:
			h.sync(true, false)
		case <-h.wake:
			h.sync(false, false)
		}
	}
}

// A slot is one key of a sync and where its answer goes.
type slot struct {
	limit  int   // in the entry's lims
	resets int64 // of the limit's state when sent
	kind   byte  // 'c' the window cur, 'p' prev, 'g' the grant
	win    int64 // the window index of cur when sent
	sent   int64 // the count sent; -1: read what Redis holds
	epoch  int64 // the epoch (or grant generation) it was counted under
}

// An item is one client in a sync.
type item struct {
	sh    *shard
	e     *entry
	slots []slot
	wait  chan struct{}
}

// syncTTL is how long past its window's end a window hash lives: enough
// for a server's clock to be behind Redis's without losing counts.
const syncTTL = time.Minute

// Sync runs now the sync that runs every interval: it sends this server's
// counts, gives back the leases of clients it has not decided since the
// last sync, and refreshes its view of every client it decided, grants
// included. It returns the error of a round trip that failed; the counts
// it could not send go with a later sync.
func (h *Store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return h.sync(true, false)
}

// sync runs one round trip: with tick, for every client used since the
// last tick (and gives back the leases of clients that were not); without,
// for the clients a request waits for. With final it gives back every
// lease.
func (h *Store) sync(tick, final bool) error {
	h.syncMu.Lock()
	defer h.syncMu.Unlock()
	now := h.now().UnixNano()
	nowMs := now / int64(time.Millisecond)
	var items []*item
	var groups []group
	for si := range h.shards {
		sh := &h.shards[si]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.busy || !(e.want || tick) {
				continue
			}
			idle := tick && !e.active
			if idle && !e.want && !e.dirty() && !e.leased() && !final {
				// nothing to send, nothing held: forget it
				delete(sh.m, k)
				continue
			}
			if tick && !e.want {
				e.prune()
			}
			it := &item{sh: sh, e: e, wait: e.wait}
			g := group{tag: e.tag}
			for j := range e.lims {
				h.snapshot(it, &g, j, now, tick, idle || final)
			}
			e.want, e.busy, e.wait = false, true, nil
			if tick {
				e.active = false
			}
			items = append(items, it)
			groups = append(groups, g)
		}
		sh.mu.Unlock()
	}
	if len(items) == 0 {
		return nil
	}
	timeout := h.timeout
	if final {
		timeout = max(timeout, time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	head := []any{"s", h.id, strconv.FormatInt(h.seq.Add(1), 10), strconv.FormatInt(nowMs, 10)}
	sent := h.local()
	if at, ok := h.run(ctx, h.client, head, groups, 8); ok {
		h.clockRead(at, sent, h.local())
	}
	cancel()
	failure := error(nil)
	for i, it := range items {
		if groups[i].err != nil && failure == nil {
			failure = groups[i].err
		}
		h.apply(it, &groups[i])
	}
	h.episode(failure)
	return failure
}

// leased reports a lease this server holds for the client.
func (e *entry) leased() bool {
	for i := range e.lims {
		if e.lims[i].leased() {
			return true
		}
	}
	return false
}

func (l *state) leased() bool {
	return l.cur.reserved > l.cur.mine || l.prev.reserved > l.prev.mine || l.grant.reserved > l.grant.mine
}

// snapshot adds the keys of the client's limit j (in its entry's lims) to
// the sync: the current window (with the lease a request waits for), the
// previous one when it is unknown or holds something to send, and the
// grant. With release, or when no request was decided by the limit since
// the last tick, the counts sent give back unused leases.
func (h *Store) snapshot(it *item, g *group, j int, now int64, tick, release bool) {
	l := &it.e.lims[j]
	m := l.lim
	release = release || tick && l.hits == 0
	l.roll(floorDiv(now, m.period))
	base := h.prefix + it.e.tag + m.tag
	ttl := func(win int64) string {
		end := (win + 2) * m.period
		return strconv.FormatInt((end-now)/int64(time.Millisecond)+syncTTL.Milliseconds()+h.slack(), 10)
	}
	// A lease covers what the client may send here until the next sync:
	// twice its requests in the busier of this interval and the last.
	most := strconv.FormatInt(2*max(l.hits, l.lastHits)+max(l.want, l.wantGrant), 10)
	// The limit the window is counted under here: no other region can
	// have admitted more (the script clamps their counts to it).
	top := strconv.FormatInt(l.top, 10)
	hits := l.hits
	if tick {
		l.lastHits, l.hits = l.hits, 0
	}
	add := func(w *window, kind byte, win, cost int64) {
		s := slot{limit: j, resets: l.resets, kind: kind, win: l.win, sent: -1, epoch: w.epoch}
		if w.known {
			s.sent = max(w.mine, w.reserved)
			if release || kind == 'p' {
				s.sent = w.mine
				w.reserved = min(w.reserved, w.mine) // no more from the lease
			}
		}
		capacity := l.count // the count of the bindings that wait for a lease
		if m.algorithm == core.SlidingWindowCounter && kind == 'c' {
			if cost == 0 && tick && !release && hits > 0 && w.known && w.reserved-w.mine < hits {
				// A client decided here in the last interval, with less
				// leased than it sent: the interval sync tops its lease
				// up, under the largest count that decided it.
				cost, capacity = 1, l.top
			}
			capacity -= ceilMulDiv(l.prev.view(), m.period-h.ahead(now, m.period), m.period)
			if !l.prev.known {
				cost = 0 // no lease before the previous window is known
			}
		}
		it.slots = append(it.slots, s)
		g.keys = append(g.keys, base+"w"+strconv.FormatInt(win, 10))
		g.args = append(g.args, "w", ttl(win), strconv.FormatInt(s.epoch, 10), strconv.FormatInt(s.sent, 10),
			strconv.FormatInt(capacity, 10), strconv.FormatInt(cost, 10), most, top)
	}
	add(&l.cur, 'c', l.win, l.want)
	if (m.algorithm == core.SlidingWindowCounter && !l.prev.ended) || l.prev.mine != l.prev.reserved {
		add(&l.prev, 'p', l.win-1, 0)
	}
	gr := &l.grant
	s := slot{limit: j, resets: l.resets, kind: 'g', win: l.win, sent: -1, epoch: gr.gen}
	if gr.known {
		s.sent = max(gr.mine, gr.reserved)
		if release {
			s.sent = gr.mine
			gr.reserved = min(gr.reserved, gr.mine)
		}
	}
	it.slots = append(it.slots, s)
	g.keys = append(g.keys, base+"g")
	g.args = append(g.args, "g", strconv.FormatInt(s.epoch, 10), strconv.FormatInt(s.sent, 10), strconv.FormatInt(l.wantGrant, 10), most, "0", "0", "0")
	l.want, l.wantGrant, l.count = 0, 0, 0
}

// slack lengthens TTLs under a test clock, whose time does not pass as
// Redis's does.
func (h *Store) slack() int64 {
	if h.clock != nil {
		return (10 * time.Minute).Milliseconds()
	}
	return 0
}

// ahead returns how far into its window (of period) the sliding window
// counter's capacity is leased at now: two sync intervals on, or the
// window's end.
//
// Under a sliding window counter the previous window's weight falls as
// the window goes on, so its capacity grows at a known pace: the
// previous window's count per period. A lease sized by the capacity at
// now (a lease of one, under sustained overload) would cost a round trip
// per admission; a lease sized by the capacity two intervals on lasts
// until the next interval sync, which tops it up (servers take their
// shares in turn, so the total leased stays about an interval ahead).
// A lease only bounds what a server may admit: each admission is still
// decided by the counter's estimate at its own time, over what this
// server admitted and all the others hold (admitted or leased), so
// the servers together admit no more than the counter allows. Leases
// held ahead are the under-admission's price, at most two intervals of
// the capacity's growth.
func (h *Store) ahead(now, period int64) int64 {
	return min(floorMod(now, period)+2*h.interval.Nanoseconds(), period)
}

func ceilMulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return (a*b + c - 1) / c
}

// apply takes the answer of an item's keys, and wakes the requests that
// waited for it.
func (h *Store) apply(it *item, g *group) {
	it.sh.mu.Lock()
	e := it.e
	e.busy, e.err = false, g.err
	if g.err == nil {
		for j, s := range it.slots {
			r := g.out[j*8 : j*8+8]
			l := &e.lims[s.limit]
			if l.resets != s.resets {
				continue // cleared by Reset since it was sent
			}
			if s.kind == 'g' {
				l.grant.take(r, s)
				continue
			}
			var w *window
			win := s.win
			if s.kind == 'p' {
				win--
			}
			switch win {
			case l.win:
				w = &l.cur
			case l.win - 1:
				w = &l.prev
			default:
				continue // the window has passed
			}
			w.take(r, s)
			if s.kind == 'p' && w == &l.prev {
				w.ended = true // read after its end: what no server can add to
			}
			if n := r[3] + r[4]; n > h.servers.Load() {
				h.servers.Store(n)
			}
			if len(h.peers) > 0 {
				m := merge{version: r[7], count: r[1], servers: r[3], expires: (win+2)*l.lim.period + int64(syncTTL)}
				for _, peer := range h.peers {
					peer.offer(g.keys[j], m)
				}
			}
		}
	}
	it.sh.mu.Unlock()
	if it.wait != nil {
		close(it.wait)
	}
}

// take applies a window's answer: epoch, this region's count, the other
// regions', this region's servers, the others', this server's count
// before and the lease, the version.
func (w *window) take(r []int64, s slot) {
	base, got := r[5], r[6]
	switch {
	case s.sent < 0 || !w.known: // Redis's count of this server is what it admitted
		w.mine = base + max(w.mine, 0)
		w.reserved = base + got
	case r[0] != s.epoch: // reset since: what this server held is void
		w.mine, w.reserved = base, base+got
	default:
		w.reserved = s.sent + got
	}
	w.epoch, w.total, w.servers, w.known = r[0], r[1]+r[2], r[3]+r[4], true
}

// take applies a grant's answer: generation, amount, used across servers,
// expiry (ms), this server's part before and the lease.
func (g *grant) take(r []int64, s slot) {
	gen, base, got := r[0], r[4], r[5]
	if gen == 0 {
		*g = grant{known: true}
		return
	}
	if !g.known || s.sent < 0 || gen != g.gen || gen != s.epoch {
		g.mine, g.reserved = base, base+got
	} else {
		g.reserved = s.sent + got
	}
	g.known, g.gen, g.amount, g.total, g.expiry = true, gen, r[1], r[2], r[3]*int64(time.Millisecond)
}

// episode logs the start and the end of a run of failed syncs, once each
// (at most two lines per 10 seconds, however the syncs alternate).
func (h *Store) episode(err error) {
	if err != nil {
		h.circuit.Failed(err)
		if start, _ := h.failures.Fail(); start {
			h.log.Warn("redisstore: hybrid sync failing; deciding locally within each server's share", "error", err)
		}
		return
	}
	h.circuit.Answered()
	if end, n := h.failures.Recover(); end {
		h.log.Info("redisstore: hybrid sync answering again", "failed_syncs", n)
	}
}

// A group is the keys of one client in a round trip, their arguments,
// and what came back.
type group struct {
	tag  string
	keys []string
	args []any
	out  []int64
	err  error
}

// maxKeysPerCall bounds the keys of one script run, which blocks Redis
// while it runs.
const maxKeysPerCall = 512

// run sends the script's operation head with every group's keys and
// arguments in one round trip: on one server, as few script runs as
// maxKeysPerCall allows; on a cluster, one per client, pipelined. Each
// group gets its answer, perKey integers per key (with perKey 0, its
// script run's whole answer), or an error. With perKey set, run returns
// Redis's clock as the first script run read it, in Unix nanoseconds, if
// it could.
func (h *Store) run(ctx context.Context, client redis.UniversalClient, head []any, groups []group, perKey int) (redisNow int64, read bool) {
	type call struct {
		from, to int // groups
		keys     []string
		args     []any
		cmd      *redis.Cmd
	}
	_, cluster := client.(*redis.ClusterClient)
	_, ring := client.(*redis.Ring)
	cluster = cluster || ring
	var calls []*call
	for i := range groups {
		var k *call
		if n := len(calls); n > 0 && !cluster && len(calls[n-1].keys)+len(groups[i].keys) <= maxKeysPerCall {
			k = calls[n-1]
		} else {
			k = &call{from: i, args: append([]any(nil), head...)}
			calls = append(calls, k)
		}
		k.to = i + 1
		k.keys = append(k.keys, groups[i].keys...)
		k.args = append(k.args, groups[i].args...)
	}
	send := func() error {
		_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range calls {
				k.cmd = p.EvalSha(ctx, hybridScript.Hash(), k.keys, k.args...)
			}
			return nil
		})
		return err
	}
	err := send()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = loadScript(ctx, client); err == nil {
			err = send()
		}
	}
	for _, k := range calls {
		var out []int64
		cerr := k.cmd.Err()
		if cerr == nil {
			switch v := k.cmd.Val().(type) {
			case []any:
				out = make([]int64, len(v))
				for j, x := range v {
					n, _ := x.(int64)
					out[j] = n
				}
			case int64:
				out = []int64{v}
			}
		} else if err != nil && !errors.Is(cerr, err) {
			cerr = errors.Join(cerr, err)
		}
		if n := len(k.keys) * perKey; perKey > 0 && cerr == nil && len(out) == n+2 && !read {
			redisNow, read = out[n]*int64(time.Second)+out[n+1]*int64(time.Microsecond), true
		}
		off := 0
		for i := k.from; i < k.to; i++ {
			g := &groups[i]
			g.err = cerr
			if cerr == nil {
				if perKey == 0 { // one answer for the whole call
					g.out = out
					continue
				}
				n := len(g.keys) * perKey
				if off+n > len(out) {
					g.err = errors.New("redisstore: hybrid script answered short")
					continue
				}
				g.out = out[off : off+n]
				off += n
			}
		}
	}
	return redisNow, read
}
