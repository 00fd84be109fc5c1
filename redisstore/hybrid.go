package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
)

// The hybrid store: local decisions on leases from Redis.
//
// Each server keeps, per client and limit, its view of the window's count
// across servers (as Redis said at the last sync) and a lease: requests it
// may admit without asking. Its count in Redis (its field of the window's
// hash) is what it admitted plus what it leased, so the total in Redis
// never falls below what the servers together may admit, and a request is
// admitted only within a lease: no server admits what another counted.
// A lease is the server's share of what is left (left / servers, at least
// the request's cost), granted by the script atomically; near the limit
// leases shrink to one request, and past it nothing is leased, so the
// last requests of a window are decided in Redis, one at a time, as in
// the exact store. A rejection is decided locally, from the view, without
// Redis.
//
// A sync (one round trip) pushes the server's counts and takes fresh
// leases for every client that needs one; it runs every interval for the
// clients used since the last one, and at once when a request finds its
// lease used up. A lease unused for an interval is given back. Counts
// are written whole, with a sequence number, never added: a sync whose
// answer was lost is sent again without counting twice.
//
// A server holds one state per client and limit (name, algorithm and
// period), whichever of its limiters decided it: every binding of a limit
// on one store (a limiter rebound by a rules reload, the plans of a plan
// limiter, elastic throttling's raised limits) decides on the same counts
// and leases, each by its own count, as the Store contract asks. A lease
// is asked for under the largest count of the requests waiting for it.

//go:embed hybrid.lua
var hybridSource string

var hybridScript = redis.NewScript(hybridSource)

// A Hybrid is a local-first store: each server decides requests in
// process, on leases of the limit taken from Redis in batches, and
// synchronises with Redis every interval. See NewHybrid.
type Hybrid struct {
	s        *Store
	interval time.Duration
	id       string
	seq      atomic.Int64
	log      *slog.Logger

	mu     sync.Mutex
	limits map[string]*hlimit // every limit bound, by tag

	// What the server holds of each client, under every limit bound:
	// shared by all bindings of a limit, as the Store contract asks.
	seed     maphash.Seed
	perShard int
	shards   [hshards]hshard

	wake      chan struct{}
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once

	servers atomic.Int64 // the most servers a sync reported: shares while Redis is away
	peers   []*peer      // other regions (hybrid_region.go)

	syncMu   sync.Mutex  // one sync at a time
	failures episode.Log // of the syncs
}

// DefaultHybridKeys bounds the clients a hybrid store keeps in memory,
// under all of its limiters, unless WithMaxKeys says otherwise.
const DefaultHybridKeys = 100_000

// NewHybrid returns a store that decides requests in this process and
// synchronises with Redis every interval (see the package documentation,
// "Hybrid"). It supports the fixed window and sliding window counter
// algorithms, whose counts merge by adding; binding a bucket or a log is
// an error. The options of New apply (WithPrefix, WithTimeout, WithClock),
// as do WithRegion, WithMaxKeys and WithLogger; WithFallback and
// WithInFlight do not.
// Close stops the synchronisation and gives back unused leases.
func NewHybrid(client redis.UniversalClient, interval time.Duration, opts ...Option) (*Hybrid, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("redisstore: hybrid sync interval %s must be positive", interval)
	}
	s, err := New(client, append([]Option{func(s *Store) error { s.hybrid = true; return nil }}, opts...)...)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	sum := sha256.Sum256(strconv.AppendInt([]byte(strconv.FormatUint(new(maphash.Hash).Sum64(), 36)), time.Now().UnixNano(), 10))
	copy(id[:], sum[:])
	h := &Hybrid{s: s, interval: interval, id: base64.RawURLEncoding.EncodeToString(id[:]), log: slog.Default(),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), limits: map[string]*hlimit{}, seed: maphash.MakeSeed()}
	if s.log != nil {
		h.log = s.log
	}
	per := s.maxKeys
	if per == 0 {
		per = DefaultHybridKeys
	}
	h.perShard = per / hshards
	for i := range h.shards {
		h.shards[i].m = map[string]*hentry{}
	}
	for name, c := range s.peers {
		h.peers = append(h.peers, &peer{name: name, client: c, pending: map[string]merge{}})
	}
	h.done.Add(1)
	go h.loop()
	for _, p := range h.peers {
		h.done.Add(1)
		go h.replicate(p)
	}
	return h, nil
}

// WithMaxKeys bounds the clients a hybrid store keeps, under all of its
// limiters (default DefaultHybridKeys). When its table is full, clients
// whose leases are used up are forgotten first (their counts are in
// Redis); a client seen again starts from what Redis holds.
func WithMaxKeys(n int) Option {
	return func(s *Store) error {
		if n < hshards {
			return fmt.Errorf("redisstore: max keys %d must be at least %d", n, hshards)
		}
		s.maxKeys = n
		return nil
	}
}

