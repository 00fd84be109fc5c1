package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// rlsMethod is the method ghz calls.
const rlsMethod = "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit"

// warmup is the length of the run that warms each service up before the
// measured runs.
const warmup = time.Second

// loadConfig is one shape of load.
type loadConfig struct {
	streams int
	values  int    // distinct descriptor values, used in turn
	key     string // "hi" (never reached) or "lo" (nearly all over)
}

// limitText describes the config's limit.
func (c loadConfig) limitText() string {
	if c.key == "lo" {
		return "100/min (nearly all over)"
	}
	return "1e9/min (none over)"
}

// loadRun is the outcome of one ghz run.
type loadRun struct {
	rate     float64        // decisions (calls answered without error) a second
	p50, p99 float64        // latency, ns
	errors   int            // calls that failed, but for cutOff
	cutOff   int            // calls in flight when ghz closed its connections
	messages map[string]int // the errors counted in errors, by message
	check    string         // the overall code of one more call, for one value
	// cpu is the CPU time per decision of the service, its redis-server
	// and ghz, in µs, over the run's steady window (cpuPerDecision);
	// cpuOK is false when the run had no such window.
	cpu   [procCount]float64
	cpuOK bool
}

// ghzReport is the part of ghz's JSON report the command reads.
type ghzReport struct {
	Count          uint64         `json:"count"`
	Total          time.Duration  `json:"total"`
	StatusCodeDist map[string]int `json:"statusCodeDistribution"`
	ErrorDist      map[string]int `json:"errorDistribution"`
	Latency        []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
	// Details lists every call (up to a million); its timestamp is when
	// the answer came.
	Details []struct {
		Timestamp time.Time `json:"timestamp"`
		Status    string    `json:"status"`
	} `json:"details"`
}

// loadConfigs returns the shapes of load of the flags.
func (h *harness) loadConfigs() []loadConfig {
	var out []loadConfig
	for _, v := range h.o.keys {
		for _, s := range h.o.streams {
			out = append(out, loadConfig{streams: s, values: v, key: "hi"})
		}
	}
	if h.o.rejected {
		out = append(out, loadConfig{streams: 16, values: 1, key: "lo"})
	}
	return out
}

// load runs ghz on every kind for every shape of load, -count rounds, the
// kinds' runs alternating, and prints the table. The floor takes part as
// a kind.
func (h *harness) load(ctx context.Context, w io.Writer) error {
	kinds := h.loadKinds()
	protoset := filepath.Join(h.dir, "rls.protoset")
	if err := writeProtoset(protoset); err != nil {
		return fmt.Errorf("writing the protoset: %w", err)
	}
	configs := h.loadConfigs()
	for _, k := range kinds {
		h.logf("load: warm-up of %s", k.label)
		if _, err := h.ghzRun(ctx, k, loadConfig{streams: 16, values: 1000, key: "hi"}, protoset, "warm", warmup); err != nil {
			return err
		}
	}
	runs := map[string][][]loadRun{} // kind, config, rounds
	for _, k := range kinds {
		runs[k.name] = make([][]loadRun, len(configs))
	}
	for round := range h.o.count {
		for ci, c := range configs {
			for _, k := range kinds {
				h.logf("load: round %d/%d, %d streams, %d values, %s: %s", round+1, h.o.count, c.streams, c.values, c.key, k.label)
				r, err := h.ghzRun(ctx, k, c, protoset, fmt.Sprintf("r%dc%d", round, ci), h.o.duration)
				if err != nil {
					return err
				}
				runs[k.name][ci] = append(runs[k.name][ci], r)
			}
		}
	}
	h.printLoad(w, kinds, configs, runs)
	return nil
}

// loadAgg is the median over the rounds of one kind's runs of one shape
// of load, with the spread of the rate and latencies.
type loadAgg struct {
	rate, p50, p99                   float64
	rateSpread, p50Spread, p99Spread float64
	cpu                              [procCount]float64 // µs per decision; 0 if no round measured it
	cpuRounds                        int                // the rounds that measured it
	errors                           int
	checks                           []string
}

