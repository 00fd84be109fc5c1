// Command hybrid measures what the hybrid Redis store (hybrid.New, package
// redisstore/hybrid) trades against the exact one (redisstore.New): how
// many requests beyond the limit it admits, against how many Redis calls
// it saves, and what a decision costs in latency.
//
//	go run ./benchmarks/cmd/hybrid                      # 60 s: one window of each mode
//	go run ./benchmarks/cmd/hybrid -duration 120s -algorithms sliding-window-counter
//
// Several server instances (-instances, each a store on a go-redis client
// of its own, in this one process) share one limit (-limit per -period, a
// minute unless told) on one client key, under a steady load of -load times the limit, spread
// evenly over the instances and paced evenly in each (one Take per
// request), for -duration. Every mode (the exact store, and the hybrid
// store at each sync interval of -intervals, for each algorithm of
// -algorithms) runs at the same time as the others, against a private
// redis-server of its own (started on a free port of 127.0.0.1 and killed
// at exit; a Redis the command did not start is never touched), and every
// store takes its time from a clock shifted so that the run starts on a
// window boundary: a 60 s run is one whole fixed window.
//
// It prints a Markdown table, one row per mode, exact first:
//
//   - over-admission: for a fixed window, what was admitted beyond the
//     limit in each window, as a percentage of the limit; for a sliding
//     window counter, (admitted − exact's admitted) ÷ exact's admitted, in
//     the same run (in the first window, whose previous window is empty,
//     the counter is a fixed window), and the peak: the most the
//     counter's estimate over all instances went over the limit in the
//     windows after the first, as a share of the limit (0 or less: no
//     admission that the counter would have refused);
//   - script calls per request: FCALL, EVALSHA and EVAL calls in Redis
//     (INFO commandstats) during the run, divided by the requests; Redis
//     commands per request counts the commands inside the scripts too
//     (total_commands_processed);
//   - fewer calls: exact's script calls per request ÷ the mode's;
//   - the 50th and 99th percentiles of the latency of Take, and its
//     maximum (a hybrid Take that waits longer than the store's timeout
//     for a sync is decided locally, as when Redis is away).
//
// redis-server must be on PATH, or given with -redis-server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/hybrid"
)

// config is what every mode of a run shares.
type config struct {
	duration  time.Duration
	limit     int           // requests per period
	period    time.Duration // the limit's window: a minute (shorter in tests)
	load      float64       // the request rate, as a multiple of the limit's
	instances int
	bin       string // redis-server
}

// rate returns the requests per second of all instances together.
func (c config) rate() float64 { return c.load * float64(c.limit) / c.period.Seconds() }

// tick returns the time between two requests of one instance.
func (c config) tick() time.Duration {
	return time.Duration(float64(time.Second) * float64(c.instances) / c.rate())
}

// windows returns the windows a run covers, the last one maybe in part.
func (c config) windows() int { return int((c.duration + c.period - 1) / c.period) }

// A mode is one store under test: exact, or hybrid with a sync interval.
type mode struct {
	algorithm core.Algorithm
	interval  time.Duration // 0: the exact store
}

func (m mode) store() string {
	if m.interval == 0 {
		return "exact"
	}
	return "hybrid, sync " + m.interval.String()
}

// result is what one mode measured.
type result struct {
	mode      mode
	requests  int64
	admitted  int64
	errors    int64           // Takes that returned an error (admitted: fail open)
	perWindow []int64         // admitted in each window of the run, and after it if any came late
	scripts   int64           // script runs in Redis: FCALL, EVALSHA, EVAL
	commands  int64           // commands Redis processed, those in scripts included
	latency   []time.Duration // of every Take, sorted
	// peak is, for a sliding window counter, the most the counter's
	// estimate went over the limit in the run's windows after the first,
	// in requests (see peakEstimate); 0 for a fixed window.
	peak float64
}

func (r result) perRequest(n int64) float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(n) / float64(r.requests)
}

