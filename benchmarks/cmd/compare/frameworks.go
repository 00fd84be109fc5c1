package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ratekit/ratekit/benchmarks"
)

// compareFrameworks runs the framework benchmarks count times, in rounds
// that each run every row once, and prints the medians as Markdown.
func compareFrameworks(w io.Writer, benchtime time.Duration, count int) {
	runs := map[string][]result{}
	for round := 1; round <= count; round++ {
		for _, f := range benchmarks.Frameworks {
			for _, row := range f.Rows() {
				r := fromBench(testing.Benchmark(benchmarks.BenchFramework(row)))
				runtime.GC()
				id := f.Name + "/" + row.Name
				runs[id] = append(runs[id], r)
				fmt.Fprintf(os.Stderr, "round %d  %-36s %.1f ns/op %.0f B/op %s/op\n", round, id, r.nsPerOp, r.bytes, allocs(r.allocs))
			}
		}
	}

	fmt.Fprintf(w, "Produced by `go run ./benchmarks/cmd/compare -frameworks -benchtime %s -count %d` (%s, GOMAXPROCS %d, %s/%s).\n",
		benchtime, count, runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "One request served in place (no network) on the allowed path, medians of %d runs; "+
		"\"added\" is the cost over the framework alone. Quota: %s, except the small-counts rows: %s.\n\n",
		count, describe(benchmarks.BenchAllowance), describe(benchmarks.SmallCountsAllowance))
	fmt.Fprintln(w, "| framework | middleware | ns/op | B/op | allocs/op | added ns | added allocs |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	type added struct{ ns, allocs float64 }
	summary := map[string][3]added{} // framework → ratekit, ratekit with small counts, peer
	for _, f := range benchmarks.Frameworks {
		alone := median(runs[f.Name+"/"+f.Alone.Name])
		for _, row := range f.Rows() {
			r := median(runs[f.Name+"/"+row.Name])
			name := row.Middleware.Name
			switch {
			case row.Middleware.Module == "":
				name = "(framework alone)"
			case row.Allowance == benchmarks.SmallCountsAllowance:
				name += ", counts < 4096"
			}
			a := added{r.nsPerOp - alone.nsPerOp, r.allocs - alone.allocs}
			addNs, addAllocs := "", ""
			if row.Middleware.Module != "" {
				addNs, addAllocs = fmt.Sprintf("%+.0f", a.ns), signed(a.allocs)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s | %s | %s |\n",
				f.Name, name, r.nsPerOp, r.bytes, trim(r.allocs), addNs, addAllocs)
			s := summary[f.Name]
			switch {
			case row.Name == f.Ratekit.Name && row.Allowance == benchmarks.BenchAllowance:
				s[0] = a
			case row.Middleware.Name == f.Ratekit.Name && row.Allowance == benchmarks.SmallCountsAllowance:
				s[1] = a
			case row.Name == f.Peer.Name:
				s[2] = a
			}
			summary[f.Name] = s
		}
	}
	fmt.Fprintln(w, "\nratekit against the peer (ratio of the added times; below 1: ratekit adds less), on the peer's quota and with counts < 4096:")
	fmt.Fprintln(w)
	for _, f := range benchmarks.Frameworks {
		s := summary[f.Name]
		fmt.Fprintf(w, "- %s: ratekit adds %.0f ns and %s allocs (counts < 4096: %.0f ns, %s), %s adds %.0f ns and %s allocs (time ratios %.2f, %.2f)\n",
			f.Name, s[0].ns, trim(s[0].allocs), s[1].ns, trim(s[1].allocs), f.Peer.Name, s[2].ns, trim(s[2].allocs), s[0].ns/s[2].ns, s[1].ns/s[2].ns)
	}
	fmt.Fprintln(w, "\nSetups:")
	fmt.Fprintln(w)
	for _, f := range benchmarks.Frameworks {
		fmt.Fprintf(w, "- %s (%s): alone, %s; ratekit (%s), %s; %s (%s), %s\n", f.Name, f.Module, f.Alone.Setup,
			f.Ratekit.Module, f.Ratekit.Setup, f.Peer.Name, f.Peer.Module, f.Peer.Setup)
	}
}

func describe(a benchmarks.Allowance) string {
	return fmt.Sprintf("%d requests per %s", a.Count, a.Window)
}

// trim formats a count of allocations: whole when it is one.
func trim(a float64) string {
	if r := math.Round(a); math.Abs(a-r) < 0.005 {
		return fmt.Sprintf("%d", int64(r))
	}
	return fmt.Sprintf("%.2f", a)
}

func signed(a float64) string {
	s := trim(a)
	if a >= -0.005 {
		s = "+" + s
	}
	return s
}