// aggregate returns the medians of a kind's runs of one shape of load.
func aggregate(rs []loadRun) loadAgg {
	var a loadAgg
	var rate, p50, p99 []float64
	var cpu [procCount][]float64
	for _, r := range rs {
		rate = append(rate, r.rate)
		p50 = append(p50, r.p50)
		p99 = append(p99, r.p99)
		a.errors += r.errors
		if r.cpuOK {
			a.cpuRounds++
			for i, x := range r.cpu {
				cpu[i] = append(cpu[i], x)
			}
		}
		if r.check != "" && !slices.Contains(a.checks, r.check) {
			a.checks = append(a.checks, r.check)
		}
	}
	a.rate, a.p50, a.p99 = median(rate), median(p50), median(p99)
	a.rateSpread, a.p50Spread, a.p99Spread = spread(rate), spread(p50), spread(p99)
	for i := range cpu {
		a.cpu[i] = median(cpu[i])
	}
	return a
}

// zeroCPUBound returns the decisions/s ratio to the reference that a
// service using no CPU, and no Redis, would reach while the cores are the
// bottleneck: (ghz + reference + its redis) / ghz, in CPU per decision of
// the reference's runs; 0 if unknown.
func zeroCPUBound(ref loadAgg) float64 {
	if ref.cpuRounds == 0 || ref.cpu[procGhz] == 0 {
		return 0
	}
	return (ref.cpu[procGhz] + ref.cpu[procService] + ref.cpu[procRedis]) / ref.cpu[procGhz]
}

