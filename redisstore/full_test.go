package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

func init() {
	fullStoreOptions = func(logs *logRecorder) []redisstore.Option {
		return []redisstore.Option{redisstore.WithLogger(slog.New(logs))}
	}
	fullStoreFigures = func(s *redisstore.Store, logs *logRecorder) string {
		msgs, _ := logs.messages("")
		return fmt.Sprintf("store log lines while full %d %q, OutOfMemory() %d", len(msgs), msgs, s.OutOfMemory())
	}
}

// fullRedis is a store on a Redis of its own, with maxmemory 3mb and the
// noeviction policy, run through Functions or, for a client whose ACL
// refuses FUNCTION (as managed Redis may), through scripts; and a limiter
// of 5 requests an hour on it, which fails open.
type fullRedis struct {
	admin   *redis.Client // the server's default user
	store   *redisstore.Store
	lim     *core.Limiter
	logs    *logRecorder // the store's
	clock   atomic.Int64 // the store's episodes' clock, in Unix nanoseconds
	errs    atomic.Int64 // the limiter's decisions whose store call failed
	flooded int
}

func newFullRedis(t *testing.T, functions bool) *fullRedis {
	srv := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	f := &fullRedis{admin: srv.Client(t), logs: &logRecorder{}}
	rdb := ctxClient(t, srv)
	if !functions {
		rdb = noFunctionsClient(t, srv)
	}
	f.store = newStore(t, rdb, nil, redisstore.WithLogger(slog.New(f.logs)))
	f.clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	redisstore.SetFullClock(f.store, func() time.Time { return time.Unix(0, f.clock.Load()) })
	var err error
	f.lim, err = core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerHour(5)},
		core.WithStore(f.store), core.WithLogger(slog.New(&logRecorder{})),
		core.WithObserver(func(e core.Event) {
			if e.Outcome == core.ErrorAllowed {
				f.errs.Add(1)
			}
		}))
	require.NoError(t, err)
	return f
}

// admitted returns how many of n requests of key the limiter admits. A
// decision whose store call failed comes with its error and the fail
// mode's decision (open: admitted), which middleware applies; f.errs
// counts them.
func (f *fullRedis) admitted(t *testing.T, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		d, _ := f.lim.Take(context.Background(), key, 1)
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// floodRound sends 3,200 requests of new keys, 32 at a time.
func (f *fullRedis) floodRound() {
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func(base int) {
			defer wg.Done()
			for i := base; i < base+100; i++ {
				_, _ = f.lim.Take(context.Background(), "flood-"+strconv.Itoa(i), 1)
			}
		}(f.flooded + g*100)
	}
	wg.Wait()
	f.flooded += 3200
}

// flood fills Redis with new keys through the limiter, then makes it
// full for good: maxmemory goes under the memory the keys take once it
// has settled, so that a plain SET is refused whatever the connections'
// buffers do meanwhile (at the edge, Redis refuses some writes and takes
// others, and the flood alone may need hundreds of thousands of keys to
// push its idle memory over the limit); then the flood goes on, out of
// memory.
func (f *fullRedis) flood(t *testing.T) {
	ctx := context.Background()
	for range 3 {
		f.floodRound()
	}
	used := settledMemory(t, f.admin)
	require.NoError(t, f.admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-256<<10, 10)).Err())
	require.True(t, redis.HasErrorPrefix(f.admin.Set(ctx, "probe", "x", 0).Err(), "OOM"), "Redis is full")
	f.floodRound()
}

