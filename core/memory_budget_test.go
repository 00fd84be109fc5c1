package core_test

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// logBuffer is a logger whose lines a test reads.
func logBuffer() (*slog.Logger, *strings.Builder) {
	var b strings.Builder
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// The sliding window logs are held to MaxLogBytes, by a hand-computed
// trace. A new key's log is charged 96 + 4 x 12 = 144 bytes; growing from
// 4 entries to 8 costs 48 more, from 8 to 10 24 more. With a budget of
// 336 bytes: key a (144, then 192 once it grows to 8 entries) and key b
// (144) spend it all. Key c finds no room for its log and is counted in the
// sketch; a's log, full at 8 entries, merges its 9th and 10th requests into
// its newest entry, moved to their time, so that those requests expire
// together with the newest: at 69 s, where the exact log frees the first
// of them at 67 s (stricter, never looser). Once a and b are back to full,
// the next new key drops them and gets their bytes. Before the budget,
// the logs grew without bound (8.3 bytes an entry: 8 GiB at a million
// keys at 1000 per hour) and a's 9th request took a new entry.
func TestLogBudgetTrace(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	log, lines := logBuffer()
	store := &core.MemoryStore{Shards: 1, MaxKeys: 3, MaxLogBytes: 336, Logger: log, Clock: clock.Now}
	c := bind(t, store, core.Limit{Rate: core.PerMinute(10), Algorithm: core.SlidingWindowLog})
	at := func(s int) { clock.Set(storetest.Epoch.Add(time.Duration(s) * time.Second)) }
	take := func(key string) core.Decision {
		d, err := c.Take(ctx, key, 1)
		require.NoError(t, err)
		return d
	}
	tracked := func(key string) bool {
		ok, err := c.Inspect(ctx, key, make([]core.Decision, 1), make([]core.Grant, 1))
		require.NoError(t, err)
		return ok
	}

	for s := range 5 { // a at 0..4 s: its log grows to 8 entries
		at(s)
		require.True(t, take("a").Allowed, "a at %d s", s)
	}
	assert.Equal(t, int64(192), core.LogBytes(store))
	require.True(t, take("b").Allowed)
	assert.Equal(t, int64(336), core.LogBytes(store), "the budget is spent")

	require.True(t, take("c").Allowed, "c, in the sketch, has its limit")
	assert.False(t, tracked("c"), "no room for c's log: counted in the sketch")
	require.True(t, take("c").Allowed)
	assert.Equal(t, int64(336), core.LogBytes(store), "nothing beyond the budget")
	assert.Equal(t, 1, strings.Count(lines.String(), "at their memory budget"), lines.String())

	for s := 5; s < 10; s++ { // a at 5..9 s: entries 6, 7, 8, then merged
		at(s)
		d := take("a")
		require.True(t, d.Allowed, "a at %d s", s)
		assert.Equal(t, 9-s, d.Remaining)
	}
	assert.Equal(t, int64(336), core.LogBytes(store), "a's log did not grow past 8 entries")
	at(10)
	d := take("a")
	require.False(t, d.Allowed)
	assert.Equal(t, 50*time.Second, d.RetryAfter, "the entry of 0 s expires at 60 s")

	at(66) // the entries of 0..6 s have expired: 3 left (7, 8 and 9 s, as one entry at 9 s)
	for i := range 7 {
		require.True(t, take("a").Allowed, "a at 66 s, request %d", i+1)
	}
	at(67)
	d = take("a")
	require.False(t, d.Allowed, "the exact log would free the request of 7 s now")
	assert.Equal(t, 2*time.Second, d.RetryAfter, "the merged entry expires at 69 s")
	at(69)
	require.True(t, take("a").Allowed)

	// Three minutes on, every key is back to full: a new key drops them
	// and takes their bytes.
	at(300)
	require.True(t, take("d").Allowed)
	assert.True(t, tracked("d"), "d has a log of its own")
	assert.Equal(t, int64(144), core.LogBytes(store), "a's and b's logs were given back")
	assert.Equal(t, 1, strings.Count(lines.String(), "below their memory budget again"), lines.String())
}

// A Reset keeps the key's log, emptied, and its charge: no log is lost
// from the budget's count.
func TestLogBudgetReset(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	store := &core.MemoryStore{Shards: 1, Clock: clock.Now}
	c := bind(t, store, core.Limit{Rate: core.PerMinute(3), Algorithm: core.SlidingWindowLog})
	for range 3 {
		_, err := c.Take(ctx, "k", 1)
		require.NoError(t, err)
	}
	found, err := c.Reset(ctx, "k")
	require.NoError(t, err)
	require.True(t, found)
	for range 3 {
		d, err := c.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "full capacity after Reset")
	}
	assert.Equal(t, int64(96+4*12), core.LogBytes(store))
}

