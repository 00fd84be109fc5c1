package hybrid

import (
	"context"
	"math"
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
// link returns. A link is cut only when a send does not answer within the
// peer timeout, which follows the sync interval; a slow one still carries
// the counts, late. The script holds what another region says within
// [0, the window's limit], so no region can free or take more of a limit
// than it could have admitted.

// A peer is another region, and the counts waiting to go there.
type peer struct {
	name     string
	client   redis.UniversalClient
	mu       sync.Mutex
	pending  map[string]merge // by window hash key: the newest count
	failures episode.Log      // sends that failed or did not answer within the peer timeout
	slow     episode.Log      // sends that answered, late
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

// take returns the counts waiting for the region, and forgets them.
func (p *peer) take() map[string]merge {
	p.mu.Lock()
	defer p.mu.Unlock()
	batch := p.pending
	p.pending = map[string]merge{}
	return batch
}

// The bound on a round trip to another region follows the sync interval:
// peerIntervals of them, and at least minPeerTimeout. A send that answers
// within it is merged however slow the link; one that does not is a
// partition, and its counts go again with a later send.
const (
	minPeerTimeout = 15 * time.Second
	peerIntervals  = 20
)

// lastSendTimeout bounds the last send to a region, at Close, on a link
// that does not answer.
const lastSendTimeout = 5 * time.Second

// maxInFlight bounds the sends to one region under way at once: on a
// slow link a send starts every interval, without waiting for the last
// one's answer, so that a count is late by the link's delay, not by the
// sends queued before it.
const maxInFlight = 4

// peerTimeout bounds one round trip to another region.
func (h *Store) peerTimeout() time.Duration {
	d := time.Duration(math.MaxInt64)
	if h.interval < d/peerIntervals {
		d = peerIntervals * h.interval
	}
	return max(minPeerTimeout, d, h.timeout)
}

// replicate sends the counts waiting for region p every interval, each
// send bounded by the peer timeout, up to maxInFlight at once. At stop it
// ends the sends under way (their counts wait again) and sends what waits
// in one last round trip, once the final sync has offered its counts.
func (h *Store) replicate(p *peer) {
	defer h.done.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	timeout := h.peerTimeout()
	// The region's Redis gets the script now, not on the first send: a
	// slow link would pay a round trip more for it.
	load, done := context.WithTimeout(ctx, timeout)
	_ = loadScript(load, p.client)
	done()

	var flights sync.WaitGroup
	slots := make(chan struct{}, maxInFlight)
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			flights.Wait()
			<-h.synced // the final sync offers this server's last counts
			last, done := context.WithTimeout(context.Background(), min(timeout, lastSendTimeout))
			h.send(last, p, p.take())
			done()
			return
		case <-t.C:
			select {
			case slots <- struct{}{}:
			default:
				continue // every send under way waits on the link: the counts wait, the newest of each window
			}
			batch := p.take()
			if len(batch) == 0 {
				<-slots
				continue
			}
			flights.Add(1)
			go func() {
				defer flights.Done()
				send, done := context.WithTimeout(ctx, timeout)
				h.send(send, p, batch)
				done()
				<-slots
			}()
		}
	}
}

// send writes batch to region p in one round trip, by ctx's deadline;
// what fails waits for a later send.
func (h *Store) send(ctx context.Context, p *peer, batch map[string]merge) {
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
	if len(groups) == 0 {
		return
	}
	start := time.Now()
	h.run(ctx, p.client, []any{"m", h.region}, groups, 0)
	took := time.Since(start)
	var failure error
	for i := range groups {
		if err := groups[i].err; err != nil {
			failure = err
			p.offer(keys[i], batch[keys[i]])
		}
	}
	if failure != nil {
		if ctx.Err() == context.Canceled {
			return // the store is closing: the last send takes the counts
		}
		if start, _ := p.failures.Fail(); start {
			h.log.Warn("redisstore: region unreachable; its limits hold on the counts it last had", "region", p.name, "error", failure,
				"peer_timeout", h.peerTimeout())
		}
		return
	}
	if end, n := p.failures.Recover(); end {
		h.log.Info("redisstore: region reachable again; counts merged", "region", p.name, "failed_sends", n)
	}
	// A link is slow when a send takes longer than a sync interval (and
	// a second): its counts arrive late, but they arrive.
	if took > max(h.interval, time.Second) {
		if start, _ := p.slow.Fail(); start {
			h.log.Warn("redisstore: region answers slowly; counts are merged, late by the link's delay", "region", p.name, "round_trip", took)
		}
	} else if end, n := p.slow.Recover(); end {
		h.log.Info("redisstore: region answers promptly again", "region", p.name, "slow_sends", n)
	}
}
