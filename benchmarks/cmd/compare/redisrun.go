package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/ratekit/ratekit/benchmarks"
)

// With -redis-run the command runs BenchmarkRedis itself, in two setups
// per round, and prints both:
//
//	go run ./benchmarks/cmd/compare -redis-run -redis-benchtime 3000x -count 3
//
//	shared  the benchmark binary and its private redis-server both free
//	        to run on every CPU, as on a developer's machine;
//	pinned  redis-server on CPU 1 (started under taskset -c 1), the
//	        benchmark client on CPU 0 (run under taskset -c 0, with
//	        GOMAXPROCS 1, which the Go runtime derives from that mask):
//	        Redis on a core of its own, as in production.
//
// The command builds the package's test binary once (go test -c) and
// runs it for each setup; for the pinned one, a directory put first on
// PATH holds a redis-server that execs the real one under taskset -c 1,
// so that package redistest, which starts the server, starts it there.
// Each run prints a redis-placement line (the CPUs each process may run
// on, and GOMAXPROCS), which is checked, and the load average before and
// after is reported with the tables.

// A redisSetup is one way to place the client and Redis on the CPUs.
type redisSetup struct {
	name  string
	about string
	// wrap returns the command that runs the test binary bin with args,
	// given a directory for the setup's files.
	wrap func(dir, bin string, args []string) (*exec.Cmd, error)
	// want is the redis-placement line's fields that the setup requires.
	want []string
}

var redisSetups = []redisSetup{
	{
		name:  "shared",
		about: "client and redis-server share both cores (no affinity)",
		wrap: func(dir, bin string, args []string) (*exec.Cmd, error) {
			return exec.Command(bin, args...), nil
		},
	},
	{
		name:  "pinned",
		about: "redis-server under taskset -c 1, the benchmark client under taskset -c 0 with GOMAXPROCS 1",
		wrap: func(dir, bin string, args []string) (*exec.Cmd, error) {
			real, err := exec.LookPath("redis-server")
			if err != nil {
				return nil, err
			}
			taskset, err := exec.LookPath("taskset")
			if err != nil {
				return nil, fmt.Errorf("the pinned setup needs taskset (util-linux): %w", err)
			}
			real, err = filepath.Abs(real)
			if err != nil {
				return nil, err
			}
			shim := filepath.Join(dir, "pinned")
			if err := os.MkdirAll(shim, 0o755); err != nil {
				return nil, err
			}
			script := fmt.Sprintf("#!/bin/sh\nexec %s -c 1 %s \"$@\"\n", taskset, real)
			if err := os.WriteFile(filepath.Join(shim, "redis-server"), []byte(script), 0o755); err != nil {
				return nil, err
			}
			cmd := exec.Command(taskset, append([]string{"-c", "0", bin}, args...)...)
			cmd.Env = append(os.Environ(), "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"), "GOMAXPROCS=1")
			return cmd, nil
		},
		want: []string{"client-cpus=0", "gomaxprocs=1", "redis-cpus=1"},
	},
}

// redisRun is the output of all the runs of one setup.
type redisRun struct {
	runs   map[redisID][]redisResult
	place  []string // the redis-placement lines
	loads  []string // the load average before and after each run
	failed []string // the runs that failed, left out
}

// runRedis builds the benchmark binary, runs BenchmarkRedis count times
// in every setup, alternating the setups, and prints the tables.
func runRedis(w io.Writer, benchtime string, count int, bench string) error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("the pinned setup needs 2 CPUs, this machine has %d", runtime.NumCPU())
	}
	dir, err := os.MkdirTemp("", "ratekit-redis-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "benchmarks.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "github.com/ratekit/ratekit/benchmarks")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the benchmark binary: %w", err)
	}
	args := []string{"-test.run", "^$", "-test.bench", bench, "-test.benchtime", benchtime}
	var header []string
	out := make([]redisRun, len(redisSetups))
	for round := 1; round <= count; round++ {
		for i, setup := range redisSetups {
			cmd, err := setup.wrap(dir, bin, args)
			if err != nil {
				return fmt.Errorf("setup %s: %w", setup.name, err)
			}
			var stdout bytes.Buffer
			cmd.Stdout = io.MultiWriter(&stdout, os.Stderr)
			cmd.Stderr = os.Stderr
			cmd.Dir = dir
			fmt.Fprintf(os.Stderr, "round %d, %s: %s\n", round, setup.name, strings.Join(cmd.Args, " "))
			before := loadAverage()
			err = cmd.Run()
			out[i].loads = append(out[i].loads, before+" → "+loadAverage())
			if err != nil {
				// A failed run (a benchmark that failed, on a loaded
				// machine) is left out and reported with the tables.
				fmt.Fprintf(os.Stderr, "round %d, setup %s failed: %v\n", round, setup.name, err)
				out[i].failed = append(out[i].failed, fmt.Sprintf("round %d: %v", round, err))
				continue
			}
			runs, h, err := parseRedis(bytes.NewReader(stdout.Bytes()))
			if err != nil {
				return err
			}
			if len(runs) == 0 {
				return fmt.Errorf("round %d, setup %s: no BenchmarkRedis results (is redis-server on PATH?)", round, setup.name)
			}
			header = h
			place := placement(stdout.String())
			for _, f := range setup.want {
				if !slices.Contains(strings.Fields(place), f) {
					return fmt.Errorf("setup %s: placement %q lacks %s", setup.name, place, f)
				}
			}
			out[i].place = append(out[i].place, place)
			if out[i].runs == nil {
				out[i].runs = map[redisID][]redisResult{}
			}
			for id, rs := range runs {
				out[i].runs[id] = append(out[i].runs[id], rs...)
			}
		}
	}

	fmt.Fprintf(w, "Produced by `go run ./benchmarks/cmd/compare -redis-run -redis-benchtime %s -count %d` (%s, %s; BenchmarkRedis, each cell the median of the runs of %d rounds, the setups alternating).\n",
		benchtime, count, runtime.Version(), strings.Join(header, ", "), count)
	fmt.Fprintln(w)
	printRatios(w, out)
	for i, setup := range redisSetups {
		fmt.Fprintf(w, "\n### %s: %s\n\n", setup.name, setup.about)
		fmt.Fprintf(w, "Placement: %s. Load average (1, 5, 15 min) before → after each run: %s.\n\n",
			strings.Join(uniq(out[i].place), "; "), strings.Join(out[i].loads, "; "))
		if len(out[i].failed) > 0 {
			fmt.Fprintf(w, "Runs left out, failed: %s.\n\n", strings.Join(out[i].failed, "; "))
		}
		printRedisTables(w, out[i].runs)
	}
	printRedisSetups(w)
	return nil
}

