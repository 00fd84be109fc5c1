package core_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// The benchmarks of this file measure one decision of a Limiter over a
// memory store, for each algorithm, on the paths a server takes most:
//
//	BenchmarkDecision/<alg>/serial-hot-key     one key, one goroutine
//	BenchmarkDecision/<alg>/parallel-hot-key   one key, every P
//	BenchmarkDecision/<alg>/parallel-1k-keys   1,000 existing keys, every P
//	BenchmarkDecision/<alg>/parallel-1M-keys   1,000,000 existing keys, every P
//	BenchmarkBytesPerKey/<alg>                 heap per tracked key at 1M keys
//
// The decision limits (see benchLimit) are so generous that every request
// is admitted: what is measured is the admit path, the one nearly all
// requests take. A benchmark that sees a rejection reports it as the
// metric denied/op.
//
// Each also reports cpu-ns/op, the CPU time of every thread per decision,
// which waiting for a core on a loaded machine does not inflate.
//
// Suggested run (about two minutes on two cores):
//
//	go test ./core -run '^$' -bench . -benchtime 1s

// benchLimit returns a limit of alg that admits everything a benchmark
// loop can send, and under which every key touched stays counting for the
// whole run. The second matters as much as the first: the memory store
// drops keys whose state is back to full capacity when a shard grows, so
// under a limit that refills between two requests on a key (100M per
// second, say) the "existing" keys would keep being forgotten and inserted
// again, and the benchmark would measure insertions.
//
//   - token and leaky bucket: a burst of 100M refilled at one token per
//     10s, so a key is counting for 10s after each request;
//   - fixed window and sliding window counter: MaxCount per MaxPeriod;
//   - sliding window log: MaxCount per 2s. The log keeps one timestamp per
//     admitted request for one period, so its period is kept short; 2s is
//     longer than the setup of the 1M-key benchmark, so no key expires
//     before it is measured.
func benchLimit(alg core.Algorithm) core.Limit {
	switch alg {
	case core.TokenBucket, core.LeakyBucket:
		return core.Limit{Algorithm: alg, Rate: core.Rate{Count: 1, Period: 10 * time.Second}, Burst: 100_000_000}
	case core.SlidingWindowLog:
		return core.Limit{Algorithm: alg, Rate: core.Rate{Count: core.MaxCount, Period: 2 * time.Second}}
	}
	return core.Limit{Algorithm: alg, Rate: core.Rate{Count: core.MaxCount, Period: core.MaxPeriod}}
}

// benchMaxKeys is the key cap of the stores of the 1M-key benchmarks: above
// 1M, so that no shard reaches its share of the cap and every key gets a
// slot of its own.
const benchMaxKeys = 1 << 21

func newBenchLimiter(tb testing.TB, lim core.Limit) (*core.Limiter, *core.MemoryStore) {
	tb.Helper()
	st := &core.MemoryStore{MaxKeys: benchMaxKeys}
	l, err := core.NewLimiter(lim, core.WithStore(st))
	if err != nil {
		tb.Fatal(err)
	}
	return l, st
}

var (
	benchKeysOnce sync.Once
	benchKeysAll  []string
)

// benchKeys returns the keys "k0", "k1", ... "k<n-1>". They are built once
// and shared by every benchmark.
func benchKeys(n int) []string {
	benchKeysOnce.Do(func() {
		benchKeysAll = make([]string, 1_000_000)
		for i := range benchKeysAll {
			benchKeysAll[i] = "k" + strconv.Itoa(i)
		}
	})
	return benchKeysAll[:n]
}

// A cpuClock measures the CPU time of a benchmark's loop, every thread
// of the process: the metric cpu-ns/op. On a machine shared with other
// work, the wall time per decision (ns/op) includes the time the
// benchmark's threads waited for a core; the CPU time does not, while it
// still counts the stalls of cache lines moving between cores and the
// time spent spinning on a lock.
type cpuClock struct{ start int64 }

func startCPU(b *testing.B) cpuClock {
	b.ResetTimer()
	return cpuClock{cpuTime()}
}

func (c cpuClock) report(b *testing.B) {
	if end := cpuTime(); c.start != 0 && end != 0 {
		b.ReportMetric(float64(end-c.start)/float64(b.N), "cpu-ns/op")
	}
}

// reportDenied adds the metric denied/op when some requests were rejected,
// which would mean the benchmark did not measure what it claims.
func reportDenied(b *testing.B, denied int64) {
	if denied > 0 {
		b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
	}
}