// printLoad prints the load tables: every kind's medians, then the other
// kinds' ratios to the reference, then the ratekit kinds' CPU per decision
// beside the floor's.
func (h *harness) printLoad(w io.Writer, kinds []*kind, configs []loadConfig, runs map[string][][]loadRun) {
	labels := make([]string, len(kinds))
	for i, k := range kinds {
		labels[i] = k.label
	}
	fmt.Fprintln(w, "## Load")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "ghz, %s a run, %d connection(s), unary ShouldRateLimit with one descriptor of domain bench; %d rounds, "+
		"the services' runs alternating (%s) in each round; median of the rounds, and their spread ((max-min)/median). "+
		"decisions/s counts the calls answered (OK or OVER_LIMIT). With many values, request i uses value i mod N. "+
		"CPU µs per decision: the CPU time (user + system, /proc/PID/stat) that the service, its redis-server and ghz each used "+
		"over the run's steady part (from %s after ghz's first answer to %s before its last, sampled every %s), "+
		"divided by the calls answered in it. "+
		"errors: failed calls, not counting those in flight when ghz ends a run by closing its connections. "+
		"check: the overall code of one more call on the one value after each run.\n\n",
		h.o.duration, h.o.connections, h.o.count, strings.Join(labels, ", "), cpuWindowLead, cpuWindowTail, cpuSampleInterval)
	fmt.Fprintln(w, "| streams | values | limit | service | decisions/s | p50 ms | p99 ms | CPU µs/decision: service | its redis | ghz | errors | check |")
	fmt.Fprintln(w, "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
	var messages []string
	aggs := make([]map[string]loadAgg, len(configs))
	for ci, c := range configs {
		aggs[ci] = map[string]loadAgg{}
		for _, k := range kinds {
			a := aggregate(runs[k.name][ci])
			aggs[ci][k.name] = a
			for _, r := range runs[k.name][ci] {
				for msg, n := range r.messages {
					messages = append(messages, fmt.Sprintf("%s, %d streams, %d values, %s: %d × %s", k.label, c.streams, c.values, c.key, n, markdownSafe(msg)))
				}
			}
			cpu := [procCount]string{"n/a", "n/a", "n/a"}
			if a.cpuRounds > 0 {
				for i, x := range a.cpu {
					cpu[i] = fmt.Sprintf("%.1f", x)
				}
			}
			if k.name == kindFloor {
				cpu[procRedis] = "none"
			}
			fmt.Fprintf(w, "| %d | %d | %s | %s | %s ±%.0f%% | %s ±%.0f%% | %s ±%.0f%% | %s | %s | %s | %d | %s |\n",
				c.streams, c.values, c.limitText(), k.label,
				formatRate(a.rate), a.rateSpread, formatMillis(a.p50), a.p50Spread, formatMillis(a.p99), a.p99Spread,
				cpu[procService], cpu[procRedis], cpu[procGhz], a.errors, strings.Join(a.checks, ", "))
		}
	}
	fmt.Fprintln(w)
	if len(messages) > 0 {
		fmt.Fprintln(w, "Errors:")
		fmt.Fprintln(w)
		for _, m := range messages {
			fmt.Fprintln(w, "- "+m)
		}
		fmt.Fprintln(w)
	}

	if h.floor != nil {
		fmt.Fprintln(w, "The floor (grpc-go, no decision) is a grpc-go server with ratekit serve's server options "+
			"(stream workers one per core, 1 MiB messages, 1000 streams, its keepalive settings) that registers the same RateLimitService "+
			"and answers every call OK with a constant status, deciding nothing and using no Redis. "+
			"Its CPU µs per decision is what a grpc-go RateLimitService spends per call with no decision; "+
			"what a ratekit kind's process spends above it is ratekit's decision (and its Redis client).")
		fmt.Fprintln(w)
	}

	var others []*kind
	hasRef := false
	for _, k := range kinds {
		if k.name == kindReference {
			hasRef = true
		} else {
			others = append(others, k)
		}
	}
	if !hasRef || len(others) == 0 {
		h.printFloor(w, kinds, configs, aggs)
		return
	}
	fmt.Fprintln(w, "### Load, ratios to the reference")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| streams | values | limit |")
	sep := "|---:|---:|---|"
	for _, k := range others {
		fmt.Fprintf(w, " %s decisions/s | %s p50 | %s p99 | %s CPU |", k.label, k.label, k.label, k.label)
		sep += "---:|---:|---:|---:|"
	}
	fmt.Fprint(w, " zero-CPU bound |\n"+sep+"---:|\n")
	for ci, c := range configs {
		ref := aggs[ci][kindReference]
		fmt.Fprintf(w, "| %d | %d | %s |", c.streams, c.values, c.limitText())
		for _, k := range others {
			a := aggs[ci][k.name]
			cpu := "n/a"
			if a.cpuRounds > 0 && ref.cpuRounds > 0 {
				cpu = ratio(a.cpu[procService]+a.cpu[procRedis], ref.cpu[procService]+ref.cpu[procRedis])
			}
			fmt.Fprintf(w, " %s | %s | %s | %s |", ratio(a.rate, ref.rate), ratio(a.p50, ref.p50), ratio(a.p99, ref.p99), cpu)
		}
		bound := "n/a"
		if b := zeroCPUBound(ref); b > 0 {
			bound = fmt.Sprintf("%.2f", b)
		}
		fmt.Fprintf(w, " %s |\n", bound)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each ratio is the kind's median ÷ the reference's: decisions/s above 1, it decides more a second; "+
		"p50 and p99 below 1, it answers sooner; CPU (service + its redis-server, µs per decision) below 1, it costs less per decision. "+
		"zero-CPU bound: the decisions/s ratio to the reference that a service using no CPU at all, nor Redis, would reach "+
		"on these shared cores with ghz as it ran against the reference: (ghz + reference + the reference's redis-server) ÷ ghz, "+
		"in CPU µs per decision of the reference's runs. It binds where the cores are the bottleneck (many streams); "+
		"with one stream the round trip's latency bounds the rate instead.")
	fmt.Fprintln(w)
	h.printFloor(w, kinds, configs, aggs)
}

// floorBudget is the CPU µs per decision of a kind's service at which
// ghz, the service and its redis-server would together spend half the
// reference's per decision, so that the kind would decide twice as much a
// second where the cores are the bottleneck: half of (ghz + reference +
// its redis) against the reference, less ghz and the redis-server against
// the kind. 0 if unknown; it may be negative (out of reach).
func floorBudget(ref, a loadAgg) (float64, bool) {
	if ref.cpuRounds == 0 || a.cpuRounds == 0 {
		return 0, false
	}
	total := ref.cpu[procGhz] + ref.cpu[procService] + ref.cpu[procRedis]
	return total/2 - a.cpu[procGhz] - a.cpu[procRedis], true
}

