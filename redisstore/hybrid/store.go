package hybrid

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
	"github.com/ratekit/ratekit/redisstore/internal/breaker"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
	"github.com/ratekit/ratekit/redisstore/internal/servers"
)

// How the store works inside.
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
// Redis. Under a sliding window counter, a lease is sized by the capacity
// two intervals ahead (Store.ahead), and the interval sync tops up the
// lease of a client that used most of it; each admission is still decided
// by the counter's estimate over the view, so the servers together stay
// within it.
//
// A sync (one round trip, sync.go) pushes the server's counts and takes
// fresh leases for every client that needs one; it runs every interval
// for the clients used since the last one, and at once when a request
// finds its lease used up. A lease unused for an interval is given back.
// Counts are written whole, with a sequence number, never added: a sync
// whose answer was lost is sent again without counting twice.
//
// A server holds one state per client and limit (name, algorithm and
// period), whichever of its limiters decided it: every binding of a limit
// on one store (a limiter rebound by a rules reload, the plans of a plan
// limiter, elastic throttling's raised limits) decides on the same counts
// and leases, each by its own count, as the core.Store contract asks. A
// lease is asked for under the largest count of the requests waiting for
// it.

//go:embed hybrid.lua
var hybridSource string

var hybridScript = redis.NewScript(hybridSource)

// A Store is a local-first store: each server decides requests in
// process, on leases of the limit taken from Redis in batches, and
// synchronises with Redis every interval (see the package documentation).
// It implements core.Store and is safe for concurrent use; one Store may
// serve any number of limiters.
type Store struct {
	config
	client   redis.UniversalClient
	interval time.Duration
	bounded  bool // the client applies context deadlines itself
	id       string
	seq      atomic.Int64

	tags    keys.Tags // the limit tags in use, to refuse two limits whose keys would meet
	circuit *breaker.Circuit

	mu     sync.Mutex
	limits map[string]*limit // every limit bound, by tag

	// What the server holds of each client, under every limit bound:
	// shared by all bindings of a limit, as the Store contract asks.
	seed     maphash.Seed
	perShard int
	shards   [nshards]shard

	wake      chan struct{}
	stop      chan struct{}
	synced    chan struct{} // closed once the final sync (at Close) has answered, or failed
	done      sync.WaitGroup
	closeOnce sync.Once

	servers atomic.Int64 // the most servers a sync reported: shares while Redis is away
	peers   []*peer      // other regions (region.go)

	reading atomic.Pointer[reading] // Redis's clock, as the last sync read it (clock.go)

	syncMu   sync.Mutex  // one sync at a time
	failures episode.Log // of the syncs
}

// startTimeout bounds what New does in Redis: loading the script.
const startTimeout = 2 * time.Second

