package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.count != 3 || len(o.streams) != 3 || o.streams[2] != 128 || len(o.keys) != 2 || o.keys[1] != 10000 ||
		strings.Join(o.kinds(), ",") != "reference,ratekit,hybrid" || !o.runsRatekit() {
		t.Fatalf("defaults = %+v", o)
	}
	o, err = parseFlags([]string{"-only", "reference", "-skip", "load,burst", "-streams", "4"})
	if err != nil {
		t.Fatal(err)
	}
	if k := o.kinds(); len(k) != 1 || k[0] != kindReference || !o.skip["load"] || !o.skip["burst"] || o.skip["cases"] || o.streams[0] != 4 || o.runsRatekit() {
		t.Fatalf("parsed %+v", o)
	}
	// Kinds run in their fixed order, whatever the order given.
	o, err = parseFlags([]string{"-only", "hybrid, reference"})
	if err != nil {
		t.Fatal(err)
	}
	if k := strings.Join(o.kinds(), ","); k != "reference,hybrid" || !o.runsRatekit() || o.runs(kindRatekit) {
		t.Fatalf("-only hybrid,reference: kinds %s", k)
	}
	if kindLabel(kindHybrid) != "ratekit hybrid" || kindStore(kindHybrid) != "hybrid" || kindStore(kindRatekit) != "redis" {
		t.Fatal("labels or stores of the kinds")
	}
	// The floor is a kind of -only, but no service: it runs in the load
	// runs only.
	o, err = parseFlags(nil)
	if err != nil || !o.runs(kindFloor) || !o.runsFloor() {
		t.Fatalf("by default the floor runs: %+v, %v", o, err)
	}
	o, err = parseFlags([]string{"-only", "floor,reference"})
	if err != nil || strings.Join(o.kinds(), ",") != "reference" || !o.runsFloor() || o.runsRatekit() {
		t.Fatalf("-only floor,reference: %+v, %v", o, err)
	}
	o, err = parseFlags([]string{"-skip", "load"})
	if err != nil || o.runsFloor() {
		t.Fatalf("-skip load: the floor runs: %+v, %v", o, err)
	}
	if kindLabel(kindFloor) != "floor (grpc-go, no decision)" {
		t.Fatalf("floor label %q", kindLabel(kindFloor))
	}
	for _, bad := range [][]string{
		{"-only", "both"},
		{"-only", "ratekit,memory"},
		{"-skip", "cases,nothing"},
		{"-streams", "0"},
		{"-count", "0"},
		{"-reference-stats", "statsd"},
		{"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

func TestMedianSpread(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	if s := spread([]float64{90, 100, 110}); s != 20 {
		t.Errorf("spread = %v, want 20", s)
	}
	if s := spread([]float64{5}); s != 0 {
		t.Errorf("spread of one = %v", s)
	}
}

func TestCount(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	call := func(sent, recv int, admitted bool) burstCall {
		return burstCall{sent: at(sent), recv: at(recv), admitted: admitted}
	}
	calls := []burstCall{
		call(600, 601, true),   // window 0
		call(900, 901, true),   // window 0
		call(950, 951, false),  // window 0, rejected
		call(999, 1003, true),  // straddles; middle 1001: window 1
		call(1000, 1001, true), // window 1
		call(1500, 1501, true), // window 1
		call(2100, 2101, true), // window 2
		{sent: at(2200), recv: at(2201), failed: true},
	}
	var r burstResult
	count(&r, calls)
	if r.calls != 8 || r.admitted != 6 || r.failed != 1 || r.ambiguous != 1 {
		t.Fatalf("calls %d admitted %d failed %d straddling %d, want 8 6 1 1", r.calls, r.admitted, r.failed, r.ambiguous)
	}
	want := []windowCount{
		{start: base, sent: 3, admitted: 2},
		{start: base.Add(time.Second), sent: 3, admitted: 3, straddling: 1},
		{start: base.Add(2 * time.Second), sent: 2, admitted: 1},
	}
	if len(r.windows) != len(want) {
		t.Fatalf("windows = %+v", r.windows)
	}
	for i, w := range want {
		if g := r.windows[i]; !g.start.Equal(w.start) || g.sent != w.sent || g.admitted != w.admitted || g.straddling != w.straddling {
			t.Errorf("window %d = %+v, want %+v", i, g, w)
		}
	}
	// Admitted at 600.5, 900.5, 1000.5, 1001, 1500.5, 2100.5 ms: the
	// second from 600.5 holds five.
	if r.maxSliding != 5 {
		t.Errorf("busiest second = %d, want 5", r.maxSliding)
	}
}

// TestBenchConfig loads the burst runs' configuration into a rules engine,
// as ratekit serve does, with the fixed window (which the reference reads
// too) and with the sliding window log of the log variant.
func TestBenchConfig(t *testing.T) {
	for _, algo := range []string{"", burstLogAlgorithm} {
		cfg, err := rulesfile.Parse("bench.yaml", []byte(benchConfig(100, algo)))
		if err != nil {
			t.Fatalf("algorithm %q: %v", algo, err)
		}
		if len(cfg.Descriptors) != 3 {
			t.Fatalf("algorithm %q: %d descriptors", algo, len(cfg.Descriptors))
		}
		for _, d := range cfg.Descriptors {
			want := ""
			if d.Key == "burst" {
				want = algo
				if rl := d.RateLimit; rl == nil || rl.RequestsPerUnit != 100 || rl.Unit != "second" {
					t.Fatalf("algorithm %q: burst rule %+v", algo, rl)
				}
			}
			if d.RateLimit == nil || d.RateLimit.Algorithm != want {
				t.Errorf("algorithm %q: descriptor %q has algorithm %+v, want %q", algo, d.Key, d.RateLimit, want)
			}
		}
		e, err := rules.NewEngine(rules.WithAnyKey())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Load(cfg); err != nil {
			t.Fatalf("algorithm %q: Load: %v", algo, err)
		}
		want := core.FixedWindow
		if algo != "" {
			want = core.SlidingWindowLog
		}
		found := false
		for _, l := range e.Limits() {
			if l.Rate.Count == 100 && l.Rate.Period == time.Second {
				found = true
				if l.Algorithm != want {
					t.Errorf("algorithm %q: the burst limit counts by %v, want %v", algo, l.Algorithm, want)
				}
			}
		}
		if !found {
			t.Errorf("algorithm %q: no limit of 100 a second in %+v", algo, e.Limits())
		}
	}
	// A name the engine does not know is refused, so the test above
	// would see a config ratekit serve could not load.
	cfg, err := rulesfile.Parse("bench.yaml", []byte(benchConfig(100, "sliding-window-journal")))
	if err == nil {
		e, nerr := rules.NewEngine(rules.WithAnyKey())
		if nerr != nil {
			t.Fatal(nerr)
		}
		err = e.Load(cfg)
	}
	if err == nil {
		t.Error("an unknown algorithm loaded")
	}
}

// TestBurstVariants checks that only ratekit's redis store gets the log
// variant: the hybrid store refuses a log, the reference has no
// algorithm but the fixed window.
func TestBurstVariants(t *testing.T) {
	h := &harness{}
	for _, name := range []string{kindReference, kindRatekit, kindHybrid} {
		h.kinds = append(h.kinds, &kind{name: name, label: kindLabel(name)})
	}
	var labels []string
	for _, v := range h.burstVariants() {
		labels = append(labels, v.label)
		if (v.algorithm != "") != (v.label == "ratekit, sliding-window-log") || v.algorithm != "" && (v.kind != kindRatekit || v.algorithm != burstLogAlgorithm) {
			t.Errorf("variant %+v", v)
		}
	}
	want := "reference; reference, REDIS_PIPELINE_WINDOW=150us; reference, LOCAL_CACHE_SIZE_IN_BYTES=1048576; " +
		"ratekit; ratekit, sliding-window-log; ratekit hybrid"
	if got := strings.Join(labels, "; "); got != want {
		t.Errorf("variants %s, want %s", got, want)
	}
}

func TestWriteProtoset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.protoset")
	if err := writeProtoset(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	// Every file's imports come before it, so the set resolves on its own.
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatalf("the protoset does not resolve: %v", err)
	}
	name := protoreflect.FullName(strings.TrimSuffix(rlsMethod, ".ShouldRateLimit"))
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if d.(protoreflect.ServiceDescriptor).Methods().ByName("ShouldRateLimit") == nil {
		t.Fatalf("%s has no ShouldRateLimit", name)
	}
}

func TestWriteLoadData(t *testing.T) {
	dir := t.TempDir()
	one, many := filepath.Join(dir, "one.json"), filepath.Join(dir, "many.json")
	if err := writeLoadData(one, loadConfig{values: 1, key: "hi"}, "t"); err != nil {
		t.Fatal(err)
	}
	if err := writeLoadData(many, loadConfig{values: 3, key: "lo"}, "t"); err != nil {
		t.Fatal(err)
	}
	var msg loadMessage
	if b, err := os.ReadFile(one); err != nil || json.Unmarshal(b, &msg) != nil {
		t.Fatalf("one: %v", err)
	}
	if msg.Domain != "bench" || msg.Descriptors[0].Entries[0] != (loadEntry{Key: "hi", Value: "t-0"}) {
		t.Errorf("one = %+v", msg)
	}
	var msgs []loadMessage
	if b, err := os.ReadFile(many); err != nil || json.Unmarshal(b, &msgs) != nil {
		t.Fatalf("many: %v", err)
	}
	if len(msgs) != 3 || msgs[2].Descriptors[0].Entries[0] != (loadEntry{Key: "lo", Value: "t-2"}) {
		t.Errorf("many = %+v", msgs)
	}
}

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (redis-server (x) 1) S 1 4242 4242 0 -1 4194560 1032 0 0 0 250 37 0 0 20 0 5 0 1000 0 0\n"
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2870 * time.Millisecond; got != want {
		t.Errorf("parseStat = %s, want %s (287 ticks)", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 3 0"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
	// This process's own line parses, and its CPU time only grows.
	a, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x := 0; x < 1e7; x++ {
		_ = x * x
	}
	b, err := procCPU(os.Getpid())
	if err != nil || b < a {
		t.Fatalf("procCPU: %s then %s, %v", a, b, err)
	}
}

func TestCPUPerDecision(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	sample := func(ms int, svc, redis, ghz time.Duration) cpuSample {
		return cpuSample{at: at(ms), cpu: [procCount]time.Duration{svc, redis, ghz}}
	}
	samples := []cpuSample{
		sample(0, 0, 0, 0),
		sample(200, 10*time.Millisecond, 0, 50*time.Millisecond), // before the window: first answer + 250ms
		sample(300, 20*time.Millisecond, 5*time.Millisecond, 60*time.Millisecond),
		sample(800, 120*time.Millisecond, 25*time.Millisecond, 160*time.Millisecond),
		sample(950, 500*time.Millisecond, 90*time.Millisecond, 900*time.Millisecond), // after: last answer - 100ms
	}
	// Answers every millisecond from 10 to 1000 ms: 500 of them in
	// (300, 800].
	var ends []time.Time
	for ms := 10; ms <= 1000; ms++ {
		ends = append(ends, at(ms))
	}
	us, calls, window, ok := cpuPerDecision(samples, ends)
	if !ok || calls != 500 || window != 500*time.Millisecond {
		t.Fatalf("window: ok %v, %d calls over %s; want 500 over 500ms", ok, calls, window)
	}
	// 100ms, 20ms and 100ms of CPU over 500 calls.
	if us != [procCount]float64{200, 40, 200} {
		t.Errorf("µs per decision = %v, want [200 40 200]", us)
	}
	if _, _, _, ok := cpuPerDecision(samples[:2], ends); ok {
		t.Error("a window without two samples in it measured")
	}
	if _, _, _, ok := cpuPerDecision(samples, nil); ok {
		t.Error("a run without answers measured")
	}
}

func TestAggregateAndBound(t *testing.T) {
	rs := []loadRun{
		{rate: 100, p50: 1, p99: 4, cpu: [procCount]float64{100, 20, 50}, cpuOK: true, check: "OK"},
		{rate: 300, p50: 3, p99: 6, cpu: [procCount]float64{300, 40, 70}, cpuOK: true, check: "OK"},
		{rate: 200, p50: 2, p99: 5, errors: 1, check: "OVER_LIMIT"},
	}
	a := aggregate(rs)
	if a.rate != 200 || a.p50 != 2 || a.p99 != 5 || a.rateSpread != 100 || a.errors != 1 {
		t.Errorf("aggregate = %+v", a)
	}
	// The CPU medians come from the two rounds that measured it.
	if a.cpuRounds != 2 || a.cpu != [procCount]float64{200, 30, 60} || len(a.checks) != 2 {
		t.Errorf("aggregate CPU = %+v", a)
	}
	// (60 + 200 + 30) / 60.
	if b := zeroCPUBound(a); b < 4.83 || b > 4.84 {
		t.Errorf("zeroCPUBound = %v, want 4.83", b)
	}
	if b := zeroCPUBound(loadAgg{}); b != 0 {
		t.Errorf("zeroCPUBound of nothing = %v", b)
	}
}
