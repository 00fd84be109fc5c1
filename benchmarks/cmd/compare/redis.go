package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ratekit/ratekit/benchmarks"
)

// The Redis comparison needs a redis-server of its own, which package
// redistest starts for a test binary, so BenchmarkRedis runs under go
// test and this command only tabulates its output:
//
//	go test ./benchmarks -run '^$' -bench Redis -benchtime 2000x -count 3 | go run ./benchmarks/cmd/compare -redis

// redisResult is one line of BenchmarkRedis output: its metrics by unit.
type redisResult map[string]float64

// redisID names one benchmark of BenchmarkRedis.
type redisID struct {
	keys       string
	goroutines int
	lib        string
}

var redisKeysets = []string{"hot-key", "10k-keys"}

var redisGoroutines = []int{1, 8, 64}

// parseRedis reads go test output and returns the runs of every
// BenchmarkRedis benchmark, and the go test header lines (goos, cpu...).
func parseRedis(r io.Reader) (map[redisID][]redisResult, []string, error) {
	runs := map[redisID][]redisResult{}
	var header []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		for _, h := range []string{"goos:", "goarch:", "cpu:"} {
			if strings.HasPrefix(line, h) && !slices.Contains(header, line) {
				header = append(header, line)
			}
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkRedis/") {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(f[0], "BenchmarkRedis/"), "/")
		if len(parts) != 3 {
			continue
		}
		g, err := strconv.Atoi(strings.TrimPrefix(parts[1], "goroutines-"))
		if err != nil {
			return nil, nil, fmt.Errorf("benchmark %s: %v", f[0], err)
		}
		id := redisID{parts[0], g, libName(parts[2])}
		res := redisResult{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("benchmark %s: value %q: %v", f[0], f[i], err)
			}
			res[f[i+1]] = v
		}
		runs[id] = append(runs[id], res)
	}
	return runs, header, sc.Err()
}

// libName strips the -GOMAXPROCS suffix go test appends to a name.
func libName(s string) string {
	for _, lib := range benchmarks.RedisLibraries {
		if s == lib.Name {
			return s
		}
	}
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			return s[:i]
		}
	}
	return s
}

// medianOf returns the median of unit over runs (0 where absent).
func medianOf(runs []redisResult, unit string) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = r[unit]
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// printRedis prints the BenchmarkRedis results read from r as Markdown.
func printRedis(r io.Reader, w io.Writer) error {
	runs, header, err := parseRedis(r)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("no BenchmarkRedis results in the input")
	}
	fmt.Fprintf(w, "BenchmarkRedis, medians of %d runs (%s).\n", runCount(runs), strings.Join(header, ", "))
	printRedisTables(w, runs)
	printRedisSetups(w)
	return nil
}

// runCount returns the most runs of one benchmark.
func runCount(runs map[redisID][]redisResult) int {
	count := 0
	for _, rs := range runs {
		count = max(count, len(rs))
	}
	return count
}

// isRatekit reports whether lib is one of ratekit's rows, not a peer.
func isRatekit(lib string) bool { return strings.HasPrefix(lib, "ratekit") }

// printRedisTables prints the decisions per second of runs, then the
// costs per decision.
func printRedisTables(w io.Writer, runs map[redisID][]redisResult) {
	fmt.Fprintf(w, "Decisions per second against one private redis-server on loopback, under a quota never exhausted (burst %d, one request back every %s), so all admissions; higher is better; in parentheses ratekit (token bucket) ÷ library.\n",
		benchmarks.FastQuota.Burst, benchmarks.FastQuota.Interval)
	fmt.Fprintln(w)
	fmt.Fprint(w, "| library |")
	for _, ks := range redisKeysets {
		for _, g := range redisGoroutines {
			fmt.Fprintf(w, " %s, %d goroutine%s |", ks, g, plural(g))
		}
	}
	fmt.Fprint(w, "\n|---|")
	for range len(redisKeysets) * len(redisGoroutines) {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	flagged := false
	ratekit := benchmarks.RedisLibraries[0].Name
	for _, lib := range benchmarks.RedisLibraries {
		fmt.Fprintf(w, "| %s |", lib.Name)
		for _, ks := range redisKeysets {
			for _, g := range redisGoroutines {
				rs := runs[redisID{ks, g, lib.Name}]
				if len(rs) == 0 {
					fmt.Fprint(w, " – |")
					continue
				}
				v := medianOf(rs, benchmarks.DecisionsPerSecond)
				cell := fmt.Sprintf("%.0f", v)
				if base := medianOf(runs[redisID{ks, g, ratekit}], benchmarks.DecisionsPerSecond); !isRatekit(lib.Name) && v > 0 {
					cell += fmt.Sprintf(" (%.2f)", base/v)
				}
				if medianOf(rs, benchmarks.DeniedMetric) > 0 || medianOf(rs, benchmarks.ErrorsPerDecision) > 0 {
					cell += " †"
					flagged = true
				}
				fmt.Fprintf(w, " %s |", cell)
			}
		}
		fmt.Fprintln(w)
	}
	if flagged {
		fmt.Fprintln(w, "\n† some decisions failed or were rejected (see the table below): the number is not that of admissions only.")
	}

	fmt.Fprintln(w, "\nPer decision: client allocations and bytes, Redis commands run (scripts' commands included), client round trips")
	fmt.Fprintln(w, "(a command or a pipeline), Redis server CPU time and client process CPU time in microseconds, goroutines the client")
	fmt.Fprintln(w, "created, failed decisions;")
	fmt.Fprintln(w, "each cell gives 1 / 8 / 64 goroutines.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| library | keys | allocs/op | B/op | cmds/decision | roundtrips/decision | Redis CPU µs/decision | client CPU µs/decision | goroutines/decision | errors/op |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, lib := range benchmarks.RedisLibraries {
		for _, ks := range redisKeysets {
			cells := make([]string, 0, 8)
			for _, unit := range []struct {
				name   string
				format string
			}{{"allocs/op", "%.0f"}, {"B/op", "%.0f"}, {benchmarks.CommandsPerDecision, "%.3g"}, {benchmarks.RoundTripsPerDecision, "%.3g"}, {benchmarks.ServerMicrosPerDecision, "%.3g"}, {benchmarks.ClientMicrosPerDecision, "%.3g"}, {benchmarks.GoroutinesPerDecision, "%.2g"}, {benchmarks.ErrorsPerDecision, "%.3g"}} {
				vs := make([]string, 0, len(redisGoroutines))
				for _, g := range redisGoroutines {
					rs := runs[redisID{ks, g, lib.Name}]
					if len(rs) == 0 {
						vs = append(vs, "–")
						continue
					}
					vs = append(vs, fmt.Sprintf(unit.format, medianOf(rs, unit.name)))
				}
				cells = append(cells, strings.Join(vs, " / "))
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", lib.Name, ks, strings.Join(cells, " | "))
		}
	}
}

// printRedisSetups lists how every library is configured.
func printRedisSetups(w io.Writer) {
	fmt.Fprintln(w, "\nSetups (every library on a go-redis client of its own):")
	fmt.Fprintln(w)
	for _, lib := range benchmarks.RedisLibraries {
		fmt.Fprintf(w, "- %s (%s): %s\n", lib.Name, lib.Module, lib.Setup)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