// New returns a store on client (a *redis.Client, *redis.ClusterClient,
// *redis.Ring or a Sentinel failover client) that decides requests in
// this process and synchronises with Redis every interval. It supports
// the fixed window and sliding window counter algorithms, whose counts
// merge by adding; binding a bucket or a log is an error.
//
// New loads the store's script on every master of client and reads
// Redis's clock, within a couple of seconds: windows follow Redis's clock,
// not this server's. When Redis does not answer, New still returns the store,
// with its circuit open: it decides within each server's share until
// Redis answers. Set ContextTimeoutEnabled on the go-redis client, so that
// the store's timeout bounds each round trip.
//
// Close stops the synchronisation and gives back unused leases.
func New(client redis.UniversalClient, interval time.Duration, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: hybrid.New needs a Redis client")
	}
	if interval <= 0 {
		return nil, fmt.Errorf("redisstore: hybrid sync interval %s must be positive", interval)
	}
	cfg := config{prefix: DefaultPrefix, timeout: DefaultTimeout, maxKeys: DefaultMaxKeys}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	var id [6]byte
	sum := sha256.Sum256(strconv.AppendInt([]byte(strconv.FormatUint(new(maphash.Hash).Sum64(), 36)), time.Now().UnixNano(), 10))
	copy(id[:], sum[:])
	h := &Store{config: cfg, client: client, interval: interval, bounded: servers.AppliesDeadlines(client),
		id: base64.RawURLEncoding.EncodeToString(id[:]), wake: make(chan struct{}, 1), stop: make(chan struct{}), synced: make(chan struct{}),
		limits: map[string]*limit{}, seed: maphash.MakeSeed(), perShard: cfg.maxKeys / nshards}
	h.circuit = breaker.New(h.ready, h.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := h.ready(ctx); err != nil {
		h.circuit.Trip()
	} else {
		h.readClock(ctx)
	}
	for i := range h.shards {
		h.shards[i].m = map[string]*entry{}
	}
	for name, c := range cfg.peers {
		h.peers = append(h.peers, &peer{name: name, client: c, pending: map[string]merge{}})
		rt := servers.ReadTimeout(c)
		switch {
		case rt > 0 && rt < h.peerTimeout():
			h.log.Warn("redisstore: a region's client gives up on a reply sooner than the store does; a link slower than that is taken for a partition (set its ReadTimeout to -1 or longer)",
				"region", name, "read_timeout", rt, "peer_timeout", h.peerTimeout())
		case !servers.AppliesDeadlines(c):
			h.log.Warn("redisstore: a region's client does not apply context deadlines; a send on a link that does not answer waits for its ReadTimeout (none: for ever, and Close with it), not the peer timeout (set ContextTimeoutEnabled)",
				"region", name, "read_timeout", rt, "peer_timeout", h.peerTimeout())
		}
	}
	h.done.Add(1)
	go h.loop()
	for _, p := range h.peers {
		h.done.Add(1)
		go h.replicate(p)
	}
	return h, nil
}

// ready gets Redis ready for syncs by ctx's deadline: it loads the script
// on every master. New calls it, and so does the circuit's probe.
func (h *Store) ready(ctx context.Context) error {
	return servers.ByDeadline(ctx, h.bounded, func(ctx context.Context) error { return loadScript(ctx, h.client) })
}

// loadScript loads the store's script on every master of client.
func loadScript(ctx context.Context, client redis.UniversalClient) error {
	return servers.EachMaster(ctx, client, func(ctx context.Context, c *redis.Client) error { return hybridScript.Load(ctx, c).Err() })
}

// Close stops the store's synchronisation after a last sync that sends
// what this server counted and gives back its unused leases. Decisions
// after Close are still taken, on what the server holds.
func (h *Store) Close() error {
	h.closeOnce.Do(func() { close(h.stop) })
	h.done.Wait()
	return nil
}

// Bind returns the counter of a limiter's limits, which must each be a
// fixed window, a sliding window counter or a limit of 0 requests. Every
// binding of a limit (same name, algorithm and period) decides on the
// same counts in this process, each by its own count, and on the same
// counts in Redis as every other server that uses the same Redis and
// prefix.
//
// Beside the errors of core.Limit.Params, Bind rejects no limits or more
// than core.MaxLimits, two limits with the same name and algorithm, a
// bucket or a log, a window period under a millisecond, and, about once in
// tens of billions of pairs of limits, a limit whose key tag is another's
// (rename one).
func (h *Store) Bind(ls []core.Limit) (core.Counter, error) {
	if err := limits.CheckCount(len(ls)); err != nil {
		return nil, err
	}
	c := &counter{h: h, capacity: math.MaxInt64}
	tags := make([]string, 0, len(ls))
	for _, l := range ls {
		p, err := l.Params(time.Nanosecond)
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		if err := limits.CheckDistinct(c.params, &p); err != nil {
			return nil, err
		}
		tag := ""
		if !p.Block {
			if p.Algorithm != core.FixedWindow && p.Algorithm != core.SlidingWindowCounter {
				return nil, fmt.Errorf("redisstore: %w: the hybrid store cannot merge the counts of %s limit %q across servers; use fixed-window or sliding-window-counter, or the exact store (redisstore.New)",
					core.ErrInvalidLimit, p.Algorithm, p.Name)
			}
			if err := limits.CheckWindow(&p); err != nil {
				return nil, err
			}
			if tag, err = h.tags.Limit(&p); err != nil {
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
			m = &limit{tag: tag, period: c.params[i].Period, algorithm: c.params[i].Algorithm}
			h.limits[tag] = m
		}
		c.lims = append(c.lims, m)
	}
	h.mu.Unlock()
	return c, nil
}
