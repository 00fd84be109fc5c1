package redisstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestFullEpisodeSettles: a Redis at its maxmemory refuses some round
// trips and accepts others, a millisecond apart, as its memory moves by a
// few kilobytes. That is one episode: one line when it starts, and one,
// with the count of decisions made out of memory, only once Redis has had
// room for fullSettle.
func TestFullEpisodeSettles(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	s := &Store{log: slog.New(slog.NewTextHandler(&buf, nil))}
	s.full.now = func() time.Time { return now }
	s.full.log.Now = s.full.now
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }

	s.outOfMemory(0, true) // room: nothing to say
	if buf.Len() != 0 {
		t.Fatalf("a line with Redis never full: %q", buf.String())
	}
	for i := range 5000 { // five seconds at the edge
		now = now.Add(time.Millisecond)
		if i%3 == 0 {
			s.outOfMemory(2, false) // two decisions made out of memory
		} else {
			s.outOfMemory(0, true)
		}
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "out of memory") {
		t.Fatalf("at the edge for 5 s: want one start line, got %q", got)
	}
	s.outOfMemory(2, false) // the last round trip Redis refused
	now = now.Add(fullSettle - time.Millisecond)
	s.outOfMemory(0, true)
	if got := lines(); len(got) != 1 {
		t.Fatalf("room for less than fullSettle: want the start line only, got %q", got)
	}
	now = now.Add(time.Millisecond)
	s.outOfMemory(0, true)
	got := lines()
	if len(got) != 2 || !strings.Contains(got[1], "memory again") || !strings.Contains(got[1], "decisions_out_of_memory=3336") {
		t.Fatalf("room for fullSettle: want the end line with 3336 decisions, got %q", got)
	}
	if n := s.OutOfMemory(); n != 3336 {
		t.Fatalf("OutOfMemory() = %d, want 3336", n)
	}
	s.outOfMemory(0, true)
	if got := lines(); len(got) != 2 {
		t.Fatalf("a line after the episode ended: %q", got)
	}
}