func (r result) percentile(p float64) time.Duration {
	if len(r.latency) == 0 {
		return 0
	}
	i := int(float64(len(r.latency))*p+0.999999) - 1 // nearest rank
	return r.latency[min(max(i, 0), len(r.latency)-1)]
}

func main() {
	duration := flag.Duration("duration", time.Minute, "how long the load runs (a minute is one window of the limit)")
	intervals := flag.String("intervals", "100ms,250ms,500ms,1s,2s", "comma-separated sync intervals of the hybrid store")
	algorithms := flag.String("algorithms", "fixed-window,sliding-window-counter", "comma-separated algorithms")
	limit := flag.Int("limit", 6000, "the limit, requests per -period, shared by the instances")
	period := flag.Duration("period", time.Minute, "the limit's window")
	load := flag.Float64("load", 2.0, "the request rate, as a multiple of the limit")
	instances := flag.Int("instances", 4, "server instances sharing the limit, each with its own store and client")
	bin := flag.String("redis-server", "", "path of redis-server (default: from PATH)")
	flag.Parse()

	cfg := config{duration: *duration, limit: *limit, period: *period, load: *load, instances: *instances, bin: *bin}
	modes, err := parseModes(*algorithms, *intervals)
	if err != nil {
		fail(err)
	}
	if cfg.bin == "" {
		if cfg.bin, err = exec.LookPath("redis-server"); err != nil {
			fail(errors.New("redis-server not found on PATH; install it or pass -redis-server"))
		}
	}
	if err := cfg.check(); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := runAll(ctx, cfg, modes)
	if err == nil && ctx.Err() != nil {
		err = errors.New("interrupted")
	}
	if err != nil {
		stop()
		fail(err)
	}
	printTable(os.Stdout, cfg, results)
	fmt.Printf("\nCommand: `go run ./benchmarks/cmd/hybrid%s`. Machine: %d CPUs (%s/%s), %s, redis-server %s.\n",
		commandArgs(os.Args[1:]), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), redisVersion(cfg.bin))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hybrid:", err)
	os.Exit(1)
}

func (c config) check() error {
	switch {
	case c.duration <= 0:
		return fmt.Errorf("-duration %s must be positive", c.duration)
	case c.limit <= 0:
		return fmt.Errorf("-limit %d must be positive", c.limit)
	case c.load <= 0:
		return fmt.Errorf("-load %g must be positive", c.load)
	case c.instances <= 0:
		return fmt.Errorf("-instances %d must be positive", c.instances)
	case c.tick() <= 0 || c.duration < c.tick():
		return errors.New("the load is too light to send one request per instance in -duration, or too heavy to pace")
	}
	return nil
}

// parseModes returns, for each algorithm, the exact store then the hybrid
// store at each interval.
func parseModes(algorithms, intervals string) ([]mode, error) {
	var ivs []time.Duration
	for _, s := range strings.Split(intervals, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-intervals: %q is not a positive duration", s)
		}
		ivs = append(ivs, d)
	}
	var modes []mode
	for _, s := range strings.Split(algorithms, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := core.ParseAlgorithm(s)
		if err != nil {
			return nil, err
		}
		if a != core.FixedWindow && a != core.SlidingWindowCounter {
			return nil, fmt.Errorf("-algorithms: the hybrid store runs fixed-window and sliding-window-counter, not %s", a)
		}
		modes = append(modes, mode{algorithm: a})
		for _, d := range ivs {
			modes = append(modes, mode{algorithm: a, interval: d})
		}
	}
	if len(modes) == 0 {
		return nil, errors.New("-algorithms: none given")
	}
	return modes, nil
}

