// Command rlscompare compares ratekit serve, ratekit's server of Envoy's
// rate limit service, with the reference server envoyproxy/ratelimit, side
// by side in one run, and prints Markdown tables. There are three kinds of
// service: the reference (Redis storage), "ratekit" (ratekit serve -store
// redis: every admission decided in Redis) and "ratekit hybrid" (ratekit
// serve -store hybrid: decided in process on leases from Redis, synced
// every -hybrid-interval, 1s by default). The load runs have a fourth
// kind, "floor (grpc-go, no decision)": a grpc-go server with ratekit
// serve's server options that registers the same RateLimitService and
// answers every call OK without deciding anything. Its CPU per call is
// what grpc-go spends on a call of this service; what a ratekit kind's
// process spends above it is its decision (and its Redis client). The
// command runs it from its own binary, started again with
// RLSCOMPARE_FLOOR_ADDR set to the address to serve on.
//
//   - cases: the behaviour cases of package rlscases (those of the
//     reference's integration tests and ratekit's own), played on every
//     kind, with the differences and, for the listed ones, their
//     reasons; then the reload check;
//   - load: decisions a second and p50/p99 latency under ghz at 1, 16
//     and 128 concurrent streams, on one descriptor value and on 10,000,
//     at a limit nothing reaches, and on one value at a limit nearly
//     every request is over; the kinds' runs alternate, -count rounds,
//     and the tables show the median and the spread, the CPU time per
//     decision of the service, of its redis-server and of ghz, each
//     other kind's ratios to the reference, and each ratekit kind's CPU
//     per decision above the floor's;
//   - burst: two instances of each kind sharing one Redis receive ten
//     times their limit of 100 a second for two seconds, started half a
//     second before a window boundary; the admitted requests are counted
//     per window and in the busiest second; the reference also with
//     REDIS_PIPELINE_WINDOW and with LOCAL_CACHE_SIZE_IN_BYTES, and
//     ratekit (-store redis) also with the burst rule counted by a
//     sliding window log (algorithm: sliding-window-log), which admits
//     the limit in any second, not per fixed window. The hybrid store
//     has no log variant: it refuses the algorithm.
//
// Run it from the repository (about 5 minutes on 2 cores with the
// defaults):
//
//	go run ./benchmarks/cmd/rlscompare
//	go run ./benchmarks/cmd/rlscompare -only reference,hybrid
//	go run ./benchmarks/cmd/rlscompare -skip load,burst -v
//	go run ./benchmarks/cmd/rlscompare -skip cases,burst -only reference,ratekit,floor
//
// Each service kind gets its own redis-server on a free port, started and
// stopped by the command; no other Redis is touched. The reference
// (service_cmd) and ghz are installed at pinned versions into -tools
// (default: ratekit-tools next to the Go build cache) when missing there;
// ratekit is built from the workspace (./cmd/ratekit) unless -ratekit
// names a binary. With -only reference, ratekit is neither built nor run.
// The floor runs in the load runs only, and only when -only names it or
// is not given.
// The load runs' CPU times are read from /proc (Linux); elsewhere those
// columns read n/a.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/benchmarks/rlscases"
	"github.com/ratekit/ratekit/benchmarks/rlscases/rlsproc"
)

// Service kinds, as -only names them.
const (
	kindReference = "reference"
	kindRatekit   = "ratekit"
	kindHybrid    = "hybrid"
	// kindFloor is the load runs' grpc-go server that decides nothing
	// (floor.go); it is no service and takes no part in the cases and the
	// burst.
	kindFloor = "floor"
)

// allKinds lists the kinds in the order they run and are shown.
var allKinds = []string{kindReference, kindRatekit, kindHybrid, kindFloor}

// kindLabel returns the name of a kind in the tables.
func kindLabel(kind string) string {
	switch kind {
	case kindHybrid:
		return "ratekit hybrid"
	case kindFloor:
		return "floor (grpc-go, no decision)"
	}
	return kind
}

// kindStore returns the -store of ratekit serve for a ratekit kind.
func kindStore(kind string) string {
	if kind == kindHybrid {
		return "hybrid"
	}
	return "redis"
}

// options are the command's flags.
type options struct {
	only         []string // the kinds to run, in allKinds order
	tools        string
	referenceBin string
	ghzBin       string
	ratekitBin   string
	refStats     string
	count        int
	duration     time.Duration
	streams      []int
	keys         []int
	connections  int
	rejected     bool
	burstLimit   int
	burstFactor  int
	burstStreams int
	skip         map[string]bool
	keep         bool
	verbose      bool
}

