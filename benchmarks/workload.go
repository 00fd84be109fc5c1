package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The workloads. Each is a benchmark function for one library, usable
// from a test binary (BenchmarkPeers) and from testing.Benchmark
// (cmd/compare) alike.
//
//	serial hot key              one goroutine, one key
//	parallel 1k keys            every P, 1,000 keys that exist already, in the order they were first seen
//	parallel 1k keys, shuffled  the same, in a fixed shuffled order
//	parallel 1M keys            every P, 1,000,000 keys that exist already
//	bytes per key               heap growth per key after inserting 1M keys
//
// The order of the keys matters on several cores. A library that
// allocates an object per key in the order keys are first seen lays out
// keys seen one after another side by side in memory: walked in that same
// order, as the first parallel workload walks them, a core that takes a
// key from the other core takes its neighbours too, in the same cache
// line, and the hardware prefetcher fetches the next lines ahead. A hash
// table (ratekit's store) places keys by hash and gains nothing from the
// order. Requests in a server do not arrive in the order their clients
// were first seen, so the shuffled walk, where every library pays a cache
// line per decision that the other core wrote, is the closer to one.
//
// A benchmark that saw rejections reports the metric denied/op: under
// FastQuota there should be none, and a result with some did not measure
// the admit path.

// Workload names, as in benchmark names and tables.
const (
	SerialHotKey  = "serial-hot-key"
	Parallel1k    = "parallel-1k-keys"
	Shuffled1k    = "parallel-1k-keys-shuffled"
	Parallel1M    = "parallel-1M-keys"
	BytesPerKey1M = "bytes-per-key-1M"
)

// DeniedMetric is the unit of the rejections a benchmark reports.
const DeniedMetric = "denied/op"

var (
	keysOnce sync.Once
	allKeys  []string
)

// Keys returns the keys "k0" ... "k<n-1>", n at most 1M, built once.
func Keys(n int) []string {
	keysOnce.Do(func() {
		allKeys = make([]string, 1_000_000)
		for i := range allKeys {
			allKeys[i] = "k" + strconv.Itoa(i)
		}
	})
	return allKeys[:n]
}

func reportDenied(b *testing.B, denied int64) {
	if denied > 0 {
		b.ReportMetric(float64(denied)/float64(b.N), DeniedMetric)
	}
}

// BenchSerialHotKey decides requests on one key from one goroutine.
func BenchSerialHotKey(lib Library) func(*testing.B) {
	return func(b *testing.B) {
		t := lib.New(FastQuota)
		defer t.Close()
		b.ReportAllocs()
		b.ResetTimer()
		denied := int64(0)
		for i := 0; i < b.N; i++ {
			if !t.Take("hot") {
				denied++
			}
		}
		b.StopTimer()
		reportDenied(b, denied)
	}
}

// BenchParallelKeys decides requests from every P over n keys that the
// limiter already tracks, each goroutine walking the keys from its own
// offset, in the order they were first seen (k0, k1, ...), or with
// shuffled in a fixed pseudo-random order, the same on every run. The
// limiter is built and every key touched on the first call, in the
// order k0, k1, ..., outside the timer, and kept for the calls that
// follow (the testing package calls a benchmark function several times,
// with growing b.N); done releases it.
func BenchParallelKeys(lib Library, n int, shuffled bool) (bench func(*testing.B), done func()) {
	var t Taker
	bench = func(b *testing.B) {
		first := Keys(n)
		keys := first
		if shuffled {
			keys = slices.Clone(first)
			rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		}
		if t == nil {
			t = lib.New(FastQuota)
			for _, k := range first {
				if !t.Take(k) {
					b.Fatalf("%s: first request of %s rejected", lib.Name, k)
				}
			}
			if l, ok := t.(interface{ Len() int }); ok && l.Len() != n {
				b.Fatalf("%s tracks %d keys, want %d", lib.Name, l.Len(), n)
			}
			runtime.GC()
		}
		b.ReportAllocs()
		b.ResetTimer()
		var worker atomic.Uint64
		var denied atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(worker.Add(1) * 7919 % uint64(n))
			d := int64(0)
			for pb.Next() {
				if !t.Take(keys[i]) {
					d++
				}
				if i++; i == n {
					i = 0
				}
			}
			denied.Add(d)
		})
		b.StopTimer()
		reportDenied(b, denied.Load())
	}
	done = func() {
		if t != nil {
			t.Close()
			t = nil
		}
		runtime.GC()
	}
	return bench, done
}

// BytesPerKey inserts n distinct keys into a new limiter of lib under
// SlowQuota and returns the growth of the live heap per key, measured
// after a full collection before and after. Each key is built afresh for
// its request, as a server builds it from the request, so a library that
// keeps the key's text pays for it (8 bytes for keys of up to 8 bytes,
// such as these; a typical IPv4 or IPv6 address costs 16 or 48).
func BytesPerKey(lib Library, n int) (float64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t := lib.New(SlowQuota)
	buf := []byte{'k'}
	for i := 0; i < n; i++ {
		buf = strconv.AppendInt(buf[:1], int64(i), 10)
		if !t.Take(string(buf)) {
			t.Close()
			return 0, fmt.Errorf("%s: first request of key %d rejected", lib.Name, i)
		}
	}
	if l, ok := t.(interface{ Len() int }); ok && l.Len() != n {
		t.Close()
		return 0, fmt.Errorf("%s tracks %d keys, want %d", lib.Name, l.Len(), n)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(t)
	t.Close()
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n), nil
}

// BenchBytesPerKey reports BytesPerKey for 1M keys as the metric B/key;
// ns/op is the time to insert them. One iteration is enough (-benchtime
// 1x).
func BenchBytesPerKey(lib Library) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		var perKey float64
		for i := 0; i < b.N; i++ {
			var err error
			if perKey, err = BytesPerKey(lib, 1_000_000); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(perKey, "B/key")
	}
}