// runAll starts a redis-server for each mode and runs the modes side by
// side, from one start; the results are in the order of modes.
func runAll(ctx context.Context, cfg config, modes []mode) ([]result, error) {
	servers := make([]*redisServer, len(modes))
	defer func() {
		for _, s := range servers {
			if s != nil {
				s.stop()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, len(modes))
	for i := range modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = startRedis(ctx, cfg.bin)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Far enough ahead for every mode to set up its stores.
	start := time.Now().Add(time.Second)
	results := make([]result, len(modes))
	for i, m := range modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = runMode(ctx, cfg, m, servers[i].addr, start)
		}()
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// A redisServer is a redis-server process that this command started.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the process has exited
}

// startRedis starts a redis-server on a free port of 127.0.0.1, without
// persistence, and returns once it answers PING.
func startRedis(ctx context.Context, bin string) (*redisServer, error) {
	var errs []error
	for range 5 { // another process may take the free port first
		s, err := launchRedis(ctx, bin)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("starting redis-server: %w", errors.Join(errs...))
}

func launchRedis(ctx context.Context, bin string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	if err := l.Close(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ratekit-hybrid-redis-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &redisServer{addr: "127.0.0.1:" + port, dir: dir, done: make(chan struct{}),
		cmd: exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)}
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	err = s.cmd.Start()
	_ = logFile.Close() // the child has its own
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server on port %s exited: %s", port, lastLines(string(log), 5))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on port %s did not answer PING: %v", port, err)
		}
	}
}

// stop kills the server, by its process ID, and removes its directory.
func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	_ = os.RemoveAll(s.dir)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}

// sample is one request.
type sample struct {
	window  int   // from the start of the run
	done    int64 // when Take returned, on the stores' clock, from the run's first boundary
	allowed bool
	failed  bool
	took    time.Duration
}

