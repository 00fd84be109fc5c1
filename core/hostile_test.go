package core_test

// RATEKIT_MEASURE=1 runs the measurements as well, and the key-flood test
// at its full size (four times the keys). TestKeyFloodMeasure, the
// key-flood table of docs/operations.md, floods a million keys a minute:
// about 9 minutes without -race, far beyond go test's default 10-minute
// timeout with it; run it alone, without -race:
//
//	RATEKIT_MEASURE=1 go test ./core -run TestKeyFloodMeasure -v -timeout 30m

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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

var allAlgorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

// measuring reports whether RATEKIT_MEASURE is set: the measurements run,
// and the tests made small to keep the suite short run at full size.
func measuring() bool { return os.Getenv("RATEKIT_MEASURE") != "" }

// A key never seen has no history, whatever the clock says: before 1970
// (where a zero timestamp would be in the future), at the epoch, and past
// 2262 (beyond int64 nanoseconds since the epoch). Each clock is 30 s into
// a minute, so the windows must reset in 30 s, as they would today.
func TestZeroStateIsNoHistoryAtAnyClock(t *testing.T) {
	clocks := map[string]time.Time{
		"1900":              time.Date(1900, 3, 1, 12, 0, 30, 0, time.UTC),
		"one minute before": time.Unix(-30, 0),
		"epoch":             time.Unix(30, 0),
		"2262":              time.Date(2262, 6, 1, 0, 0, 30, 0, time.UTC),
		"year 3000":         time.Date(3000, 1, 1, 0, 0, 30, 0, time.UTC),
		"year 9999":         time.Date(9999, 12, 31, 23, 59, 30, 0, time.UTC),
	}
	ctx := context.Background()
	for name, at := range clocks {
		for _, alg := range allAlgorithms {
			t.Run(fmt.Sprintf("%s/%s", name, alg), func(t *testing.T) {
				clock := storetest.NewClock(at)
				c := bind(t, &core.MemoryStore{Clock: clock.Now}, core.Limit{Rate: core.PerMinute(3), Algorithm: alg})
				for i := 2; i >= 0; i-- {
					d, err := c.Take(ctx, "k", 1)
					require.NoError(t, err)
					require.True(t, d.Allowed, "request %d of 3 on a fresh key", 3-i)
					require.Equal(t, i, d.Remaining)
				}
				d, err := c.Take(ctx, "k", 1)
				require.NoError(t, err)
				require.False(t, d.Allowed)
				switch alg {
				case core.FixedWindow:
					assert.Equal(t, 30*time.Second, d.RetryAfter, "the window ends at the next whole minute")
				case core.TokenBucket, core.LeakyBucket:
					assert.Equal(t, 20*time.Second, d.RetryAfter, "one token per 20 s")
				case core.SlidingWindowLog:
					assert.Equal(t, time.Minute, d.RetryAfter)
				case core.SlidingWindowCounter:
					// 3 in this window, 30 s left: in the next one the 3
					// weigh at most 2 from 20 s in, 50 s from now.
					assert.Equal(t, 50*time.Second, d.RetryAfter)
				}
				clock.Advance(d.RetryAfter)
				d, err = c.Take(ctx, "k", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed, "admitted again after Retry-After")
			})
		}
	}
}