// signalContext returns a context that ends on an interrupt or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func main() {
	ctx, stop := signalContext()
	if addr, ok := os.LookupEnv(floorAddrEnv); ok {
		// Started again by a comparison, to serve the floor.
		err := runFloor(ctx, addr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlscompare:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "rlscompare:", err)
		os.Exit(2)
	}
	err = run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlscompare:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("rlscompare", flag.ContinueOnError)
	only := fs.String("only", "", "comma-separated kinds to run: reference, ratekit (-store redis), hybrid (-store hybrid), floor (grpc-go deciding nothing, load runs only) (default: all four)")
	fs.StringVar(&o.tools, "tools", "", "directory of service_cmd and ghz, installed there when missing (default: ratekit-tools next to the Go build cache)")
	fs.StringVar(&o.referenceBin, "reference", "", "path of the reference's service_cmd (default: from -tools)")
	fs.StringVar(&o.ghzBin, "ghz", "", "path of ghz (default: from -tools)")
	fs.StringVar(&o.ratekitBin, "ratekit", "", "path of the ratekit command (default: built from the workspace)")
	fs.StringVar(&o.refStats, "reference-stats", rlsproc.StatsPrometheus, "the reference's stats sink: prometheus (as ratekit's /metrics), none, or log (one log line a request: what statsd off alone gives)")
	fs.IntVar(&o.count, "count", 3, "rounds of the load runs; the tables show the median")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of one load run")
	streams := fs.String("streams", "1,16,128", "concurrent streams (ghz -c) of the load runs")
	keys := fs.String("keys", "1,10000", "distinct descriptor values of the load runs")
	fs.IntVar(&o.connections, "connections", 1, "gRPC connections ghz spreads the streams over")
	fs.BoolVar(&o.rejected, "rejected", true, "also a load run (16 streams, one value) where nearly every request is over the limit")
	fs.IntVar(&o.burstLimit, "burst-limit", 100, "burst test: the limit, a second")
	fs.IntVar(&o.burstFactor, "burst-factor", 10, "burst test: the offered rate, in multiples of the limit")
	fs.IntVar(&o.burstStreams, "burst-streams", 32, "burst test: concurrent streams, split over the two instances")
	skip := fs.String("skip", "", "comma-separated parts to skip: cases, load, burst")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (logs, configuration) and print its path")
	fs.BoolVar(&o.verbose, "v", false, "report progress on standard error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch o.refStats {
	case rlsproc.StatsPrometheus, rlsproc.StatsNone, rlsproc.StatsLog:
	default:
		return o, fmt.Errorf("-reference-stats %q: want prometheus, none or log", o.refStats)
	}
	var err error
	if o.only, err = parseKinds(*only); err != nil {
		return o, fmt.Errorf("-only: %w", err)
	}
	if o.streams, err = parseInts(*streams); err != nil {
		return o, fmt.Errorf("-streams: %w", err)
	}
	if o.keys, err = parseInts(*keys); err != nil {
		return o, fmt.Errorf("-keys: %w", err)
	}
	o.skip = map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "cases", "load", "burst":
			o.skip[s] = true
		default:
			return o, fmt.Errorf("-skip: unknown part %q (want cases, load, burst)", s)
		}
	}
	switch {
	case o.count < 1:
		return o, errors.New("-count must be at least 1")
	case o.duration <= 0:
		return o, errors.New("-duration must be positive")
	case o.connections < 1:
		return o, errors.New("-connections must be at least 1")
	case o.burstLimit < 1 || o.burstFactor < 1 || o.burstStreams < 2:
		return o, errors.New("-burst-limit and -burst-factor must be at least 1, -burst-streams at least 2")
	}
	return o, nil
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseKinds reads -only: a comma-separated list of kinds, or nothing
// for all of them. It returns them in allKinds order.
func parseKinds(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return slices.Clone(allKinds), nil
	}
	want := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allKinds, f) {
			return nil, fmt.Errorf("unknown kind %q (want reference, ratekit, hybrid, floor)", f)
		}
		want[f] = true
	}
	var out []string
	for _, k := range allKinds {
		if want[k] {
			out = append(out, k)
		}
	}
	return out, nil
}

// kinds returns the service kinds to run: those of -only but the floor,
// which is no service.
func (o options) kinds() []string {
	return slices.DeleteFunc(slices.Clone(o.only), func(k string) bool { return k == kindFloor })
}

