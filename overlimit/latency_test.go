package overlimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// latentStore puts a real store behind a network on an injected clock:
// every Take and Peek of its counters moves the clock by before, then
// lets the store decide, then moves it by after, as a store across a
// network takes time to reach and to answer from.
type latentStore struct {
	inner         core.Store
	clock         *storetest.Clock
	before, after time.Duration
}

func (s latentStore) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := s.inner.Bind(limits)
	if err != nil {
		return nil, err
	}
	return latentCounter{c, s}, nil
}

type latentCounter struct {
	core.Counter
	s latentStore
}

func (c latentCounter) Take(ctx context.Context, key string, cost int, ds []core.Decision) (time.Time, error) {
	c.s.clock.Advance(c.s.before)
	at, err := c.Counter.Take(ctx, key, cost, ds)
	c.s.clock.Advance(c.s.after)
	return at, err
}

func (c latentCounter) Peek(ctx context.Context, key string, cost int, ds []core.Decision) error {
	c.s.clock.Advance(c.s.before)
	err := c.Counter.Peek(ctx, key, cost, ds)
	c.s.clock.Advance(c.s.after)
	return err
}

// header returns the value of field name among the X-Ratelimit fields of
// d, in whole seconds.
func header(t *testing.T, d core.Decision, name string) int {
	t.Helper()
	for _, f := range answer.XRateLimit.Fields(nil, &d) {
		if f.Name == name {
			n, err := strconv.Atoi(f.Value[0])
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s field", name)
	return 0
}

// TestStoreLatency: a store that takes 20 ms to answer (a memory store
// behind latentStore, on the cache's clock). A fixed window of 1 per 2 s;
// the second request of the window is sent at 0.970 s.
//
// The store decides at 0.990 s when the 20 ms are spent reaching it: the
// window ends at 2.000 s, so RetryAfter and ResetAfter are 1.010 s
// (Retry-After: 2, X-Ratelimit-Reset: 2), and the answer is back at
// 0.990 s. The cache, asked again at 0.990 s, must say the same: 1.010 s,
// what the store itself says at that moment. Filed under 0.970 s, the
// time before the call, it said 0.990 s (Retry-After: 1): a client that
// waited that second was refused again at 1.990 s, 10 ms before the
// window ended.
//
// When the 20 ms are the way back (the store decides at 0.970 s and the
// answer arrives at 0.990 s), the store said 1.030 s, received at
// 0.990 s; the cache says the same at that moment, 20 ms more than the
// truth, never less: as a client answered by the store directly waits.
func TestStoreLatency(t *testing.T) {
	ms := time.Millisecond
	limit := core.Limit{Name: "w", Algorithm: core.FixedWindow, Rate: core.Rate{Count: 1, Period: 2 * time.Second}}
	for _, tc := range []struct {
		name          string
		before, after time.Duration
		storeSaid     time.Duration // the store's RetryAfter, as its answer arrived at 0.990 s
	}{
		{"reaching the store", 20 * ms, 0, 1010 * ms},
		{"answering back", 0, 20 * ms, 1030 * ms},
		{"both ways", 10 * ms, 10 * ms, 1020 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			set := func(d time.Duration) { clock.Set(storetest.Epoch.Add(d)) }
			mem := &core.MemoryStore{Clock: clock.Now}
			cache, err := New(latentStore{mem, clock, tc.before, tc.after}, WithClock(clock.Now))
			require.NoError(t, err)
			lim, err := core.NewLimiter(limit, core.WithStore(cache), core.WithLogger(quiet))
			require.NoError(t, err)
			truth, err := mem.Bind([]core.Limit{limit})
			require.NoError(t, err)
			// truthAt returns what the store, with no latency, says of a
			// request of the key at time d.
			truthAt := func(d time.Duration, key string) core.Decision {
				t.Helper()
				saved := clock.Now()
				set(d)
				defer clock.Set(saved)
				ds := make([]core.Decision, 1)
				require.NoError(t, truth.Peek(ctx, key, 1, ds))
				return ds[0]
			}

			// Through the limiter: Take.
			set(0)
			d, err := lim.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			set(970 * ms)
			d, err = lim.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, storetest.Epoch.Add(990*ms), clock.Now(), "the answer is back at 0.990 s")
			require.Equal(t, tc.storeSaid, d.RetryAfter, "the store's own answer")

			cached, err := lim.Take(ctx, "k", 1) // at 0.990 s: from the cache
			require.NoError(t, err)
			require.Equal(t, storetest.Epoch.Add(990*ms), clock.Now(), "a cached answer takes no time")
			assert.False(t, cached.Allowed)
			assert.Equal(t, tc.storeSaid, cached.RetryAfter, "RetryAfter: the store's answer, counted from its arrival")
			assert.Equal(t, tc.storeSaid, cached.ResetAfter, "ResetAfter: likewise")
			real := truthAt(990*ms, "k")
			assert.GreaterOrEqual(t, cached.RetryAfter, real.RetryAfter, "never shorter than the truth")
			assert.GreaterOrEqual(t, cached.ResetAfter, real.ResetAfter, "never shorter than the truth")
			assert.Equal(t, header(t, d, answer.HeaderRetryAfter), header(t, cached, answer.HeaderRetryAfter), "Retry-After as the store said")
			assert.Equal(t, header(t, d, answer.HeaderReset), header(t, cached, answer.HeaderReset), "X-Ratelimit-Reset as the store said")
			// A client that waits the advertised Retry-After is admitted.
			wait := time.Duration(header(t, cached, answer.HeaderRetryAfter)) * time.Second
			assert.True(t, truthAt(990*ms+wait, "k").Allowed, "admitted after the advertised %s", wait)

			// Straight on the counter, two windows later (the clock only
			// moves forward): Peek files its rejections alike.
			counter, err := cache.Bind([]core.Limit{limit})
			require.NoError(t, err)
			ds := make([]core.Decision, 1)
			set(4 * time.Second)
			_, err = counter.Take(ctx, "p", 1, ds)
			require.NoError(t, err)
			set(4*time.Second + 970*ms)
			require.NoError(t, counter.Peek(ctx, "p", 1, ds))
			require.False(t, ds[0].Allowed)
			require.Equal(t, tc.storeSaid, ds[0].RetryAfter)
			calls := clock.Now()
			require.NoError(t, counter.Peek(ctx, "p", 1, ds)) // from the cache
			assert.Equal(t, calls, clock.Now(), "a cached answer takes no time")
			assert.Equal(t, tc.storeSaid, ds[0].RetryAfter, "Peek: RetryAfter counted from the answer's arrival")
			assert.GreaterOrEqual(t, ds[0].RetryAfter, truthAt(4*time.Second+990*ms, "p").RetryAfter, "Peek: never shorter than the truth")
		})
	}
}
