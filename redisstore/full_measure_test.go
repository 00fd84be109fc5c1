package redisstore_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/internal/testenv"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// What the store itself reports of a full Redis, where it does
// (full_test.go sets them): its options, given the recorder of its log,
// and the figures it gives.
var (
	fullStoreOptions func(logs *logRecorder) []redisstore.Option
	fullStoreFigures func(s *redisstore.Store, logs *logRecorder) string
)

// TestMeasureFullRedis measures issue 34's case: a Redis with maxmemory
// 3mb and noeviction, and a flood of 60,000 new keys from 32 goroutines,
// through Functions and through scripts (an ACL refusing FUNCTION), a
// limiter of 5 an hour that fails open. A client that spent its limit
// before the flood sends 20 requests and 75 new clients one each, while
// the flood's second half runs (Redis is full by then). It reports the
// decisions that failed (each one admitted, failing open), what the
// abuser and the newcomers got, and the store's log lines and count.
//
//	RATEKIT_MEASURE=1 go test ./redisstore -run TestMeasureFullRedis -v -count=1
func TestMeasureFullRedis(t *testing.T) {
	testenv.SkipUnlessMeasuring(t)
	for _, functions := range []bool{true, false} {
		name := "scripts (ACL -function)"
		if functions {
			name = "functions"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
			rdb := ctxClient(t, srv)
			if !functions {
				rdb = noFunctionsClient(t, srv)
			}
			logs, limLogs := &logRecorder{}, &logRecorder{}
			var opts []redisstore.Option
			if fullStoreOptions != nil {
				opts = fullStoreOptions(logs)
			}
			store, err := redisstore.New(rdb, opts...)
			require.NoError(t, err)
			var failed, decisions atomic.Int64
			lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerHour(5)},
				core.WithStore(store), core.WithLogger(slog.New(limLogs)),
				core.WithObserver(func(e core.Event) {
					decisions.Add(1)
					if e.Outcome == core.ErrorAllowed {
						failed.Add(1)
					}
				}))
			require.NoError(t, err)
			ctx := context.Background()
			take := func(key string) bool {
				d, _ := lim.Take(ctx, key, 1) // failing open: admitted
				return d.Allowed
			}
			for range 6 {
				take("abuser")
			}
			flood := func(from, to int) {
				var wg sync.WaitGroup
				for g := range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := from + g; i < to; i += 32 {
							take("flood-" + strconv.Itoa(i))
						}
					}()
				}
				wg.Wait()
			}
			flood(0, 30_000)
			var abuser, newcomers int
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range 75 {
					if i < 20 && take("abuser") {
						abuser++
					}
					if take("newcomer-" + strconv.Itoa(i)) {
						newcomers++
					}
				}
			}()
			flood(30_000, 60_000)
			<-done
			limMsgs, _ := limLogs.messages("")
			figures := "the store reports nothing"
			if fullStoreFigures != nil {
				figures = fullStoreFigures(store, logs)
			}
			t.Logf("%s: %d of %d decisions failed (fail open: admitted); abuser admitted %d of 20, newcomers %d of 75; "+
				"limiter log lines %d; used_memory %d; %s",
				name, failed.Load(), decisions.Load(), abuser, newcomers, len(limMsgs), infoInt(t, srv.Client(t), "memory", "used_memory"), figures)
		})
	}
}