// printFloor prints, when the floor ran beside a ratekit kind, each
// ratekit kind's service CPU per decision, what of it is above the
// floor's, and what it would have to be for twice the reference's
// decisions/s.
func (h *harness) printFloor(w io.Writer, kinds []*kind, configs []loadConfig, aggs []map[string]loadAgg) {
	var rk []*kind
	hasRef, hasFloor := false, false
	for _, k := range kinds {
		switch k.name {
		case kindReference:
			hasRef = true
		case kindFloor:
			hasFloor = true
		default:
			rk = append(rk, k)
		}
	}
	if !hasFloor || len(rk) == 0 {
		return
	}
	fmt.Fprintln(w, "### Load, CPU per decision above the floor")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| streams | values | limit | floor µs |")
	sep := "|---:|---:|---|---:|"
	for _, k := range rk {
		fmt.Fprintf(w, " %s µs | above the floor |", k.label)
		sep += "---:|---:|"
		if hasRef {
			fmt.Fprintf(w, " %s µs for 2x |", k.label)
			sep += "---:|"
		}
	}
	fmt.Fprint(w, "\n"+sep+"\n")
	us := func(a loadAgg, x float64) string {
		if a.cpuRounds == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f", x)
	}
	for ci, c := range configs {
		fl := aggs[ci][kindFloor]
		fmt.Fprintf(w, "| %d | %d | %s | %s |", c.streams, c.values, c.limitText(), us(fl, fl.cpu[procService]))
		for _, k := range rk {
			a := aggs[ci][k.name]
			above := "n/a"
			if a.cpuRounds > 0 && fl.cpuRounds > 0 {
				above = fmt.Sprintf("%.1f", a.cpu[procService]-fl.cpu[procService])
			}
			fmt.Fprintf(w, " %s | %s |", us(a, a.cpu[procService]), above)
			if hasRef {
				budget := "n/a"
				if b, ok := floorBudget(aggs[ci][kindReference], a); ok {
					budget = fmt.Sprintf("%.1f", b)
				}
				fmt.Fprintf(w, " %s |", budget)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "µs: the CPU µs per decision of the process alone (not its redis-server), medians as above. "+
		"above the floor: the kind's µs less the floor's, the CPU its decision (and its Redis client) takes per call.")
	if hasRef {
		fmt.Fprint(w, " µs for 2x: the process's CPU per decision at which ghz, the process and its redis-server "+
			"would together spend half what ghz, the reference and the reference's redis-server spend per decision, "+
			"with ghz and the redis-server as measured against the kind: what twice the reference's decisions/s takes "+
			"where the cores are the bottleneck (16 and 128 streams). Below the floor's µs, no grpc-go service with those "+
			"ghz and Redis costs reaches it.")
	}
	fmt.Fprint(w, "\n\n")
}

// ratio formats a/b.
func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// ghzRun runs ghz once on a kind's main instance and reads its report.
// tag makes the descriptor values of the run its own.
func (h *harness) ghzRun(ctx context.Context, k *kind, c loadConfig, protoset, tag string, d time.Duration) (loadRun, error) {
	dir := filepath.Join(h.dir, k.name, "ghz")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return loadRun{}, err
	}
	data := filepath.Join(dir, tag+".json")
	if err := writeLoadData(data, c, tag); err != nil {
		return loadRun{}, err
	}
	out := filepath.Join(dir, tag+"-report.json")
	args := []string{
		"--insecure",
		"--protoset", protoset,
		"--call", rlsMethod,
		"--data-file", data,
		"-c", strconv.Itoa(c.streams),
		"--connections", strconv.Itoa(min(h.o.connections, c.streams)),
		"-z", d.String(),
		"--format", "json",
		"--output", out,
		k.grpcAddr(),
	}
	cmd := exec.CommandContext(ctx, h.ghz, args...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return loadRun{}, fmt.Errorf("ghz on %s: %w", k.name, err)
	}
	// The CPU times of the service, its Redis and ghz, sampled while ghz
	// runs.
	svcPid, redisPid := k.pids()
	pids := [procCount]int{procService: svcPid, procRedis: redisPid, procGhz: cmd.Process.Pid}
	stop := make(chan struct{})
	sampled := make(chan []cpuSample, 1)
	go func() { sampled <- sampleCPU(pids, cpuSampleInterval, stop) }()
	err := cmd.Wait()
	close(stop)
	samples := <-sampled
	if err != nil {
		return loadRun{}, fmt.Errorf("ghz %s on %s: %w: %s", strings.Join(args, " "), k.name, err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return loadRun{}, err
	}
	if !h.o.keep {
		// The report lists every call; only the totals are kept.
		_ = os.Remove(out)
	}
	var rep ghzReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return loadRun{}, fmt.Errorf("reading ghz's report: %w", err)
	}
	okCalls := rep.StatusCodeDist["OK"]
	r := loadRun{errors: int(rep.Count) - okCalls}
	// ghz ends a timed run by closing its connections: the calls in
	// flight then, at most one a stream, fail with "transport is
	// closing" or "the client connection is closing".
	closing := 0
	for msg, n := range rep.ErrorDist {
		if strings.Contains(msg, " is closing") {
			closing += n
		}
	}
	for msg, n := range rep.ErrorDist {
		if closing <= c.streams && strings.Contains(msg, " is closing") {
			r.errors -= n
			r.cutOff += n
			continue
		}
		if r.messages == nil {
			r.messages = map[string]int{}
		}
		r.messages[msg] += n
	}
	if rep.Total > 0 {
		r.rate = float64(okCalls) / rep.Total.Seconds()
	}
	for _, l := range rep.Latency {
		switch l.Percentage {
		case 50:
			r.p50 = float64(l.Latency)
		case 99:
			r.p99 = float64(l.Latency)
		}
	}
	ends := make([]time.Time, 0, okCalls)
	for _, d := range rep.Details {
		if d.Status == "OK" {
			ends = append(ends, d.Timestamp)
		}
	}
	var calls int
	var window time.Duration
	r.cpu, calls, window, r.cpuOK = cpuPerDecision(samples, ends)
	h.logf("load: %s: %.0f decisions/s; CPU µs/decision over %s (%d calls): service %.1f, redis %.1f, ghz %.1f",
		k.label, r.rate, window.Round(time.Millisecond), calls, r.cpu[procService], r.cpu[procRedis], r.cpu[procGhz])
	if c.values == 1 {
		r.check = checkOne(ctx, k, c, tag)
	}
	return r, nil
}

// checkOne returns the overall code of one call on the single value of a
// run.
func checkOne(ctx context.Context, k *kind, c loadConfig, tag string) string {
	client := rlsv3.NewRateLimitServiceClient(k.conn)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(cctx, loadRequest(c.key, tag+"-0"))
	if err != nil {
		return "error"
	}
	return resp.GetOverallCode().String()
}

// loadRequest returns the request of a load run for one value.
func loadRequest(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: "bench",
		Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
	}
}

// loadMessage is a request in the JSON form ghz reads.
type loadMessage struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []loadEntry `json:"entries"`
	} `json:"descriptors"`
}

// loadEntry is a descriptor entry in the JSON form ghz reads.
type loadEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// writeLoadData writes ghz's data file: one request, or for many values
// an array that ghz uses in turn (request i takes element i mod N).
func writeLoadData(path string, c loadConfig, tag string) error {
	msgs := make([]loadMessage, c.values)
	for i := range msgs {
		msgs[i].Domain = "bench"
		msgs[i].Descriptors = make([]struct {
			Entries []loadEntry `json:"entries"`
		}, 1)
		msgs[i].Descriptors[0].Entries = []loadEntry{{Key: c.key, Value: tag + "-" + strconv.Itoa(i)}}
	}
	var v any = msgs
	if c.values == 1 {
		v = msgs[0]
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// writeProtoset writes the descriptor set of the rate limit service's
// file and all it imports, generated from the compiled-in Go types, for
// ghz -protoset.
func writeProtoset(path string) error {
	var files []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		// Dependencies first, as protoc writes them.
		files = append(files, protodesc.ToFileDescriptorProto(f))
	}
	add(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: files})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
