package hybrid

import (
	"context"
	"time"
)

// This file holds the store's clock: Redis's, as the last sync read it,
// carried forward on this server's monotonic clock. Windows start and end
// at the same instant on every server of a region, whatever their own
// clocks say, so a server whose clock is off cannot count in a window of
// its own.

// A reading is Redis's clock as one sync read it.
type reading struct {
	redis int64     // Redis's time, Unix nanoseconds
	local time.Time // the instant of this server's clock it stands for: the middle of the round trip
	floor int64     // the clock reads no earlier than this (a small step back is held, not taken)
}

// maxStepBack is the largest step back of the clock that a new reading
// is held at (the clock stands still until it catches up) rather than
// taken at once: the noise of a round trip, which must not move a server
// back into the window it has left.
const maxStepBack = time.Second

// now returns the store's time: the injected clock's (WithClock), or
// Redis's clock as the last sync read it, carried forward by this
// server's monotonic clock; this server's own clock only before Redis was
// ever read.
func (h *Store) now() time.Time {
	if h.clock != nil {
		return h.clock()
	}
	local := h.local()
	r := h.reading.Load()
	if r == nil {
		return local
	}
	return time.Unix(0, max(r.redis+int64(local.Sub(r.local)), r.floor))
}

// local returns this server's own clock.
func (h *Store) local() time.Time {
	if h.localClock != nil {
		return h.localClock()
	}
	return time.Now()
}

// clockRead takes Redis's clock, redisNow, read by a round trip sent at
// sent and answered at got (this server's clock).
func (h *Store) clockRead(redisNow int64, sent, got time.Time) {
	if h.clock != nil {
		return
	}
	next := &reading{redis: redisNow, local: sent.Add(got.Sub(sent) / 2)}
	if old := h.reading.Load(); old != nil {
		was := max(old.redis+int64(got.Sub(old.local)), old.floor)
		is := next.redis + int64(got.Sub(next.local))
		if back := was - is; back > 0 && back <= int64(maxStepBack) {
			next.floor = was
		}
	}
	h.reading.Store(next)
}

// readClock reads Redis's clock with TIME, for the decisions taken before
// the first sync.
func (h *Store) readClock(ctx context.Context) {
	if h.clock != nil {
		return
	}
	sent := h.local()
	t, err := h.client.Time(ctx).Result()
	if err == nil {
		h.clockRead(t.UnixNano(), sent, h.local())
	}
}