// Close stops the store's synchronisation after a last sync that sends
// what this server counted and gives back its unused leases. Decisions
// after Close are still taken, on what the server holds.
func (h *Hybrid) Close() error {
	h.closeOnce.Do(func() { close(h.stop) })
	h.done.Wait()
	return nil
}

func (h *Hybrid) now() time.Time {
	if h.s.clock != nil {
		return h.s.clock()
	}
	return time.Now()
}

// Bind returns the counter of a limiter's limits, which must each be a
// fixed window, a sliding window counter or a limit of 0 requests. Every
// binding of a limit (same name, algorithm and period) decides on the
// same counts in this process, each by its own count.
func (h *Hybrid) Bind(limits []core.Limit) (core.Counter, error) {
	if len(limits) == 0 || len(limits) > core.MaxLimits {
		return nil, fmt.Errorf("redisstore: %w: %d limits; a counter has 1 to %d", core.ErrInvalidLimit, len(limits), core.MaxLimits)
	}
	c := &hcounter{h: h, capacity: 1<<63 - 1}
	tags := make([]string, 0, len(limits))
	for i, l := range limits {
		q, err := h.s.params(l)
		if err != nil {
			return nil, err
		}
		p, err := l.Params(time.Nanosecond)
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		for _, o := range c.params[:i] {
			if o.ID == p.ID {
				return nil, fmt.Errorf("redisstore: %w: two limits with the ID %q", core.ErrInvalidLimit, p.ID)
			}
		}
		tag := ""
		if !p.Block {
			if p.Algorithm != core.FixedWindow && p.Algorithm != core.SlidingWindowCounter {
				return nil, fmt.Errorf("redisstore: %w: the hybrid store cannot merge the counts of %s limit %q across servers; use fixed-window or sliding-window-counter, or the exact store (New)",
					core.ErrInvalidLimit, p.Algorithm, p.Name)
			}
			if tag, err = h.s.tag(&q); err != nil {
				return nil, err
			}
			c.capacity = min(c.capacity, p.Capacity)
		}
		c.params = append(c.params, p)
		tags = append(tags, tag)
	}
	h.mu.Lock()
	for i, tag := range tags {
		if tag == "" {
			c.lims = append(c.lims, nil)
			continue
		}
		m := h.limits[tag]
		if m == nil {
			m = &hlimit{tag: tag, period: c.params[i].Period, algorithm: c.params[i].Algorithm}
			h.limits[tag] = m
		}
		c.lims = append(c.lims, m)
	}
	h.mu.Unlock()
	return c, nil
}

const hshards = 32

// hcounter is the core.Counter of one limiter's limits in a Hybrid.
type hcounter struct {
	h        *Hybrid
	params   []core.Params // in nanoseconds
	lims     []*hlimit     // per limit; nil for a limit of 0 requests
	capacity int64
}

// An hlimit is a limit as the store holds it, whatever the count of each
// binding: its tag (name, algorithm and period), period and algorithm.
type hlimit struct {
	tag       string
	period    int64 // in nanoseconds
	algorithm core.Algorithm
}

type hshard struct {
	mu sync.Mutex
	m  map[string]*hentry
}

// An hentry is what a server holds of one client under every limit.
type hentry struct {
	key    string
	tag    string        // "{<client hash>}"
	lims   []hlim        // per limit the client was decided by, in no order
	active bool          // decided since the last interval sync
	want   bool          // a request waits for a sync
	busy   bool          // in the sync on the wire
	wait   chan struct{} // closed when the next sync of the entry ends
	err    error         // that sync's error
}

// hlim is a client's state under one limit.
type hlim struct {
	lim       *hlimit
	resets    int64 // times Reset cleared it: a sync sent before is void
	count     int64 // the largest count of the bindings waiting for a lease
	win       int64 // the index of the window cur
	cur, prev hwin
	grant     hgrant
	want      int64 // the cost a waiting request needs leased on cur
	wantGrant int64 // the same, from the grant
	hits      int64 // requests decided since the last interval sync
	lastHits  int64 // requests decided in the interval before
}

// hwin is a client's count in one window.
type hwin struct {
	known    bool  // synced at least once
	epoch    int64 // of the window's hash
	mine     int64 // admitted by this server
	reserved int64 // this server's count in Redis: admitted and leased
	total    int64 // the count across servers at the last sync
	servers  int64 // the servers counting, at the last sync
}

// view is the window's count across servers as this server knows it:
// what the others admitted or leased, and what it admitted itself.
func (w *hwin) view() int64 {
	if !w.known {
		return max(w.mine, 0)
	}
	return w.total - w.reserved + w.mine
}

