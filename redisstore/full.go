package redisstore

import (
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/internal/episode"
)

// This file holds what the store reports of a Redis that is out of memory
// (maxmemory with noeviction): the decisions are made all the same (see
// New), and the episode is logged and counted.

// fullSettle is how long Redis must have had room for every decision
// before the episode of a full Redis ends. A Redis at its maxmemory
// refuses some writes and accepts others, as expiries and its clients'
// buffers move its memory by a few kilobytes: that is one episode.
const fullSettle = time.Second

// A fullEpisode is the run of decisions made while Redis is out of memory.
type fullEpisode struct {
	log       episode.Log
	decisions atomic.Int64     // since New
	last      atomic.Int64     // when Redis was last out of memory, in Unix nanoseconds
	now       func() time.Time // the clock; nil: time.Now
}

func (e *fullEpisode) clock() int64 {
	if e.now != nil {
		return e.now().UnixNano()
	}
	return time.Now().UnixNano()
}

// outOfMemory records a round trip's decisions made by the code that may
// write when Redis is out of memory (n), and whether Redis answered any of
// them with the code that may not (then it had room). It logs the
// episode's start, and its end once Redis has had room for fullSettle,
// once each (at most two lines per episode.Quiet in any case).
func (s *Store) outOfMemory(n int, answered bool) {
	if n > 0 {
		s.full.decisions.Add(int64(n))
		s.full.last.Store(s.full.clock())
		for range n {
			if start, _ := s.full.log.Fail(); start {
				s.log.Warn("redisstore: Redis is out of memory (maxmemory); clients with a key are decided in Redis, new clients in process",
					"new_clients", s.newcomers())
			}
		}
		return
	}
	if !answered || !s.full.log.Failing() || s.full.clock()-s.full.last.Load() < int64(fullSettle) {
		return
	}
	if end, count := s.full.log.Recover(); end {
		s.log.Info("redisstore: Redis has memory again", "decisions_out_of_memory", count)
	}
}

// newcomers says how a new client is decided while Redis is out of memory.
func (s *Store) newcomers() string {
	if s.fallback > 1 {
		return "up to the limit divided by the fallback's instances, on each server"
	}
	return "up to the limit, on each server"
}

// OutOfMemory returns the number of decisions the store has made since
// New while Redis was out of memory (maxmemory, under the noeviction
// policy): a client with a key decided in Redis by the code that may
// write then, a new client in process (see New). It only grows; a rate
// above zero means Redis is full. The metrics exporters read it:
// ratekitprom.WithOutOfMemory(store.OutOfMemory) and
// ratekitotel.WithOutOfMemory(store.OutOfMemory) export it as
// ratekit_store_out_of_memory_total.
func (s *Store) OutOfMemory() int64 { return s.full.decisions.Load() }