func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	for _, alg := range algorithms {
		lim := benchLimit(alg)
		b.Run(alg.String(), func(b *testing.B) {
			b.Run("serial-hot-key", func(b *testing.B) {
				l, _ := newBenchLimiter(b, lim)
				b.ReportAllocs()
				cpu := startCPU(b)
				var denied int64
				for i := 0; i < b.N; i++ {
					d, err := l.Take(ctx, "hot", 1)
					if err != nil {
						b.Fatal(err)
					}
					if !d.Allowed {
						denied++
					}
				}
				cpu.report(b)
				reportDenied(b, denied)
			})
			b.Run("parallel-hot-key", func(b *testing.B) {
				l, _ := newBenchLimiter(b, lim)
				b.ReportAllocs()
				cpu := startCPU(b)
				var denied atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					n := int64(0)
					for pb.Next() {
						if d, _ := l.Take(ctx, "hot", 1); !d.Allowed {
							n++
						}
					}
					denied.Add(n)
				})
				cpu.report(b)
				reportDenied(b, denied.Load())
			})
			benchManyKeys(b, "parallel-1k-keys", lim, 1_000)
			benchManyKeys(b, "parallel-1M-keys", lim, 1_000_000)
		})
	}
}

// benchManyKeys runs the decisions of every P over n existing keys. The
// store is built, and every key touched, once per sub-benchmark and outside
// the timer; the testing package calls the function several times with
// growing b.N, and each call reuses it.
func benchManyKeys(b *testing.B, name string, lim core.Limit, n int) {
	ctx := context.Background()
	var l *core.Limiter
	b.Run(name, func(b *testing.B) {
		keys := benchKeys(n)
		if l == nil {
			var st *core.MemoryStore
			l, st = newBenchLimiter(b, lim)
			for _, k := range keys {
				if _, err := l.Take(ctx, k, 1); err != nil {
					b.Fatal(err)
				}
			}
			if got := st.TrackedKeys(lim); got != n {
				b.Fatalf("store tracks %d keys, want %d", got, n)
			}
			runtime.GC()
		}
		b.ReportAllocs()
		cpu := startCPU(b)
		var (
			worker atomic.Uint64
			denied atomic.Int64
		)
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine walks the keys from its own offset, far from
			// the others', so they seldom meet on a key or a shard.
			i := int(worker.Add(1) * 7919 % uint64(n))
			d := int64(0)
			for pb.Next() {
				if dec, _ := l.Take(ctx, keys[i], 1); !dec.Allowed {
					d++
				}
				if i++; i == n {
					i = 0
				}
			}
			denied.Add(d)
		})
		cpu.report(b)
		reportDenied(b, denied.Load())
	})
	l = nil
	runtime.GC()
}

// BenchmarkBytesPerKey inserts 1M distinct keys into a new store and
// reports the growth of the live heap per key (B/key), after a full
// collection before and after. The limit is 10 per minute, so every key
// is still counting when measured and none can be dropped as full. Each
// key is built afresh for its request, as a server builds it from the
// request, so a store that kept the key's text would pay for it.
//
// ns/op is the time to insert the 1M keys. One iteration is enough:
//
//	go test ./core -run '^$' -bench BytesPerKey -benchtime 1x
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	for _, alg := range algorithms {
		b.Run(alg.String(), func(b *testing.B) {
			b.ReportAllocs()
			var perKey float64
			for i := 0; i < b.N; i++ {
				perKey = bytesPerKey(b, core.Limit{Algorithm: alg, Rate: core.PerMinute(10)}, n)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

func bytesPerKey(b *testing.B, lim core.Limit, n int) float64 {
	ctx := context.Background()
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, st := newBenchLimiter(b, lim)
	b.StartTimer()

	buf := []byte{'k'}
	for i := 0; i < n; i++ {
		buf = strconv.AppendInt(buf[:1], int64(i), 10)
		d, err := l.Take(ctx, string(buf), 1)
		if err != nil {
			b.Fatal(err)
		}
		if !d.Allowed {
			b.Fatalf("first request of key %d rejected", i)
		}
	}

	b.StopTimer()
	if got := st.TrackedKeys(lim); got != n {
		b.Fatalf("store tracks %d keys, want %d", got, n)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(l)
	b.StartTimer()
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// BenchmarkTwoLimits measures a decision by a limiter of two limits on one
// key (both in one atomic step) beside limiters with each limit alone: the
// target is at most 1.5x the slower one alone.
//
//	go test ./core -run '^$' -bench TwoLimits -benchtime 1s -count 5
func BenchmarkTwoLimits(b *testing.B) {
	ctx := context.Background()
	second := core.Limit{Name: "second", Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: 10 * time.Second}, Burst: 100_000_000}
	hour := core.Limit{Name: "hour", Algorithm: core.SlidingWindowCounter, Rate: core.Rate{Count: core.MaxCount, Period: core.MaxPeriod}}
	hourBucket := core.Limit{Name: "hour", Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: 10 * time.Second}, Burst: 100_000_000}
	for _, tc := range []struct {
		name  string
		first core.Limit
		opts  []core.Option
	}{
		{"token-bucket", second, nil},
		{"sliding-window-counter", hour, nil},
		{"both", second, []core.Option{core.WithLimit(hour)}},
		{"two-token-buckets", second, []core.Option{core.WithLimit(hourBucket)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := core.NewLimiter(tc.first, append(tc.opts, core.WithStore(&core.MemoryStore{}))...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := startCPU(b)
			for i := 0; i < b.N; i++ {
				if d, _ := l.Take(ctx, "hot", 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
			cpu.report(b)
		})
	}
}
