package hybrid

import (
	"hash/maphash"
	"sync"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

// This file holds what a server holds of its clients: a table in shards,
// and per client its state under every limit it was decided by.

// nshards is the number of shards of the table of clients.
const nshards = 32

// A limit is a limit as the store holds it, whatever the count of each
// binding: its tag (name, algorithm and period), period and algorithm.
type limit struct {
	tag       string
	period    int64 // in nanoseconds
	algorithm core.Algorithm
}

// A shard is a part of the table of clients, under its own lock.
type shard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// An entry is what a server holds of one client under every limit.
type entry struct {
	key    string
	tag    string        // "{<client hash>}"
	lims   []state       // per limit the client was decided by, in no order
	active bool          // decided since the last interval sync
	want   bool          // a request waits for a sync
	busy   bool          // in the sync on the wire
	wait   chan struct{} // closed when the next sync of the entry ends
	err    error         // that sync's error
}

// state is a client's state under one limit.
type state struct {
	lim       *limit
	resets    int64 // times Reset cleared it: a sync sent before is void
	count     int64 // the largest count of the bindings waiting for a lease
	win       int64 // the index of the window cur
	cur, prev window
	grant     grant
	want      int64 // the cost a waiting request needs leased on cur
	wantGrant int64 // the same, from the grant
	hits      int64 // requests decided since the last interval sync
	lastHits  int64 // requests decided in the interval before
	top       int64 // the largest count of the bindings that decided it
}

// window is a client's count in one window.
type window struct {
	known    bool  // synced at least once
	ended    bool  // synced once it had ended (as the previous window)
	epoch    int64 // of the window's hash
	mine     int64 // admitted by this server
	reserved int64 // this server's count in Redis: admitted and leased
	total    int64 // the count across servers at the last sync
	servers  int64 // the servers counting, at the last sync
}

// view is the window's count across servers as this server knows it:
// what the others admitted or leased, and what it admitted itself.
func (w *window) view() int64 {
	if !w.known {
		return max(w.mine, 0)
	}
	return w.total - w.reserved + w.mine
}

// grant is a client's grant under one limit.
type grant struct {
	known    bool
	gen      int64 // 0: no grant
	amount   int64
	total    int64 // used and leased across servers
	expiry   int64 // Unix nanoseconds
	mine     int64 // used by this server
	reserved int64 // this server's part in Redis: used and leased
}

// left returns what is left of the grant at now, across servers.
func (g *grant) left(now int64) int64 {
	if !g.known || g.gen == 0 || g.expiry <= now {
		return 0
	}
	return max(0, g.amount-(g.total-g.reserved+g.mine))
}

// shardOf returns the shard of the table that holds client key.
func (h *Store) shardOf(key string) *shard {
	return &h.shards[maphash.String(h.seed, key)%nshards]
}

// entryOf returns the client's entry, creating it with room for the
// states of n limits; with the shard locked.
func (h *Store) entryOf(sh *shard, key string, n int) *entry {
	if e := sh.m[key]; e != nil {
		return e
	}
	if len(sh.m) >= h.perShard {
		h.evict(sh)
	}
	tag := keys.ClientTag(key)
	e := &entry{key: key, tag: string(tag[:]), lims: make([]state, 0, n)}
	sh.m[key] = e
	return e
}

// index returns the index of the client's state under limit m, or -1
// (always for nil, a limit of 0 requests).
func (e *entry) index(m *limit) int {
	for j := range e.lims {
		if m != nil && e.lims[j].lim == m {
			return j
		}
	}
	return -1
}

// prune forgets the limits that decided none of the client's requests in
// the last two intervals and hold nothing Redis lacks (the limits of a
// limiter replaced by a reload).
func (e *entry) prune() {
	k := 0
	for _, l := range e.lims {
		if l.hits > 0 || l.lastHits > 0 || l.want > 0 || l.wantGrant > 0 || l.dirty() || l.leased() {
			e.lims[k] = l
			k++
		}
	}
	clear(e.lims[k:])
	e.lims = e.lims[:k]
}

// evict forgets clients of a full shard: those whose counts are all in
// Redis and that wait for nothing, a quarter of the shard at most.
func (h *Store) evict(sh *shard) {
	n := 0
	for k, e := range sh.m {
		if e.want || e.busy || e.dirty() {
			continue
		}
		delete(sh.m, k)
		if n++; n >= h.perShard/4+1 {
			return
		}
	}
}

// dirty reports counts that Redis does not have yet.
func (e *entry) dirty() bool {
	for i := range e.lims {
		if e.lims[i].dirty() {
			return true
		}
	}
	return false
}

func (l *state) dirty() bool {
	return l.cur.mine > l.cur.reserved || l.prev.mine > l.prev.reserved || l.grant.mine > l.grant.reserved
}

// roll moves limit i's windows to window win.
func (l *state) roll(win int64) {
	switch {
	case win == l.win:
	case win == l.win+1:
		l.prev, l.cur = l.cur, window{}
	default:
		l.prev, l.cur = window{}, window{}
	}
	l.win = win
}
