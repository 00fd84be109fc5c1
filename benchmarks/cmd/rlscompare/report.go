package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// header prints the command line and the machine facts.
func (h *harness) header(w io.Writer) {
	fmt.Fprintln(w, "# ratekit serve vs envoyproxy/ratelimit")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Command: `go run ./benchmarks/cmd/rlscompare %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintln(w, "| fact | value |")
	fmt.Fprintln(w, "|---|---|")
	row := func(k, v string) { fmt.Fprintf(w, "| %s | %s |\n", k, strings.ReplaceAll(v, "|", "/")) }
	row("date", time.Now().UTC().Format(time.RFC3339))
	row("CPU", fmt.Sprintf("%s; %d logical cores; GOMAXPROCS %d", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0)))
	row("kernel", runtime.GOOS+" "+readTrim("/proc/sys/kernel/osrelease"))
	row("Go", commandOutput("go", "version"))
	row("Redis", commandOutput("redis-server", "--version"))
	for _, k := range h.loadKinds() {
		row(k.label, describeBinary(k.bin))
		row(k.label+" instance", "`"+k.command()+"`")
	}
	if h.ghz != "" {
		row("ghz", describeBinary(h.ghz))
	}
	row("placement", "client (ghz or this command), services and redis-servers share all cores, no affinity")
	fmt.Fprintln(w)
}

// cpuModel returns the CPU's model name from /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// readTrim returns a file's content without surrounding space, or
// "unknown".
func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// commandOutput returns the first line of a command's output.
func commandOutput(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// median returns the median of xs (the mean of the middle two for an
// even count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread returns (max-min)/median in percent, or 0.
func spread(xs []float64) float64 {
	m := median(xs)
	if len(xs) < 2 || m == 0 {
		return 0
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return (hi - lo) / m * 100
}

// formatRate formats decisions a second.
func formatRate(x float64) string {
	return fmt.Sprintf("%.0f", x)
}

// formatMillis formats a duration in milliseconds with 2 decimals.
func formatMillis(d float64) string {
	return fmt.Sprintf("%.2f", d/float64(time.Millisecond))
}