// printRatios prints, per setup and cell, each ratekit row's decisions
// per second ÷ the best peer's, and its Redis CPU per decision beside
// that of the peer running the same algorithm.
func printRatios(w io.Writer, out []redisRun) {
	fmt.Fprintln(w, "Decisions per second, ratekit ÷ the best peer of the same run (ulule-limiter, go-redis-redis_rate, go-chi-httprate-redis, throttled; the best named in parentheses); above 1: ratekit makes more decisions per second.")
	fmt.Fprintln(w)
	cellHeader(w, "setup | ratekit")
	for i, setup := range redisSetups {
		for _, lib := range benchmarks.RedisLibraries {
			if !isRatekit(lib.Name) {
				continue
			}
			fmt.Fprintf(w, "| %s | %s |", setup.name, lib.Name)
			for _, ks := range redisKeysets {
				for _, g := range redisGoroutines {
					best, bestName := 0.0, ""
					for _, peer := range benchmarks.RedisLibraries {
						if v := medianOf(out[i].runs[redisID{ks, g, peer.Name}], benchmarks.DecisionsPerSecond); !isRatekit(peer.Name) && v > best {
							best, bestName = v, peer.Name
						}
					}
					v := medianOf(out[i].runs[redisID{ks, g, lib.Name}], benchmarks.DecisionsPerSecond)
					if best == 0 || v == 0 {
						fmt.Fprint(w, " – |")
						continue
					}
					fmt.Fprintf(w, " %.2f (%s) |", v/best, shortNames[bestName])
				}
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w, "\nRedis CPU µs per decision (INFO cpu, user + system), ratekit / the peer running the same algorithm (token bucket: go-redis-redis_rate's GCRA; fixed window: ulule-limiter), and in parentheses their ratio; at most 1: ratekit costs Redis no more.")
	fmt.Fprintln(w)
	cellHeader(w, "setup | rows")
	for i, setup := range redisSetups {
		for _, pair := range [][2]string{{"ratekit", "go-redis-redis_rate"}, {"ratekit-fixed-window", "ulule-limiter"}} {
			fmt.Fprintf(w, "| %s | %s / %s |", setup.name, pair[0], pair[1])
			for _, ks := range redisKeysets {
				for _, g := range redisGoroutines {
					ra, rb := out[i].runs[redisID{ks, g, pair[0]}], out[i].runs[redisID{ks, g, pair[1]}]
					if len(ra) == 0 || len(rb) == 0 {
						fmt.Fprint(w, " – |")
						continue
					}
					a, b := medianOf(ra, benchmarks.ServerMicrosPerDecision), medianOf(rb, benchmarks.ServerMicrosPerDecision)
					fmt.Fprintf(w, " %.3g / %.3g (%.2f) |", a, b, a/b)
				}
			}
			fmt.Fprintln(w)
		}
	}
}

// cellHeader prints the header of a table with the given leading
// columns, then one column per cell of BenchmarkRedis.
func cellHeader(w io.Writer, lead string) {
	fmt.Fprintf(w, "| %s |", lead)
	for _, ks := range redisKeysets {
		for _, g := range redisGoroutines {
			fmt.Fprintf(w, " %s, %d |", ks, g)
		}
	}
	fmt.Fprint(w, "\n|---|---|")
	for range len(redisKeysets) * len(redisGoroutines) {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
}

// shortNames are the peers' names in the ratio table.
var shortNames = map[string]string{
	"ulule-limiter":         "ulule",
	"go-redis-redis_rate":   "redis_rate",
	"go-chi-httprate-redis": "httprate-redis",
	"throttled":             "throttled",
}

// placement returns the fields of the redis-placement line of out.
func placement(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "redis-placement: "); ok {
			return strings.TrimSpace(p)
		}
	}
	return ""
}

// loadAverage returns the first three fields of /proc/loadavg, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// uniq returns s without repeated values, in order.
func uniq(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