// hgrant is a client's grant under one limit.
type hgrant struct {
	known    bool
	gen      int64 // 0: no grant
	amount   int64
	total    int64 // used and leased across servers
	expiry   int64 // Unix nanoseconds
	mine     int64 // used by this server
	reserved int64 // this server's part in Redis: used and leased
}

func (g *hgrant) left(now int64) int64 {
	if !g.known || g.gen == 0 || g.expiry <= now {
		return 0
	}
	return max(0, g.amount-(g.total-g.reserved+g.mine))
}

func (h *Hybrid) shard(key string) *hshard {
	return &h.shards[maphash.String(h.seed, key)%hshards]
}

// entry returns the client's entry, creating it; with the shard locked.
func (h *Hybrid) entry(sh *hshard, key string, limits int) *hentry {
	if e := sh.m[key]; e != nil {
		return e
	}
	if len(sh.m) >= h.perShard {
		h.evict(sh)
	}
	tag := clientTag(key)
	e := &hentry{key: key, tag: string(tag[:]), lims: make([]hlim, 0, limits)}
	sh.m[key] = e
	return e
}

// states points ls at the client's state under each of the counter's
// limits (nil for a limit of 0 requests), adding what the entry lacks;
// with the shard locked. The pointers hold until the shard is unlocked.
func (c *hcounter) states(e *hentry, ls *[core.MaxLimits]*hlim) {
	for _, m := range c.lims {
		if m != nil && e.index(m) < 0 {
			// lastHits: not pruned before a request it was made for is
			// decided (prune).
			e.lims = append(e.lims, hlim{lim: m, lastHits: 1})
		}
	}
	for i, m := range c.lims {
		ls[i] = nil
		if m != nil {
			ls[i] = &e.lims[e.index(m)]
		}
	}
}

// index returns the index of the client's state under limit m, or -1
// (always for nil, a limit of 0 requests).
func (e *hentry) index(m *hlimit) int {
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
func (e *hentry) prune() {
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
func (h *Hybrid) evict(sh *hshard) {
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
func (e *hentry) dirty() bool {
	for i := range e.lims {
		if e.lims[i].dirty() {
			return true
		}
	}
	return false
}

func (l *hlim) dirty() bool {
	return l.cur.mine > l.cur.reserved || l.prev.mine > l.prev.reserved || l.grant.mine > l.grant.reserved
}

// roll moves limit i's windows to window win.
func (l *hlim) roll(win int64) {
	switch {
	case win == l.win:
	case win == l.win+1:
		l.prev, l.cur = l.cur, hwin{}
	default:
		l.prev, l.cur = hwin{}, hwin{}
	}
	l.win = win
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
func (c *hcounter) judge(l *hlim, i int, now, cost int64, outage bool, d *core.Decision) (verdict int, granted bool) {
	p := &c.params[i]
	if p.Block {
		block(p, d)
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
func (c *hcounter) decide(e *hentry, ls *[core.MaxLimits]*hlim, now, cost int64, commit, outage, final bool, ds []core.Decision) int {
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
func (c *hcounter) take(ctx context.Context, key string, cost int, commit bool, ds []core.Decision) (time.Time, error) {
	if len(ds) < len(c.params) {
		return time.Time{}, fmt.Errorf("redisstore: %d decisions for %d limits", len(ds), len(c.params))
	}
	if cost < 0 || int64(cost) > c.capacity {
		return time.Time{}, fmt.Errorf("%w: cost %d, capacity %d", core.ErrCostExceedsLimit, cost, max(c.capacity, 0))
	}
	sh := c.h.shard(key)
	outage := c.h.s.circuit.isOpen()
	var ls [core.MaxLimits]*hlim
	for round := 0; ; round++ {
		at := c.h.now()
		sh.mu.Lock()
		e := c.h.entry(sh, key, len(c.params))
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
			c.h.s.circuit.failed(c.h.s, err)
		}
	}
}

// await asks the sync loop for a sync of e and waits for it; it is called
// with the shard locked and returns with it unlocked.
func (h *Hybrid) await(ctx context.Context, sh *hshard, e *hentry) error {
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
	t := time.NewTimer(h.s.timeout)
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
func (c *hcounter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	return c.take(ctx, key, cost, true, ds)
}

// Peek decides a request without counting it.
func (c *hcounter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	_, err := c.take(ctx, key, cost, false, ds)
	return err
}

// Refund gives back a request admitted at time at: to this server's lease
// of the window it was counted in, or of the grant that paid it.
func (c *hcounter) Refund(_ context.Context, key string, cost int, at time.Time, ds []core.Decision) error {
	if cost <= 0 {
		return nil
	}
	sh := c.h.shard(key)
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
		var w *hwin
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
