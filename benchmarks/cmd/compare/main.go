// Command compare runs the workloads of package benchmarks for ratekit
// and each peer and prints a Markdown table: ns/op and allocs/op of the
// decision workloads, heap bytes per key at 1M keys, and for each the
// ratio ratekit/peer (below 1: ratekit is faster or smaller).
//
//	go run ./benchmarks/cmd/compare                   # about 2 minutes on 2 cores
//	go run ./benchmarks/cmd/compare -benchtime 2s -count 3
//
// With -count above 1, each number is the median of the runs, which are
// interleaved: each round runs every library once.
//
// With -frameworks it prints the framework comparison instead: each web
// framework alone, with ratekit's adapter and with the limiter its users
// would otherwise pick (frameworks.go):
//
//	go run ./benchmarks/cmd/compare -frameworks -count 5   # about 2 minutes
//
// With -redis-run it runs BenchmarkRedis itself, with Redis and the
// client sharing the cores and with each pinned to a core of its own, and
// prints both setups (redisrun.go):
//
//	go run ./benchmarks/cmd/compare -redis-run -redis-benchtime 3000x -count 3
//
// With -redis it reads the output of BenchmarkRedis (redis.go) and prints
// it as tables:
//
//	go test ./benchmarks -run '^$' -bench Redis -benchtime 2000x -count 3 | go run ./benchmarks/cmd/compare -redis
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/benchmarks"
)

type result struct {
	nsPerOp  float64
	allocs   float64
	bytes    float64
	denied   float64
	bytesKey float64
}

func main() {
	testing.Init()
	benchtime := flag.Duration("benchtime", time.Second, "run time of each decision benchmark")
	count := flag.Int("count", 1, "runs of each benchmark; the table shows medians")
	only := flag.String("libs", "", "comma-separated library names to run besides ratekit (default: all)")
	frameworks := flag.Bool("frameworks", false, "compare the middlewares of the web frameworks instead")
	redisTable := flag.Bool("redis", false, "print the BenchmarkRedis results of the go test output on standard input instead")
	redisRun := flag.Bool("redis-run", false, "run BenchmarkRedis in the shared and the pinned setup, -count rounds, and print both")
	redisBenchtime := flag.String("redis-benchtime", "3000x", "with -redis-run: the -test.benchtime of BenchmarkRedis")
	redisBench := flag.String("redis-bench", "^BenchmarkRedis$", "with -redis-run: the -test.bench pattern (a subset of BenchmarkRedis)")
	flag.Parse()
	if *redisRun {
		if err := runRedis(os.Stdout, *redisBenchtime, *count, *redisBench); err != nil {
			fail(err)
		}
		return
	}
	if *redisTable {
		if err := printRedis(os.Stdin, os.Stdout); err != nil {
			fail(err)
		}
		return
	}
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fail(err)
	}
	if *frameworks {
		compareFrameworks(os.Stdout, *benchtime, *count)
		return
	}

	libs := []benchmarks.Library{benchmarks.Ratekit}
	for _, p := range benchmarks.Peers {
		if *only == "" || slices.Contains(strings.Split(*only, ","), p.Name) {
			libs = append(libs, p)
		}
	}
	workloads := []string{benchmarks.SerialHotKey, benchmarks.Parallel1k, benchmarks.Shuffled1k, benchmarks.Parallel1M, benchmarks.BytesPerKey1M}
	// The runs of one benchmark are spread over rounds, each of which runs
	// every library once, so that a slow spell of the machine does not
	// fall on one library only.
	runs := map[string]map[string][]result{}
	for _, w := range workloads {
		runs[w] = map[string][]result{}
	}
	for round := 1; round <= *count; round++ {
		for _, w := range workloads {
			for _, lib := range libs {
				r := run(w, lib)
				runs[w][lib.Name] = append(runs[w][lib.Name], r)
				fmt.Fprintf(os.Stderr, "round %d  %-18s %-22s %s\n", round, w, lib.Name, r.brief(w))
			}
		}
	}
	results := map[string]map[string]result{}
	for _, w := range workloads {
		results[w] = map[string]result{}
		for _, lib := range libs {
			results[w][lib.Name] = median(runs[w][lib.Name])
		}
	}
	printTable(os.Stdout, libs, workloads, results, *benchtime, *count)
}

func run(w string, lib benchmarks.Library) result {
	defer runtime.GC()
	switch w {
	case benchmarks.SerialHotKey:
		return fromBench(testing.Benchmark(benchmarks.BenchSerialHotKey(lib)))
	case benchmarks.Parallel1k, benchmarks.Shuffled1k, benchmarks.Parallel1M:
		n := 1_000
		if w == benchmarks.Parallel1M {
			n = 1_000_000
		}
		bench, done := benchmarks.BenchParallelKeys(lib, n, w == benchmarks.Shuffled1k)
		defer done()
		return fromBench(testing.Benchmark(bench))
	}
	b, err := benchmarks.BytesPerKey(lib, 1_000_000)
	if err != nil {
		fail(err)
	}
	return result{bytesKey: b}
}