// runsFloor reports whether the floor is to run: a kind of -only, and the
// load runs not skipped.
func (o options) runsFloor() bool {
	return o.runs(kindFloor) && !o.skip["load"]
}

// runs reports whether the kind is to run.
func (o options) runs(kind string) bool {
	return slices.Contains(o.only, kind)
}

// runsRatekit reports whether a ratekit kind is to run.
func (o options) runsRatekit() bool {
	return o.runs(kindRatekit) || o.runs(kindHybrid)
}

// kind is one kind of service with its Redis and its main instance, which
// serves the cases and the load runs; or the floor, with neither.
type kind struct {
	name      string // as -only names it
	label     string // as the tables name it
	redis     *rlsproc.Redis
	configDir string
	root      string // the reference's runtime root
	bin       string
	main      *rlsproc.Service
	floor     *floorProc // the floor's process, for kindFloor only
	conn      *grpc.ClientConn
}

// grpcAddr returns the address the load runs call.
func (k *kind) grpcAddr() string {
	if k.floor != nil {
		return k.floor.addr
	}
	return k.main.GRPCAddr
}

// pids returns the process IDs of the service and of its redis-server,
// 0 for the floor's, which has none.
func (k *kind) pids() (service, redis int) {
	if k.floor != nil {
		return k.floor.pid(), 0
	}
	return k.main.Pid(), k.redis.Pid()
}

// command returns the command line of the main instance, for the report.
func (k *kind) command() string {
	if k.floor != nil {
		return k.floor.command()
	}
	return k.main.Command()
}

// harness holds what one run of the command started.
type harness struct {
	o     options
	dir   string
	logf  func(string, ...any)
	kinds []*kind // the services: all but the floor
	floor *kind   // the floor, if it runs
	ghz   string
	procs []*rlsproc.Proc // everything to stop at the end, in order
}

// loadKinds returns the kinds of the load runs: the services, then the
// floor.
func (h *harness) loadKinds() []*kind {
	if h.floor == nil {
		return h.kinds
	}
	return append(slices.Clone(h.kinds), h.floor)
}

// run runs the comparison and writes the report to w.
func run(ctx context.Context, o options, w io.Writer) (err error) {
	began := time.Now()
	h := &harness{o: o, logf: func(string, ...any) {}}
	if o.verbose {
		h.logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "rlscompare: "+format+"\n", args...)
		}
	}
	h.dir, err = os.MkdirTemp("", "rlscompare-")
	if err != nil {
		return err
	}
	defer func() {
		h.stopAll()
		if o.keep || err != nil {
			fmt.Fprintf(os.Stderr, "rlscompare: work directory (logs): %s\n", h.dir)
			return
		}
		_ = os.RemoveAll(h.dir)
	}()

	if err := h.tools(); err != nil {
		return err
	}
	loadBefore := loadAverage()
	for _, name := range o.kinds() {
		k, err := h.startKind(ctx, name)
		if err != nil {
			return err
		}
		h.kinds = append(h.kinds, k)
	}
	if o.runsFloor() {
		if h.floor, err = h.startFloorKind(ctx); err != nil {
			return err
		}
	}
	h.header(w)

	if !o.skip["cases"] && len(h.kinds) > 0 {
		h.logf("cases")
		if err := h.cases(ctx, w); err != nil {
			return err
		}
	}
	if !o.skip["load"] {
		if err := h.load(ctx, w); err != nil {
			return err
		}
	}
	if !o.skip["burst"] && len(h.kinds) > 0 {
		if err := h.burst(ctx, w); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nLoad average before: %s; after: %s. Total time: %s.\n", loadBefore, loadAverage(), time.Since(began).Round(100*time.Millisecond))
	return ctx.Err()
}

// tools finds or installs the binaries.
func (h *harness) tools() error {
	dir := h.o.tools
	if dir == "" && (h.o.referenceBin == "" && h.o.runs(kindReference) || h.o.ghzBin == "" && !h.o.skip["load"]) {
		var err error
		if dir, err = defaultToolsDir(); err != nil {
			return err
		}
	}
	refBin, rkBin := h.o.referenceBin, h.o.ratekitBin
	var err error
	if h.o.runs(kindReference) && refBin == "" {
		if refBin, err = referenceTool.ensure(dir, h.logf); err != nil {
			return err
		}
	}
	if !h.o.skip["load"] {
		h.ghz = h.o.ghzBin
		if h.ghz == "" {
			if h.ghz, err = ghzTool.ensure(dir, h.logf); err != nil {
				return err
			}
		}
	}
	if h.o.runsRatekit() && rkBin == "" {
		if rkBin, err = buildRatekit(filepath.Join(h.dir, "bin"), h.logf); err != nil {
			return err
		}
	}
	h.o.referenceBin, h.o.ratekitBin = refBin, rkBin
	return nil
}

