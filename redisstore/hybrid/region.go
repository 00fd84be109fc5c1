package hybrid

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/episode"
)

// This file holds the hybrid store across regions. Each region's servers
// sync with their region's Redis; each server then sends its region's
// count of every window it synced to the other regions' Redis, where it is
// kept as that region's count (a grow-only counter per region, versioned):
// a count is taken only when its version is newer, so that copies sent
// twice, late or out of order change nothing. A region that cannot reach
// another keeps deciding on its own counts and the last it heard of the
// other's, and keeps the newest count of each window to send when the
// link returns.

// A peer is another region, and the counts waiting to go there.
type peer struct {
	name     string
	client   redis.UniversalClient
	mu       sync.Mutex
	pending  map[string]merge // by window hash key: the newest count
	failures episode.Log
}

// A merge is one window's count in this region, for another region.
type merge struct {
	version, count, servers int64
	expires                 int64 // Unix nanoseconds: when the window stops mattering
}

// maxPending bounds the counts waiting for one region.
const maxPending = 1 << 18

// offer queues a window's count for the region, unless a newer one waits.
func (p *peer) offer(key string, m merge) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.pending[key]
	if ok && old.version >= m.version {
		return
	}
	if !ok && len(p.pending) >= maxPending {
		return // sent again at the window's next sync
	}
	p.pending[key] = m
}

// replicate sends the counts waiting for region p every interval.
func (h *Store) replicate(p *peer) {
	defer h.done.Done()
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			h.send(p)
			return
		case <-t.C:
			h.send(p)
		}
	}
}

// peerTimeout bounds one round trip to another region.
const peerTimeout = 2 * time.Second

// send writes what waits for region p in one round trip; what fails waits
// for the next.
func (h *Store) send(p *peer) {
	p.mu.Lock()
	batch := p.pending
	p.pending = map[string]merge{}
	p.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	now := h.now().UnixNano()
	keys := make([]string, 0, len(batch))
	groups := make([]group, 0, len(batch))
	for k, m := range batch {
		if m.expires <= now {
			continue
		}
		ttl := (m.expires-now)/int64(time.Millisecond) + h.slack()
		keys = append(keys, k)
		groups = append(groups, group{keys: []string{k}, args: []any{strconv.FormatInt(m.version, 10),
			strconv.FormatInt(m.count, 10), strconv.FormatInt(m.servers, 10), strconv.FormatInt(ttl, 10)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(peerTimeout, h.timeout))
	h.run(ctx, p.client, []any{"m", h.region}, groups, 0)
	cancel()
	var failure error
	for i := range groups {
		if err := groups[i].err; err != nil {
			failure = err
			p.offer(keys[i], batch[keys[i]])
		}
	}
	if failure != nil {
		if start, _ := p.failures.Fail(); start {
			h.log.Warn("redisstore: region unreachable; its limits hold on the counts it last had", "region", p.name, "error", failure)
		}
	} else if end, n := p.failures.Recover(); end {
		h.log.Info("redisstore: region reachable again; counts merged", "region", p.name, "failed_sends", n)
	}
}
