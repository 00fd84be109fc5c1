package benchmarks

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The workloads. Each is a benchmark function for one library, usable
// from a test binary (BenchmarkPeers) and from testing.Benchmark
// (cmd/compare) alike.
//
//	serial hot key     one goroutine, one key
//	parallel 1k keys   every P, 1,000 keys that exist already
//	parallel 1M keys   every P, 1,000,000 keys that exist already
//	bytes per key      heap growth per key after inserting 1M keys
//
// A benchmark that saw rejections reports the metric denied/op: under
// FastQuota there should be none, and a result with some did not measure
// the admit path.

// Workload names, as in benchmark names and tables.
const (
	SerialHotKey  = "serial-hot-key"
	Parallel1k    = "parallel-1k-keys"
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
// offset. The limiter is built and every key touched on the first call,
// outside the timer, and kept for the calls that follow (the testing
// package calls a benchmark function several times, with growing b.N);
// done releases it.
func BenchParallelKeys(lib Library, n int) (bench func(*testing.B), done func()) {
	var t Taker
	bench = func(b *testing.B) {
		keys := Keys(n)
		if t == nil {
			t = lib.New(FastQuota)
			for _, k := range keys {
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