// startKind starts a kind's Redis and main instance and writes its
// configuration.
func (h *harness) startKind(ctx context.Context, name string) (*kind, error) {
	k := &kind{name: name, label: kindLabel(name)}
	dir := filepath.Join(h.dir, name)
	redis, err := rlsproc.StartRedis(ctx, filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	h.procs = append(h.procs, redis.Proc)
	k.redis = redis
	switch name {
	case kindReference:
		k.bin = h.o.referenceBin
		k.root = filepath.Join(dir, "runtime")
		k.configDir = rlsproc.ReferenceConfigDir(k.root)
	default:
		k.bin = h.o.ratekitBin
		k.configDir = filepath.Join(dir, "config")
	}
	if err := rlscases.WriteConfig(k.configDir); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(k.configDir, "bench.yaml"), []byte(benchConfig(h.o.burstLimit, "")), 0o644); err != nil {
		return nil, err
	}
	k.main, err = h.startInstance(ctx, k, name, nil)
	if err != nil {
		return nil, err
	}
	k.conn, err = dial(k.main.GRPCAddr)
	if err != nil {
		return nil, err
	}
	return k, nil
}

// startInstance starts one instance of a kind, with more environment for
// the reference (env) if any.
func (h *harness) startInstance(ctx context.Context, k *kind, name string, env []string) (*rlsproc.Service, error) {
	logDir := filepath.Join(h.dir, k.name, "logs")
	var s *rlsproc.Service
	var err error
	switch k.name {
	case kindReference:
		s, err = rlsproc.StartReference(ctx, rlsproc.ReferenceOptions{
			Bin: k.bin, Name: name, Root: k.root, LogDir: logDir, RedisAddr: k.redis.Addr, Stats: h.o.refStats, Env: env,
		})
	default:
		s, err = rlsproc.StartRatekit(ctx, rlsproc.RatekitOptions{
			Bin: k.bin, Name: name, ConfigDir: k.configDir, LogDir: logDir, RedisAddr: k.redis.Addr, Store: kindStore(k.name),
		})
	}
	if err != nil {
		return nil, err
	}
	h.procs = append(h.procs, s.Proc)
	h.logf("started %s (pid %d): %s", name, s.Pid(), s.Command())
	return s, nil
}

// stopAll stops every process, the floor and the services first, by
// process ID.
func (h *harness) stopAll() {
	for _, k := range h.loadKinds() {
		if k.conn != nil {
			_ = k.conn.Close()
		}
	}
	if h.floor != nil {
		if err := h.floor.floor.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "rlscompare:", err)
		}
		h.floor = nil
	}
	for _, p := range slices.Backward(h.procs) {
		if err := p.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "rlscompare:", err)
		}
	}
	h.procs = nil
}

// dial opens a plaintext gRPC connection.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// benchConfig returns the configuration of the load and burst runs:
// domain "bench" with a limit no run reaches (hi), one nearly every
// request of a load run is over (lo), and the burst test's (burst),
// counted by algorithm, a ratekit extension of the rules file, when it is
// not "" (the fixed window otherwise, which the reference reads too).
func benchConfig(burstLimit int, algorithm string) string {
	burst := fmt.Sprintf("requests_per_unit: %d, unit: second", burstLimit)
	if algorithm != "" {
		burst += ", algorithm: " + algorithm
	}
	return fmt.Sprintf(`# Written by rlscompare: the load and burst runs' limits.
domain: bench
descriptors:
  - key: hi
    rate_limit: {requests_per_unit: 1000000000, unit: minute}
  - key: lo
    rate_limit: {requests_per_unit: 100, unit: minute}
  - key: burst
    rate_limit: {%s}
`, burst)
}

// stopProc stops a process started for one part and drops it from the
// list of processes to stop at the end.
func (h *harness) stopProc(p *rlsproc.Proc) error {
	h.procs = slices.DeleteFunc(h.procs, func(q *rlsproc.Proc) bool { return q == p })
	return p.Stop()
}
