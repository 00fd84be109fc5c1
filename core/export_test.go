package core

// SketchEstimates returns the number of decisions the store's sketches
// made (seeds of new slots included), over every table.
func SketchEstimates(s *MemoryStore) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(0)
	for _, t := range s.tables {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			if sh.sketch != nil {
				n += sh.sketch.estimates
			}
			sh.mu.Unlock()
		}
	}
	return n
}

// SketchBytes returns the bytes the store's sketches hold.
func SketchBytes(s *MemoryStore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tables {
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			if sh.sketch != nil {
				n += 8 * (len(sh.sketch.cells) + len(sh.sketch.scratch))
			}
			sh.mu.Unlock()
		}
	}
	return n
}

// LogBytes returns what the store's sliding window logs are charged.
func LogBytes(s *MemoryStore) int64 {
	s.once.Do(s.init)
	return s.press.logBytes.Load()
}