// Take's time round-trips through Refund at any clock: a refund after a
// rejection by another limiter gives the count back.
func TestRefundAtAnyClock(t *testing.T) {
	ctx := context.Background()
	for _, at := range []time.Time{time.Unix(-1e9, 0), time.Date(4000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		for _, alg := range allAlgorithms {
			clock := storetest.NewClock(at)
			c := bind(t, &core.MemoryStore{Clock: clock.Now}, core.Limit{Rate: core.PerMinute(2), Algorithm: alg})
			ds := make([]core.Decision, 1)
			when, err := c.Counter.Take(ctx, "k", 2, ds)
			require.NoError(t, err)
			require.True(t, ds[0].Allowed)
			require.True(t, when.Equal(at), "%s: Take's time %v is the clock's %v", alg, when, at)
			require.NoError(t, c.Refund(ctx, "k", 2, when, ds))
			d, err := c.Take(ctx, "k", 2)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%s at %v: the refund gave the count back", alg, at)
		}
	}
}

// One request of the largest cost on the largest limit costs every
// algorithm a few words, not one entry per unit: a sliding window log
// logged one entry per unit (16 GiB here).
func TestHugeCostMemoryIsBounded(t *testing.T) {
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			c := bind(t, &core.MemoryStore{Clock: clock.Now}, core.Limit{Rate: core.Rate{Count: core.MaxCount, Period: core.MaxPeriod}, Algorithm: alg})
			before := heapInUse()
			for i := range 3 {
				d, err := c.Take(ctx, "k", core.MaxCount)
				require.NoError(t, err)
				require.Equal(t, i == 0, d.Allowed, "request %d of cost %d", i+1, core.MaxCount)
				if i == 0 {
					require.NoError(t, c.Refund(ctx, "k", core.MaxCount, clock.Now(), []core.Decision{d}))
					d, err = c.Take(ctx, "k", core.MaxCount)
					require.NoError(t, err)
					require.True(t, d.Allowed, "admitted again after the refund")
				}
			}
			grown := heapInUse() - before
			assert.Less(t, grown, int64(1<<20), "bytes the key's state grew the heap by")
			t.Logf("heap grew by %d bytes", grown)
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// The log keeps one entry per request with its cost: Retry-After waits for
// enough cost to expire, oldest first, and a refund takes back the newest
// cost of its instant.
func TestLogEntriesWithCosts(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	c := bind(t, &core.MemoryStore{Clock: clock.Now}, core.Limit{Rate: core.PerMinute(5), Algorithm: core.SlidingWindowLog})
	take := func(cost int) core.Decision {
		d, err := c.Take(ctx, "k", cost)
		require.NoError(t, err)
		return d
	}
	require.True(t, take(2).Allowed) // t=0
	clock.Advance(10 * time.Second)
	require.True(t, take(2).Allowed) // t=10
	clock.Advance(10 * time.Second)
	d := take(1) // t=20: 5 of 5
	require.True(t, d.Allowed)
	require.Equal(t, 0, d.Remaining)
	clock.Advance(10 * time.Second) // t=30
	d = take(3)
	require.False(t, d.Allowed)
	assert.Equal(t, 40*time.Second, d.RetryAfter, "3 more need the entries of t=0 and t=10 gone, at t=70")
	d = take(1)
	assert.Equal(t, 30*time.Second, d.RetryAfter, "1 more needs the entry of t=0 gone, at t=60")
	clock.Advance(30 * time.Second) // t=60: the 2 of t=0 expired
	require.True(t, take(2).Allowed)
	require.False(t, take(1).Allowed)
}

// floodRun is a key flood against a memory store at its cap: every minute,
// flood requests from keys never seen before, interleaved with the
// requests of clients that keep their keys: newcomers under their limit,
// at two rates, and heavy clients over it. The same clients' requests go
// to a store with no flood too, which decides them exactly.
type floodRun struct {
	maxKeys, shards int
	flood           int // new keys per minute
	limit           int // requests per minute per key
	rates           []int
	clients         int // per rate
	heavy, heavyAt  int // heavy clients and their rate per minute
	minutes         int
}

type floodResult struct {
	sent, admitted, exact []int // per rate class, then the heavy clients last
	sketched              int64 // decisions made in the sketch
}

func (f floodRun) run(t testing.TB, alg core.Algorithm) floodResult {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	lim := core.Limit{Rate: core.PerMinute(f.limit), Algorithm: alg}
	store := &core.MemoryStore{Clock: clock.Now, MaxKeys: f.maxKeys, Shards: f.shards}
	flooded := bind(t.(*testing.T), store, lim)
	quiet := bind(t.(*testing.T), &core.MemoryStore{Clock: clock.Now}, lim)
	type class struct {
		keys []string
		rate int
		next int
	}
	var classes []*class
	for r, rate := range append(append([]int(nil), f.rates...), f.heavyAt) {
		n := f.clients
		if r == len(f.rates) {
			n = f.heavy
		}
		c := &class{rate: rate}
		for i := range n {
			c.keys = append(c.keys, fmt.Sprintf("client-%d-%d", r, i))
		}
		classes = append(classes, c)
	}
	res := floodResult{sent: make([]int, len(classes)), admitted: make([]int, len(classes)), exact: make([]int, len(classes))}
	step := time.Minute / time.Duration(f.flood)
	due := make([]int, len(classes))
	admittedAt := map[string][]time.Time{}
	for m := range f.minutes {
		for s := range f.flood {
			d, err := flooded.Take(ctx, "flood-"+strconv.Itoa(m)+"-"+strconv.Itoa(s), 1)
			require.NoError(t, err)
			_ = d
			// The clients join once the flood has filled the store with
			// keys still counting: half way into the second minute.
			if m > 1 || m == 1 && s >= f.flood/2 {
				for ci, c := range classes {
					// Spread each class's requests evenly over the minute.
					per := len(c.keys) * c.rate
					due[ci] = (s+1)*per/f.flood - s*per/f.flood
					for range due[ci] {
						k := c.keys[c.next%len(c.keys)]
						c.next++
						a, err := flooded.Take(ctx, k, 1)
						require.NoError(t, err)
						b, err := quiet.Take(ctx, k, 1)
						require.NoError(t, err)
						res.sent[ci]++
						if a.Allowed {
							res.admitted[ci]++
						}
						if b.Allowed {
							res.exact[ci]++
						}
						if a.Allowed {
							admittedAt[k] = append(admittedAt[k], clock.Now())
						}
					}
				}
			}
			clock.Advance(step)
		}
	}

	// Never looser: the requests admitted at the cap are ones each
	// client's own limit admits, all of them, when they are all it sends.
	for k, times := range admittedAt {
		replay := storetest.NewClock(times[0])
		own := bind(t.(*testing.T), &core.MemoryStore{Clock: replay.Now}, lim)
		for i, at := range times {
			replay.Set(at)
			d, err := own.Take(ctx, k, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%s: %s: request %d admitted at the cap is over the client's own limit", alg, k, i+1)
		}
	}
	res.sketched = core.SketchEstimates(store)
	// Memory stays within the cap: at most MaxKeys tracked, and a sketch
	// of fixed size, two rows of a quarter of the cap, of at most two
	// words per cell for one limit.
	require.LessOrEqual(t, store.TrackedKeys(lim), f.maxKeys)
	require.LessOrEqual(t, core.SketchBytes(store), 2*(f.maxKeys/4)*2*8+max(f.shards, 64)*3*8)
	runtime.KeepAlive(flooded)
	return res
}

// A key flood at the cap cannot lock out newcomers: every minute, twice as
// many new keys as the store's cap, and clients arriving after the flood
// filled the store. Newcomers under their limit are admitted at least 99%
// of the times their own limit admits them; clients over their limit are
// never admitted beyond their own limit: every request admitted at the cap
// is one the client's own limit admits (run replays them). Before the
// sketch, every newcomer shared one overflow state with the flood and got
// 429 on nearly every request. (A bucket's key of one request is full
// again after one emission interval, 0.6 s here, and dropped to make
// room: at this rate the flood fills no bucket store. A log in the sketch
// is held to its two last windows' counts, which admit a steady newcomer
// only up to about half its limit.)
//
// The store's cap is 2,048 keys (the flood twice that), or 8,192 when
// measuring: the flood's share of each sketch cell is the same.
func TestKeyFloodCannotLockOutNewcomers(t *testing.T) {
	f := floodRun{maxKeys: 2048, shards: 4, flood: 4096, limit: 100, rates: []int{50, 90}, clients: 50, heavy: 10, heavyAt: 400, minutes: 3}
	if measuring() {
		f.maxKeys, f.flood = 8192, 16384
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			r := f.run(t, alg)
			for ci, rate := range f.rates {
				share := float64(r.admitted[ci]) / float64(r.exact[ci])
				t.Logf("at %d/min: %d of %d sent, %d admitted, %d by their own limits (%.2f%%)", rate, r.sent[ci], r.sent[ci], r.admitted[ci], r.exact[ci], 100*share)
				if alg == core.SlidingWindowLog && 2*rate > f.limit {
					// In the sketch a log is held to its last two aligned
					// windows' counts (takeLogPair): up to twice a steady
					// client's use, over the limit above half of it.
					continue
				}
				assert.GreaterOrEqual(t, share, 0.99, "newcomers at %d of %d per minute", rate, f.limit)
			}
			t.Logf("decisions in the sketch: %d", r.sketched)
			if alg != core.TokenBucket && alg != core.LeakyBucket {
				assert.Greater(t, r.sketched, int64(f.clients), "the clients were decided in the sketch")
			}
			h := len(f.rates)
			t.Logf("heavy at %d/min: %d sent, %d admitted, %d by their own limits", f.heavyAt, r.sent[h], r.admitted[h], r.exact[h])
			assert.LessOrEqual(t, r.admitted[h], r.exact[h], "clients over their limit stay limited")
		})
	}
}

// A store that fails on every other call logs at most two lines per 10
// seconds, not one or two per request.
func TestFlappingStoreLogsBoundedByTime(t *testing.T) {
	ctx := context.Background()
	var logs strings.Builder
	store := &failingStore{}
	lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1_000_000)},
		core.WithStore(store), core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	for i := range 1000 {
		store.mu.Lock()
		store.healthy = i%2 == 1
		store.mu.Unlock()
		_, _ = lim.Take(ctx, "k", 1)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "store failing"), logs.String())
	assert.Equal(t, 1, strings.Count(logs.String(), "answering again"), logs.String())
}

