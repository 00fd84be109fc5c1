package redisstore

import "time"

// SetFullClock makes the episodes of a full Redis of s read now instead of
// the system clock.
func SetFullClock(s *Store, now func() time.Time) {
	s.full.now = now
	s.full.log.Now = now
}
