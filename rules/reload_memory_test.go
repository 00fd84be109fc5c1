package rules_test

// RATEKIT_MEASURE=1 runs the reload test at full size (10,000-entry block
// lists, as a large deployment's): about 50 s with -race on 2 cores, where
// the default size (1,000 entries) takes about 5 s.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
)

// blockListSize returns the number of entries of each block list the
// reload test loads: 1,000, whose lists still outweigh the rest of the
// heap, or, with RATEKIT_MEASURE set, 10,000, the size of a large
// deployment's list.
func blockListSize() int {
	if os.Getenv("RATEKIT_MEASURE") != "" {
		return 10_000
	}
	return 1_000
}

// blockList is a config of a block list of size client IPs (10.n.y.z;
// every list n has values of the same length, so that lists weigh the
// same) beside a per-IP limit of 5 per minute for every other client,
// whose identity is the same in every list.
func blockList(n, size int) rules.Config {
	ds := make([]rules.Descriptor, 0, size+1)
	for i := range size {
		ds = append(ds, rules.Descriptor{
			Key:       "remote_address",
			Value:     fmt.Sprintf("10.%d.%d.%d", 100+n, i/256, i%256),
			RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 0},
		})
	}
	ds = append(ds, rules.Descriptor{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5}})
	return rules.Config{Domain: "edge", Descriptors: ds}
}

// liveHeap returns the bytes of live heap objects, after collecting
// garbage. The memory store frees a table in a cleanup that runs after
// the collection that found its counters unreachable, and the table itself
// goes in a later one: with want, it collects until the live heap is at
// most want, a bounded number of times.
func liveHeap(want uint64) uint64 {
	var ms runtime.MemStats
	for range 20 {
		runtime.GC()
		runtime.GC()
		debug.FreeOSMemory()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc <= want {
			break
		}
		for range 10 {
			runtime.Gosched() // let the cleanups run
		}
	}
	return ms.HeapAlloc
}

// Reloading a rules file without end must not accumulate memory: what a
// reload replaces is freed, whether the new rules are the same, alternate
// with others, or are new each time; and the counts of a rule that
// survives the reloads are kept.
func TestReloadFreesWhatItReplaces(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles 300 sets of 1,000 rules (10,000 with RATEKIT_MEASURE set)")
	}
	size := blockListSize()
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch) // stands still: the minute never turns
	e, err := rules.NewEngine(rules.WithStore(&core.MemoryStore{Clock: clock.Now}))
	require.NoError(t, err)
	load := func(n int) {
		t.Helper()
		require.NoError(t, e.Load(blockList(n, size)))
	}
	// take decides a request of the given cost from ip by the rules in
	// force.
	take := func(ip string, cost int) core.Decision {
		t.Helper()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = ip + ":1234"
		var buf [4]core.Check
		checks, err := e.Checks(rules.HTTPRequest(r), buf[:0])
		require.NoError(t, err)
		require.Len(t, checks, 1, ip)
		d, err := core.TakeAll(ctx, checks, cost)
		require.NoError(t, err)
		return d
	}

	load(0)
	for range 3 {
		require.True(t, take("192.0.2.1", 1).Allowed)
	}
	require.False(t, take("10.100.0.1", 1).Allowed, "blocked")
	base := liveHeap(0)
	limit := base + base/10
	t.Logf("baseline, a %d-entry block list loaded: heap %.1f MB", size, mb(base))

	for _, sc := range []struct {
		name string
		list func(i int) int // the list of reload i
	}{
		{"same list", func(int) int { return 0 }},
		{"two lists alternating", func(i int) int { return (i + 1) % 2 }},
		{"a new list each time", func(i int) int { return 2 + i }},
	} {
		last := 0
		for i := range 100 {
			last = sc.list(i)
			load(last)
		}
		heap := liveHeap(limit)
		t.Logf("after 100 reloads, %s: heap %.1f MB (%+.1f%%)", sc.name, mb(heap), 100*(float64(heap)/float64(base)-1))
		require.LessOrEqual(t, heap, limit, "%s: the live heap grew more than 10%% over the baseline", sc.name)
		require.False(t, take(fmt.Sprintf("10.%d.%d.%d", 100+last, (size-1)/256, (size-1)%256), 1).Allowed, "%s: blocked", sc.name)
		d := take("192.0.2.1", 0)
		require.Equal(t, 2, d.Remaining, "%s: 3 of 5 used before the reloads", sc.name)
	}
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }
