package benchmarks

import (
	"strconv"
	"testing"
)

// TestTakersAdmitTheQuota checks that every library, configured with
// SlowQuota (10 per minute), admits exactly the first 10 of 100 requests
// sent at once on a key, and keeps keys apart: the benchmarks compare
// limiters that take the same decisions.
func TestTakersAdmitTheQuota(t *testing.T) {
	for _, lib := range Libraries() {
		t.Run(lib.Name, func(t *testing.T) {
			tk := lib.New(SlowQuota)
			defer tk.Close()
			for _, key := range []string{"alice", "bob"} {
				admitted := 0
				for i := 0; i < 100; i++ {
					if tk.Take(key) {
						if i != admitted {
							t.Fatalf("key %s: request %d admitted after a rejection", key, i)
						}
						admitted++
					}
				}
				if admitted != SlowQuota.Burst {
					t.Errorf("key %s: %d of 100 requests admitted, want %d", key, admitted, SlowQuota.Burst)
				}
			}
		})
	}
}

// TestTakersAdmitTheFastQuota checks that FastQuota admits a run of
// requests on one key and on many keys, as the benchmarks assume.
func TestTakersAdmitTheFastQuota(t *testing.T) {
	for _, lib := range Libraries() {
		t.Run(lib.Name, func(t *testing.T) {
			tk := lib.New(FastQuota)
			defer tk.Close()
			for i := 0; i < 10_000; i++ {
				if !tk.Take("hot") {
					t.Fatalf("request %d on the hot key rejected", i)
				}
				if !tk.Take("k" + strconv.Itoa(i)) {
					t.Fatalf("first request of key %d rejected", i)
				}
			}
		})
	}
}

// BenchmarkPeers runs every workload for ratekit and each peer:
//
//	go test ./benchmarks -run '^$' -bench 'Peers/(serial|parallel)' -benchtime 1s
//	go test ./benchmarks -run '^$' -bench 'Peers/bytes' -benchtime 1x
//
// cmd/compare runs the same functions and prints them as a table.
func BenchmarkPeers(b *testing.B) {
	libs := Libraries()
	b.Run(SerialHotKey, func(b *testing.B) {
		for _, lib := range libs {
			b.Run(lib.Name, BenchSerialHotKey(lib))
		}
	})
	for _, w := range []struct {
		name     string
		keys     int
		shuffled bool
	}{{Parallel1k, 1_000, false}, {Shuffled1k, 1_000, true}, {Parallel1M, 1_000_000, false}} {
		b.Run(w.name, func(b *testing.B) {
			for _, lib := range libs {
				bench, done := BenchParallelKeys(lib, w.keys, w.shuffled)
				b.Run(lib.Name, bench)
				done()
			}
		})
	}
	b.Run(BytesPerKey1M, func(b *testing.B) {
		for _, lib := range libs {
			b.Run(lib.Name, BenchBytesPerKey(lib))
		}
	})
}