// TestKeyFloodMeasure prints the key-flood table of docs/operations.md, at
// the default key cap (see the top of this file for the command).
func TestKeyFloodMeasure(t *testing.T) {
	if !measuring() {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
	t.Log("| algorithm | new keys per minute | newcomers at 50/min admitted | at 90/min | over the limit (400/min) admitted, of their own limit's | decisions in the sketch |")
	t.Log("|---|---:|---:|---:|---:|---:|")
	for _, flood := range []int{core.DefaultMaxKeys, 2 * core.DefaultMaxKeys} {
		f := floodRun{maxKeys: core.DefaultMaxKeys, flood: flood, limit: 100, rates: []int{50, 90}, clients: 1000, heavy: 100, heavyAt: 400, minutes: 3}
		for _, alg := range allAlgorithms {
			r := f.run(t, alg)
			pct := func(i int) string { return fmt.Sprintf("%.2f%%", 100*float64(r.admitted[i])/float64(r.exact[i])) }
			t.Logf("| %s | %d | %s | %s | %s | %d |", alg, flood, pct(0), pct(1), pct(2), r.sketched)
		}
	}
}

// Once a full shard frees room, a key the sketch counted starts from its
// estimate: Peek answers what Take then does.
func TestPeekAgreesWithTakeAfterRoomFrees(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	c := bind(t, &core.MemoryStore{Clock: clock.Now, Shards: 1, MaxKeys: 2}, core.Limit{Rate: core.PerMinute(10), Algorithm: core.TokenBucket})
	for _, k := range []string{"a", "b"} {
		_, err := c.Take(ctx, k, 1)
		require.NoError(t, err)
	}
	d, err := c.Take(ctx, "k", 10) // the shard is full: the sketch counts k
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clock.Advance(7 * time.Second) // a and b are full again
	_, err = c.Take(ctx, "j", 1)   // room freed: j gets a slot, the sketch stays
	require.NoError(t, err)
	peek, err := c.Peek(ctx, "k", 5)
	require.NoError(t, err)
	take, err := c.Take(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, take.Allowed, peek.Allowed)
	assert.Equal(t, take.Remaining, peek.Remaining)
	assert.False(t, take.Allowed, "k used its 10 seven seconds ago: one token back")
}

// Two requests whose clock readings cross a window's end, and that take
// the shard's lock in the other order, never roll the window back: the
// later window keeps its count.
func TestCrossingClockReadingsNeverRollBack(t *testing.T) {
	ctx := context.Background()
	for _, maxKeys := range []int{0, 1} { // a slot, then the sketch
		clock := storetest.NewClock(storetest.Epoch.Add(-time.Second))
		c := bind(t, &core.MemoryStore{Clock: clock.Now, Shards: 1, MaxKeys: maxKeys}, core.Limit{Rate: core.PerMinute(2), Algorithm: core.FixedWindow})
		_, err := c.Take(ctx, "first", 1) // fills the one slot when MaxKeys is 1
		require.NoError(t, err)
		admitted := 0
		for _, at := range []time.Duration{time.Second, 2 * time.Second, -time.Millisecond, 3 * time.Second, 4 * time.Second} {
			clock.Set(storetest.Epoch.Add(at)) // the third reading was taken before the others
			d, err := c.Take(ctx, "k", 1)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, 2, admitted, "MaxKeys %d: a limit of 2 in the window that starts at the epoch", maxKeys)
	}
}