// runMode runs one mode against the Redis at addr: it sets up the stores,
// sends the load from start on, and collects what it measured.
func runMode(ctx context.Context, cfg config, m mode, addr string, start time.Time) (result, error) {
	res := result{mode: m}
	// The stores' clock reads the window boundary at start.
	period := cfg.period.Nanoseconds()
	boundary := start.UnixNano() - ((start.UnixNano()%period)+period)%period
	offset := time.Duration(boundary - start.UnixNano())
	clock := func() time.Time { return time.Now().Add(offset) }

	limit := core.Limit{Name: "shared", Algorithm: m.algorithm, Rate: core.Rate{Count: cfg.limit, Period: cfg.period}}
	lims := make([]*core.Limiter, cfg.instances)
	var hybrids []*hybrid.Store
	closeHybrids := func() {
		for _, h := range hybrids {
			_ = h.Close()
		}
		hybrids = nil
	}
	defer closeHybrids()
	for i := range lims {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		var store core.Store
		if m.interval == 0 {
			s, err := redisstore.New(rdb, redisstore.WithClock(clock))
			if err != nil {
				return res, err
			}
			store = s
		} else {
			h, err := hybrid.New(rdb, m.interval, hybrid.WithClock(clock))
			if err != nil {
				return res, err
			}
			hybrids = append(hybrids, h)
			store = h
		}
		lim, err := core.NewLimiter(limit, core.WithStore(store))
		if err != nil {
			return res, err
		}
		lims[i] = lim
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	before, err := redisStats(ctx, admin)
	if err != nil {
		return res, err
	}
	if time.Now().After(start) {
		return res, fmt.Errorf("%s %s: setting up took past the start", m.algorithm, m.store())
	}

	// The window a request was decided in, from the store's clock read
	// before its Take. A fixed window's decision says when its window
	// ends, which places it whatever the delay between that read and the
	// store's own: a request sent late, past the run's last boundary,
	// counts in the window after it, not in the last of the run.
	window := func(before time.Time, d core.Decision) int {
		at := before.UnixNano() - boundary
		if m.algorithm == core.FixedWindow && d.ResetAfter > 0 {
			return int(math.Round(float64(at+d.ResetAfter.Nanoseconds())/float64(period))) - 1
		}
		return int(at / period)
	}
	samples := sendLoad(ctx, cfg, lims, start, window, clock, boundary)

	closeHybrids() // their last sync gives back unused leases: part of the cost
	after, err := redisStats(context.Background(), admin)
	if err != nil {
		return res, err
	}
	res.scripts, res.commands = after.scripts-before.scripts, after.commands-before.commands
	res.perWindow = make([]int64, cfg.windows())
	for _, s := range samples {
		res.requests++
		res.latency = append(res.latency, s.took)
		if s.failed {
			res.errors++
		}
		if s.allowed {
			res.admitted++
			w := max(s.window, 0)
			for len(res.perWindow) <= w {
				res.perWindow = append(res.perWindow, 0)
			}
			res.perWindow[w]++
		}
	}
	slices.Sort(res.latency)
	if m.algorithm == core.SlidingWindowCounter {
		res.peak = peakEstimate(cfg, samples, res.perWindow)
	}
	return res, nil
}

// peakEstimate returns the most a sliding window counter's estimate went
// over the limit, in requests, in every window but the first (whose
// previous window is empty): at the time each admitted request's Take
// returned, the previous window's admissions weighted by the part of it
// still in the sliding window, plus this window's admissions returned so
// far. Taking the time a Take returned, not the time it was decided,
// credits the store with the most capacity the counter could have freed:
// a positive peak is an admission that the counter over all servers would
// have refused. (A request is placed in a window by the clock read before
// its Take, as for perWindow.)
func peakEstimate(cfg config, samples []sample, perWindow []int64) float64 {
	period := cfg.period.Nanoseconds()
	byWindow := map[int][]int64{}
	for _, s := range samples {
		if s.allowed && s.window >= 1 {
			byWindow[s.window] = append(byWindow[s.window], s.done)
		}
	}
	peak := math.Inf(-1)
	for w, done := range byWindow {
		if w-1 >= len(perWindow) {
			continue
		}
		slices.Sort(done)
		prev := float64(perWindow[w-1])
		for k, at := range done {
			f := min(max(float64(at-int64(w)*period)/float64(period), 0), 1)
			peak = max(peak, prev*(1-f)+float64(k+1)-float64(cfg.limit))
		}
	}
	if math.IsInf(peak, -1) {
		return 0
	}
	return peak
}

// sendLoad sends each instance's requests on its own even schedule, from
// start, the instances staggered so that the whole load is even too; every
// request is a Take of its own goroutine, so a slow one holds up none
// behind it. It returns the requests sent, once all are answered.
func sendLoad(ctx context.Context, cfg config, lims []*core.Limiter, start time.Time, window func(before time.Time, d core.Decision) int, clock func() time.Time, boundary int64) []sample {
	tick := cfg.tick()
	n := int(cfg.duration / tick) // per instance
	all := make([][]sample, len(lims))
	var wg sync.WaitGroup
	for k, lim := range lims {
		all[k] = make([]sample, n)
		first := start.Add(time.Duration(k) * tick / time.Duration(len(lims)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var takes sync.WaitGroup
			defer takes.Wait()
			t := time.NewTimer(time.Until(first))
			defer t.Stop()
			for i := range n {
				select {
				case <-ctx.Done():
					all[k] = all[k][:i]
					return
				case <-t.C:
				}
				s := &all[k][i]
				takes.Add(1)
				go func() {
					defer takes.Done()
					before, begin := clock(), time.Now()
					d, err := lim.Take(context.Background(), "client", 1)
					s.took = time.Since(begin)
					s.done = clock().UnixNano() - boundary
					s.window = window(before, d)
					s.allowed, s.failed = d.Allowed, err != nil
				}()
				t.Reset(time.Until(first.Add(time.Duration(i+1) * tick)))
			}
		}()
	}
	wg.Wait()
	return slices.Concat(all...)
}

// stats are counters of INFO.
type stats struct {
	scripts  int64 // calls of FCALL, FCALL_RO, EVALSHA, EVAL
	commands int64 // total_commands_processed
}

func redisStats(ctx context.Context, rdb *redis.Client) (stats, error) {
	info, err := rdb.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return stats{}, err
	}
	var s stats
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			s.commands, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		switch name {
		case "cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval":
			calls, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			s.scripts += n
		}
	}
	return s, nil
}