func fromBench(br testing.BenchmarkResult) result {
	if br.N == 0 {
		fail(fmt.Errorf("benchmark failed (see its output above)"))
	}
	return result{
		nsPerOp: float64(br.T.Nanoseconds()) / float64(br.N),
		allocs:  float64(br.MemAllocs) / float64(br.N),
		bytes:   float64(br.MemBytes) / float64(br.N),
		denied:  br.Extra[benchmarks.DeniedMetric],
	}
}

func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{
		nsPerOp:  pick(func(r result) float64 { return r.nsPerOp }),
		allocs:   pick(func(r result) float64 { return r.allocs }),
		bytes:    pick(func(r result) float64 { return r.bytes }),
		denied:   pick(func(r result) float64 { return r.denied }),
		bytesKey: pick(func(r result) float64 { return r.bytesKey }),
	}
}

func (r result) brief(w string) string {
	if w == benchmarks.BytesPerKey1M {
		return fmt.Sprintf("%.1f B/key", r.bytesKey)
	}
	s := fmt.Sprintf("%.1f ns/op %.2f allocs/op", r.nsPerOp, r.allocs)
	if r.denied > 0 {
		s += fmt.Sprintf(" (%.3g denied/op!)", r.denied)
	}
	return s
}

var titles = map[string]string{
	benchmarks.SerialHotKey:  "serial, hot key",
	benchmarks.Parallel1k:    "parallel, 1k keys",
	benchmarks.Shuffled1k:    "parallel, 1k keys, shuffled",
	benchmarks.Parallel1M:    "parallel, 1M keys",
	benchmarks.BytesPerKey1M: "heap per key, 1M keys",
}

func printTable(w io.Writer, libs []benchmarks.Library, workloads []string, res map[string]map[string]result, benchtime time.Duration, count int) {
	fmt.Fprintf(w, "Produced by `go run ./benchmarks/cmd/compare -benchtime %s -count %d` (%s, GOMAXPROCS %d, %s/%s).\n",
		benchtime, count, runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintln(w, "Each cell: time per decision, allocations per decision, and in parentheses ratekit ÷ library (below 1: ratekit faster or smaller).")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| library |")
	for _, wl := range workloads {
		fmt.Fprintf(w, " %s |", titles[wl])
	}
	fmt.Fprint(w, "\n|---|")
	for range workloads {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	denied := false
	for _, lib := range libs {
		label := lib.Module
		if n := libsOf(libs, lib.Module); n > 1 {
			label += " (" + lib.Name + ")" // one module, several setups
		}
		fmt.Fprintf(w, "| %s |", label)
		for _, wl := range workloads {
			r, base := res[wl][lib.Name], res[wl][benchmarks.Ratekit.Name]
			var cell string
			if wl == benchmarks.BytesPerKey1M {
				cell = fmt.Sprintf("%.1f B", r.bytesKey)
				if lib.Name != benchmarks.Ratekit.Name {
					cell += fmt.Sprintf(" (%.2f)", base.bytesKey/r.bytesKey)
				}
			} else {
				cell = fmt.Sprintf("%.1f ns, %s", r.nsPerOp, allocs(r.allocs))
				if lib.Name != benchmarks.Ratekit.Name {
					cell += fmt.Sprintf(" (%.2f)", base.nsPerOp/r.nsPerOp)
				}
				if r.denied > 0 {
					cell += " †"
					denied = true
				}
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	if denied {
		fmt.Fprintln(w, "\n† some requests were rejected: the number is not the cost of an admission.")
	}
	fmt.Fprintln(w, "\nSetups:")
	fmt.Fprintln(w)
	for _, lib := range libs {
		fmt.Fprintf(w, "- %s: %s\n", lib.Name, lib.Setup)
	}
}

// allocs formats allocations per decision; amortized growth of a table
// shows as a small fraction, which rounds to 0.
func allocs(a float64) string {
	if r := math.Round(a); math.Abs(a-r) < 0.005 {
		return fmt.Sprintf("%d allocs", int64(r))
	}
	return fmt.Sprintf("%.2f allocs", a)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

// libsOf counts the libraries of libs from module.
func libsOf(libs []benchmarks.Library, module string) int {
	n := 0
	for _, l := range libs {
		if l.Module == module {
			n++
		}
	}
	return n
}