// Overflow chooses what the sketch of a full shard does with a request it
// denies, by a hand-computed trace. The shard holds one key (a, counting);
// b is counted in the sketch, which is empty, so b has its limit of 2.
// Its 3rd request the sketch denies: denied with the default Overflow
// (deny, as before), admitted with an overflow budget of 2 per second,
// which then admits b's 4th too and denies its 5th, and refills one
// request every 500 ms. Peek does not spend the budget. The sketch coming
// into use is logged once, with the choice.
func TestSketchOverflowTrace(t *testing.T) {
	ctx := context.Background()
	for _, overflow := range []int{0, 2} {
		t.Run("overflow="+strconv.Itoa(overflow), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
			log, lines := logBuffer()
			store := &core.MemoryStore{Shards: 1, MaxKeys: 1, Overflow: overflow, Logger: log, Clock: clock.Now}
			c := bind(t, store, core.Limit{Rate: core.PerMinute(2), Algorithm: core.FixedWindow})
			take := func() core.Decision {
				d, err := c.Take(ctx, "b", 1)
				require.NoError(t, err)
				return d
			}
			_, err := c.Take(ctx, "a", 1)
			require.NoError(t, err)
			require.True(t, take().Allowed, "b's 1st")
			require.True(t, take().Allowed, "b's 2nd")
			p, err := c.Peek(ctx, "b", 1)
			require.NoError(t, err)
			d := take()
			assert.Equal(t, overflow > 0, p.Allowed, "Peek agrees with Take")
			if overflow == 0 {
				assert.False(t, d.Allowed, "denied, as the sketch says")
				assert.Equal(t, 50*time.Second, d.RetryAfter, "the window ends at 60 s")
				assert.Contains(t, lines.String(), "counted in the sketch, denied when its estimate says so")
				assert.Equal(t, int64(0), core.LogBytes(store))
				return
			}
			require.True(t, d.Allowed, "b's 3rd, from the overflow budget")
			assert.Zero(t, d.RetryAfter)
			assert.Zero(t, d.Remaining)
			require.True(t, take().Allowed, "b's 4th, from the overflow budget")
			for range 3 {
				p, err = c.Peek(ctx, "b", 1)
				require.NoError(t, err)
				assert.False(t, p.Allowed, "Peek: the budget is spent")
			}
			d = take()
			assert.False(t, d.Allowed, "b's 5th: the budget is spent")
			assert.Equal(t, 50*time.Second, d.RetryAfter, "the sketch's Retry-After")
			clock.Advance(500 * time.Millisecond)
			assert.True(t, take().Allowed, "one request refilled in 500 ms")
			assert.False(t, take().Allowed)
			assert.Equal(t, 1, strings.Count(lines.String(), "at its key cap"), lines.String())
			assert.Contains(t, lines.String(), "beyond an overflow budget of 2 requests per second")
		})
	}
}

func TestMemoryStoreBudgetFieldsAreValidated(t *testing.T) {
	lim := []core.Limit{{Rate: core.PerSecond(1)}}
	for _, s := range []*core.MemoryStore{
		{MaxLogBytes: -1},
		{Overflow: -1},
		{Overflow: core.MaxOverflow + 1},
	} {
		_, err := s.Bind(lim)
		assert.Error(t, err, "%+v", s)
	}
	_, err := (&core.MemoryStore{Overflow: core.MaxOverflow, MaxLogBytes: 1}).Bind(lim)
	assert.NoError(t, err)
}

// newcomerRun floods a store at its cap with new keys, each spending its
// whole limit (2 per minute, fixed window), and sends the first request
// of newcomers among them: how often the newcomers' first request, under
// their limit, is admitted.
type newcomerRun struct {
	maxKeys  int
	times    int // new keys per minute, in multiples of maxKeys
	overflow int
	minutes  int
	after    int // flood keys of the last minute before the newcomers come
}

func (f newcomerRun) run(t *testing.T) (sent, admitted int) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	store := &core.MemoryStore{MaxKeys: f.maxKeys, Overflow: f.overflow, Logger: slog.New(slog.DiscardHandler), Clock: clock.Now}
	lim := core.Limit{Rate: core.PerMinute(2), Algorithm: core.FixedWindow}
	c := bind(t, store, lim)
	flood := f.times * f.maxKeys
	const newcomers = 1000 // per minute
	step := time.Minute / time.Duration(flood)
	every := flood / newcomers
	for m := range f.minutes {
		for s := range flood {
			k := "f" + strconv.Itoa(m) + "-" + strconv.Itoa(s)
			for range 2 {
				_, err := c.Take(ctx, k, 1)
				require.NoError(t, err)
			}
			// The newcomers of the last minute, spread over it, once
			// the flood has filled the store.
			if m == f.minutes-1 && s >= f.after && s%every == every-1 {
				d, err := c.Take(ctx, "n"+strconv.Itoa(s), 1)
				require.NoError(t, err)
				sent++
				if d.Allowed {
					admitted++
				}
			}
			clock.Advance(step)
		}
	}
	return sent, admitted
}

// TestNewcomersMeasure prints newcomers' admission during a key flood of
// 1x, 10x and 100x the key cap in new keys per minute, each flood key
// spending its limit, at MaxKeys 10,000 and at the default cap, with the
// sketch denying (the default) and with an overflow budget:
//
//	RATEKIT_MEASURE=1 go test ./core -run TestNewcomersMeasure -v -timeout 60m
func TestNewcomersMeasure(t *testing.T) {
	if !measuring() {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
	t.Log("| MaxKeys | new keys per minute | Overflow | newcomers' first request admitted |")
	t.Log("|---:|---:|---:|---:|")
	for _, maxKeys := range []int{10_000, core.DefaultMaxKeys} {
		for _, times := range []int{1, 10, 100} {
			for _, overflow := range []int{0, 1000} {
				if maxKeys == core.DefaultMaxKeys && times == 100 {
					continue // TestNewcomersMeasureHuge
				}
				f := newcomerRun{maxKeys: maxKeys, times: times, overflow: overflow, minutes: 2}
				sent, admitted := f.run(t)
				t.Logf("| %d | %d (%dx) | %d/s | %.1f%% (%d of %d) |", maxKeys, times*maxKeys, times, overflow, 100*float64(admitted)/float64(sent), admitted, sent)
			}
		}
	}
}

// A small flood, to keep newcomerRun honest in the suite: at 10x the cap
// the sketch denies newcomers far more often than at 1x.
func TestNewcomersUnderFlood(t *testing.T) {
	if raceEnabled {
		t.Skip("200,000 decisions: run without -race")
	}
	low, lowN := newcomerRun{maxKeys: 1000, times: 1, minutes: 2}.run(t)
	high, highN := newcomerRun{maxKeys: 1000, times: 10, minutes: 2}.run(t)
	t.Logf("1x: %d of %d, 10x: %d of %d", lowN, low, highN, high)
	assert.Greater(t, float64(lowN)/float64(low), float64(highN)/float64(high))
}

// TestLogBudgetMeasure prints the heap that sliding window logs take
// with and without room in their budget: 10,000 keys of a limit of 1000
// per hour, each spending it at 1000 instants (10 million entries), under
// a budget of 32 MiB and under the default (256 MiB), which holds them
// all:
//
//	RATEKIT_MEASURE=1 go test ./core -run TestLogBudgetMeasure -v
func TestLogBudgetMeasure(t *testing.T) {
	if !measuring() {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
	const keys, count = 10_000, 1000
	for _, budget := range []int64{32 << 20, 0} {
		settle() // the store of the last round is gone
		ctx := context.Background()
		clock := storetest.NewClock(storetest.Epoch)
		store := &core.MemoryStore{MaxLogBytes: budget, Logger: slog.New(slog.DiscardHandler), Clock: clock.Now}
		before := heapInUse()
		c := bind(t, store, core.Limit{Rate: core.Rate{Count: count, Period: time.Hour}, Algorithm: core.SlidingWindowLog})
		admitted := 0
		for range count {
			clock.Advance(time.Millisecond)
			for k := range keys {
				d, err := c.Take(ctx, "k"+strconv.Itoa(k), 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
		}
		grown := heapInUse() - before
		t.Logf("MaxLogBytes %d: %d of %d admitted, logs charged %d B (%.1f B per admitted request), heap grew %d B (%.1f MiB)",
			store.MaxLogBytes, admitted, keys*count, core.LogBytes(store), float64(core.LogBytes(store))/float64(admitted), grown, float64(grown)/(1<<20))
		runtime.KeepAlive(c)
	}
}

// settle collects garbage until the heap stops shrinking: a dropped
// store's tables go with the cleanups of their counters, after a GC.
func settle() {
	last := heapInUse()
	for range 10 {
		time.Sleep(20 * time.Millisecond) // the cleanups run after the GC
		n := heapInUse()
		if n >= last {
			return
		}
		last = n
	}
}

// TestNewcomersMeasureHuge prints the row TestNewcomersMeasure leaves
// out: a flood of 100x the default cap (about 105 million new keys a
// minute, 210 million decisions), for one minute, in which the flood
// fills the store within its first second; the newcomers come once it has
// sent twice the cap's keys:
//
//	RATEKIT_MEASURE=1 go test ./core -run TestNewcomersMeasureHuge -v -timeout 120m
func TestNewcomersMeasureHuge(t *testing.T) {
	if !measuring() {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
	f := newcomerRun{maxKeys: core.DefaultMaxKeys, times: 100, minutes: 1, after: 2 * core.DefaultMaxKeys}
	sent, admitted := f.run(t)
	t.Logf("| %d | %d (100x) | 0/s | %.1f%% (%d of %d) |", f.maxKeys, 100*f.maxKeys, 100*float64(admitted)/float64(sent), admitted, sent)
}