// printTable writes the results as a Markdown table, each algorithm's
// exact store first.
func printTable(w io.Writer, cfg config, results []result) {
	windows := cfg.windows()
	fmt.Fprintf(w, "%d instances share a limit of %d per %s on one key; load %gx the limit (%.0f requests/s, %.0f/s per instance, evenly paced) for %s from a window boundary (%d window%s); every mode on a redis-server of its own, all side by side.\n\n",
		cfg.instances, cfg.limit, cfg.period, cfg.load, cfg.rate(), cfg.rate()/float64(cfg.instances), cfg.duration, windows, plural(windows))
	withErrors := slices.ContainsFunc(results, func(r result) bool { return r.errors > 0 })
	head := "| algorithm | store | requests | admitted | over-admission | script calls/request | Redis commands/request | fewer calls than exact | Take p50 | Take p99 | Take max |"
	rule := "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
	if withErrors {
		head, rule = head+" errors |", rule+"--:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range results {
		exact := r
		for _, e := range results {
			if e.mode.algorithm == r.mode.algorithm && e.mode.interval == 0 {
				exact = e
				break
			}
		}
		fewer := "—"
		if s := r.perRequest(r.scripts); s > 0 && exact.mode.interval == 0 {
			fewer = fmt.Sprintf("%.1f×", exact.perRequest(exact.scripts)/s)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %.3f | %.2f | %s | %s | %s | %s |",
			r.mode.algorithm, r.mode.store(), r.requests, r.admitted, overAdmission(cfg, r, exact),
			r.perRequest(r.scripts), r.perRequest(r.commands), fewer,
			latency(r.percentile(0.50)), latency(r.percentile(0.99)), latency(r.percentile(1)))
		if withErrors {
			fmt.Fprintf(w, " %d |", r.errors)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nOver-admission: fixed window, admitted beyond the limit in each window, as a share of the limit; sliding window counter, (admitted − exact's admitted) ÷ exact's admitted, and in brackets the peak: the most the counter's estimate over all servers (the previous window's admissions, weighted, plus this window's so far, at the time each Take returned) went over the limit in the windows after the first, as a share of the limit (at most 0: no admission the counter would have refused). Script calls: FCALL, EVALSHA and EVAL in INFO commandstats; Redis commands: total_commands_processed, the commands inside scripts included. Fewer calls: exact's script calls per request ÷ the mode's. A hybrid Take that waits for a sync longer than the store's timeout (100 ms) is decided locally, as when Redis is away: see the max.\n")
}

// overAdmission describes what r admitted beyond what it should have.
func overAdmission(cfg config, r, exact result) string {
	if r.mode.algorithm == core.SlidingWindowCounter {
		switch {
		case r.mode.interval == 0:
			return "(reference; peak " + peak(cfg, r) + ")"
		case exact.mode.interval != 0 || exact.admitted == 0:
			return "—"
		}
		return fmt.Sprintf("%+.2f%% (peak %s)", 100*float64(r.admitted-exact.admitted)/float64(exact.admitted), peak(cfg, r))
	}
	parts := make([]string, len(r.perWindow))
	for i, n := range r.perWindow {
		parts[i] = fmt.Sprintf("%.2f%%", 100*float64(max(n-int64(cfg.limit), 0))/float64(cfg.limit))
	}
	return strings.Join(parts, " / ")
}

// peak describes r's peak estimate over the limit, as a share of the
// limit.
func peak(cfg config, r result) string {
	return fmt.Sprintf("%+.2f%%", 100*r.peak/float64(cfg.limit))
}

func latency(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// commandArgs returns the command line's arguments as a shell would take
// them, each after a space.
func commandArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t\"'$\\") {
			a = strconv.Quote(a)
		}
		b.WriteString(a)
	}
	return b.String()
}

// redisVersion returns the version redis-server reports, "7.0.15".
func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "(unknown version)"
	}
	_, v, ok := strings.Cut(string(out), "v=")
	if !ok {
		return strings.TrimSpace(string(out))
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}
