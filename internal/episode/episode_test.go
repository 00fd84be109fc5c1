package episode_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/internal/episode"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// lines runs a pattern of failures (true) and successes, one per
// millisecond, and returns the lines the caller would write.
func lines(e *episode.Log, c *clock, pattern []bool) (starts, ends int) {
	for _, failed := range pattern {
		c.t = c.t.Add(time.Millisecond)
		if failed {
			if start, _ := e.Fail(); start {
				starts++
			}
		} else if end, _ := e.Recover(); end {
			ends++
		}
	}
	return starts, ends
}

func TestOneLineEachWayPerEpisode(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	e := &episode.Log{Now: c.now}
	pattern := make([]bool, 5000)
	for i := range pattern {
		pattern[i] = true
	}
	starts, ends := lines(e, c, pattern)
	assert.Equal(t, 1, starts)
	require.True(t, e.Failing())
	end, n := e.Recover()
	assert.True(t, end)
	assert.Equal(t, int64(5000), n, "the recovery line counts the episode's failures")
	assert.Equal(t, 0, ends)
}

// Failures alternating with successes, for a minute: a line at most every
// Quiet each way, not one per request.
func TestFlappingIsBoundedByTime(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	e := &episode.Log{Now: c.now}
	pattern := make([]bool, 60_000) // one minute
	for i := range pattern {
		pattern[i] = i%2 == 0
	}
	starts, ends := lines(e, c, pattern)
	assert.Equal(t, 6, starts, "one start per 10 s")
	assert.Equal(t, 6, ends)
}

// A failure that starts within Quiet of a logged episode and then persists
// is logged once Quiet has passed: a recovery line is never the last word
// on a dependency that is down.
func TestPersistingSilentEpisodeIsLogged(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	e := &episode.Log{Now: c.now}
	start, _ := e.Fail()
	require.True(t, start)
	end, _ := e.Recover()
	require.True(t, end)
	start, _ = e.Fail()
	require.False(t, start, "within Quiet of the last start")
	c.t = c.t.Add(episode.Quiet)
	start, n := e.Fail()
	require.True(t, start, "still failing Quiet later")
	assert.Equal(t, int64(2), n, "the failures not yet reported")
	end, n = e.Recover()
	assert.True(t, end)
	assert.Equal(t, int64(2), n)
}

func TestZeroValueAndSystemClock(t *testing.T) {
	var e episode.Log
	end, _ := e.Recover()
	assert.False(t, end, "nothing to end")
	start, _ := e.Fail()
	assert.True(t, start)
	start, _ = e.Fail()
	assert.False(t, start)
}

func TestConcurrentFailuresLogOnce(t *testing.T) {
	var e episode.Log
	starts := make(chan bool, 64*100)
	done := make(chan struct{})
	for range 64 {
		go func() {
			for range 100 {
				s, _ := e.Fail()
				starts <- s
			}
			done <- struct{}{}
		}()
	}
	for range 64 {
		<-done
	}
	close(starts)
	n := 0
	for s := range starts {
		if s {
			n++
		}
	}
	assert.Equal(t, 1, n)
	_, failures := e.Recover()
	assert.Equal(t, int64(6400), failures)
}