// TestFullRedisBothPaths: a Redis out of memory (maxmemory, noeviction)
// decides alike whether the store runs Functions or, where an ACL refuses
// FUNCTION, scripts. A client over its limit before the flood of new keys
// stays denied, a new client is decided in process up to the limit, and
// no decision fails (with the limiter failing open, a failure would admit
// the abuser); the decisions made meanwhile are counted (the metric), and
// the episode is logged once when it starts and once, with the count,
// when Redis has memory again. On the script path, the script cache is
// emptied while Redis is full, as a restart would.
func TestFullRedisBothPaths(t *testing.T) {
	for _, functions := range []bool{true, false} {
		name := "scripts"
		if functions {
			name = "functions"
		}
		t.Run(name, func(t *testing.T) {
			f := newFullRedis(t, functions)
			ctx := context.Background()
			require.Equal(t, 5, f.admitted(t, "abuser", 6), "the abuser spends the limit before the flood")
			f.flood(t)
			t.Logf("Redis out of memory after %d new clients; %d of the flood's decisions failed", f.flooded, f.errs.Load())
			require.Positive(t, f.store.OutOfMemory(), "the flood's last decisions were made out of memory")

			if !functions {
				// As after a restart: the scripts are loaded again while
				// Redis is full (NOSCRIPT, then EVAL).
				require.NoError(t, f.admin.ScriptFlush(ctx).Err())
			}
			// The flood goes on while the abuser and newcomers send theirs,
			// which share round trips with it.
			errs := f.errs.Load()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, _ = f.lim.Take(ctx, "flood-more-"+strconv.Itoa(g)+"-"+strconv.Itoa(i), 1)
					}
				}()
			}
			abuser := f.admitted(t, "abuser", 20)
			newcomers := 0
			for i := range 75 {
				newcomers += f.admitted(t, "newcomer-"+strconv.Itoa(i), 1)
			}
			again := f.admitted(t, "newcomer-0", 10)
			close(stop)
			wg.Wait()
			assert.Zero(t, abuser, "the abuser, over the limit, is still denied")
			assert.Equal(t, 75, newcomers, "a new client's first request, decided in process, is admitted")
			assert.Equal(t, 4, again, "a new client is admitted up to the limit, no more")
			assert.Equal(t, errs, f.errs.Load(), "no decision failed while Redis was full")
			assert.True(t, redis.HasErrorPrefix(f.admin.Set(ctx, "probe", "x", 0).Err(), "OOM"), "Redis is still full")

			during := f.store.OutOfMemory()
			assert.GreaterOrEqual(t, during, int64(20+75+10), "the metric counts the decisions made while Redis was full")
			msgs, _ := f.logs.messages("")
			require.Len(t, msgs, 1, "one line while Redis is full: %q", msgs)
			assert.Contains(t, msgs[0], "out of memory")

			require.NoError(t, f.admin.ConfigSet(ctx, "maxmemory", "0").Err())
			assert.Zero(t, f.admitted(t, "abuser", 1), "the abuser, decided in Redis again, is still denied")
			msgs, _ = f.logs.messages("")
			assert.Len(t, msgs, 1, "Redis had room for less than a second: the same episode")
			f.clock.Add(int64(2 * time.Second))
			assert.Zero(t, f.admitted(t, "abuser", 1), "the abuser, decided in Redis again, is still denied")
			assert.Equal(t, during, f.store.OutOfMemory(), "Redis has memory again")
			msgs, counts := f.logs.messages("decisions_out_of_memory")
			require.Len(t, msgs, 2, "a second line when Redis has memory again: %q", msgs)
			assert.Contains(t, msgs[1], "memory again")
			n, err := strconv.ParseInt(counts[1], 10, 64)
			require.NoError(t, err, "the count: %q", counts[1])
			assert.Equal(t, during, n, "the line counts every decision made while Redis was full")
		})
	}
}

// TestFullRedisTwoLimits: out of memory, a client over one of its limits
// stays over it though another of its limits has no key yet. The abuser
// spends an hourly limit through a limiter of that limit alone; then, with
// Redis full, a limiter of the same limit and a per-second one decides it:
// the per-second key is missing, but the hourly key, which exists, rejects
// every request (it used to send the whole decision in process, which
// admitted the abuser up to the hourly limit again).
func TestFullRedisTwoLimits(t *testing.T) {
	for _, functions := range []bool{true, false} {
		name := "scripts"
		if functions {
			name = "functions"
		}
		t.Run(name, func(t *testing.T) {
			f := newFullRedis(t, functions)
			require.Equal(t, 5, f.admitted(t, "abuser", 6), "the abuser spends the hourly limit")
			two, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerHour(5)},
				core.WithLimit(core.Limit{Name: "burst", Algorithm: core.FixedWindow, Rate: core.PerSecond(100)}),
				core.WithStore(f.store), core.WithLogger(slog.New(&logRecorder{})))
			require.NoError(t, err)
			f.flood(t)

			admitted := 0
			for range 20 {
				d, err := two.Take(context.Background(), "abuser", 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			assert.Zero(t, admitted, "the hourly key rejects the abuser while Redis is full")
			d, err := two.Take(context.Background(), "newcomer", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "a new client is decided in process and admitted")
		})
	}
}
