package rulesfile_test

// RATEKIT_MEASURE=1 runs TestMeasureDocumentCost as well: the CPU time
// and the retained heap of the costliest documents within the caps.
//
//	RATEKIT_MEASURE=1 go test ./rulesfile -run TestMeasureDocumentCost -v -count=1

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// flatDoc returns a document of n top-level descriptors, each a rate
// limit on remote_address for one value padded to pad bytes.
func flatDoc(n, pad int) []byte {
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n")
	for i := range n {
		v := fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)
		if pad > len(v) {
			v += "-" + strings.Repeat("x", pad-len(v)-1)
		}
		fmt.Fprintf(&b, "- {key: remote_address, value: %q, rate_limit: {unit: second, requests_per_unit: 0}}\n", v)
	}
	return []byte(b.String())
}

// deepDoc returns a document of chains of generic_key descriptors nested
// depth deep, n descriptors in all, each with a rate limit and a value
// padded to pad bytes.
func deepDoc(n, depth, pad int) []byte {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	for i := 0; i < n; {
		open := 0
		b.WriteString("- ")
		for d := 0; d < depth && i < n; d++ {
			if d > 0 {
				b.WriteString(", descriptors: [")
				open++
			}
			v := fmt.Sprintf("c%d-%d", i, d)
			if pad > len(v) {
				v += "-" + strings.Repeat("x", pad-len(v)-1)
			}
			fmt.Fprintf(&b, "{key: generic_key, value: %s, rate_limit: {unit: second, requests_per_unit: 5}", v)
			i++
		}
		b.WriteString("}" + strings.Repeat("]}", open) + "\n")
	}
	return []byte(b.String())
}

// Documents past the caps are refused by Parse, Load and Watch with an
// error that names the cap; a document at the caps loads.
func TestDocumentCaps(t *testing.T) {
	dir := t.TempDir()
	at := filepath.Join(dir, "at-cap.yaml")
	over := filepath.Join(dir, "over-cap.yaml")
	if err := os.WriteFile(at, flatDoc(rulesfile.MaxDescriptors, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(over, flatDoc(rulesfile.MaxDescriptors+1, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t)
	if err := rulesfile.Load(e, at); err != nil {
		t.Fatalf("Load of %d descriptors: %v", rulesfile.MaxDescriptors, err)
	}
	if got := len(e.Limits()); got != rulesfile.MaxDescriptors {
		t.Fatalf("engine has %d limits, want %d", got, rulesfile.MaxDescriptors)
	}
	const want = "more than 20000 descriptors, the most a rules document may hold (rulesfile.MaxDescriptors)"
	err := rulesfile.Load(newEngine(t), over)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), over+":20003: descriptors[20000]: ") {
		t.Fatalf("Load of %d descriptors: got %v, want %q at line 20003", rulesfile.MaxDescriptors+1, err, want)
	}
	if w, err := rulesfile.Watch(newEngine(t), over); err == nil || !strings.Contains(err.Error(), want) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Watch: got %v, want %q", err, want)
	}

	// Counting limits: MaxRateLimits load, one more does not.
	if err := rulesfile.Load(newEngine(t), writeDoc(t, dir, deepDoc(rulesfile.MaxRateLimits, 1, 0))); err != nil {
		t.Fatalf("%d rate limits: %v", rulesfile.MaxRateLimits, err)
	}
	err = rulesfile.Load(newEngine(t), writeDoc(t, dir, deepDoc(rulesfile.MaxRateLimits+1, 1, 0)))
	if err == nil || !strings.Contains(err.Error(), "descriptors[2000].rate_limit: more than 2000 rate limits with requests_per_unit above 0") {
		t.Fatalf("%d rate limits: got %v, want the rate-limit cap's error", rulesfile.MaxRateLimits+1, err)
	}

	// Nesting: 32 levels load, 33 do not.
	if err := rulesfile.Load(newEngine(t), "testdata/limits/deep32.yaml"); err != nil {
		t.Fatalf("deep32.yaml: %v", err)
	}
	err = rulesfile.Load(newEngine(t), "testdata/limits/deep33.yaml")
	if err == nil || !strings.Contains(err.Error(), "descriptors nested more than 32 deep") {
		t.Fatalf("deep33.yaml: got %v, want the nesting error", err)
	}

	// Metadata and lists.
	for _, tc := range []struct{ name, doc, want string }{
		{"metadata", "domain: m\ndescriptors:\n- key: generic_key\n  metadata: [" + strings.Repeat("0,", 10_000) + "0]\n",
			"descriptors[0].metadata: more than 10000 metadata values in the document"},
		{"replaces", "domain: m\ndescriptors:\n- key: generic_key\n  rate_limit: {unit: second, requests_per_unit: 1, replaces: [" +
			strings.Repeat("{name: a},", 100) + "{name: a}]}\n",
			"descriptors[0].rate_limit.replaces: 101 names; at most 100"},
		{"methods", "domain: m\ndescriptors:\n- key: generic_key\n  match: {method: [" + strings.Repeat("GET,", 100) + "GET]}\n",
			"descriptors[0].match.method: 101 methods; at most 100"},
	} {
		_, err := rulesfile.Parse("m.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// writeDoc writes doc to a new file in dir and returns its path.
func writeDoc(t *testing.T, dir string, doc []byte) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "rules-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(doc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// The costliest documents within the caps (MaxSize bytes, MaxDescriptors
// descriptors, nested up to 32 deep), each parsed and loaded into an
// engine: the CPU time of both and the heap the engine retains stay
// within the figures docs/rules.md states.
func TestMeasureDocumentCost(t *testing.T) {
	if os.Getenv("RATEKIT_MEASURE") == "" {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
	const n = rulesfile.MaxDescriptors
	pad := func(perDescriptor int) int { return (rulesfile.MaxSize - 4096) / n / perDescriptor } // fills MaxSize
	for _, tc := range []struct {
		name string
		doc  []byte
	}{
		{"20,000 short block-list entries", flatDoc(n, 0)},
		{"20,000 block-list entries filling 4 MiB", flatDoc(n, pad(1)-100)},
		{"2,000 rate limits 32 deep, 18,000 block-list entries filling 4 MiB",
			append(deepDoc(rulesfile.MaxRateLimits, 32, pad(1)-100), flatDoc(n-rulesfile.MaxRateLimits, pad(1)-100)[len("domain: edge\ndescriptors:\n"):]...)},
		{"2,000 rate limits, 18,000 short block-list entries",
			append(deepDoc(rulesfile.MaxRateLimits, 1, 0), flatDoc(n-rulesfile.MaxRateLimits, 0)[len("domain: edge\ndescriptors:\n"):]...)},
	} {
		if len(tc.doc) > rulesfile.MaxSize {
			t.Fatalf("%s: %d bytes, over MaxSize", tc.name, len(tc.doc))
		}
		base := liveHeap()
		cpu0 := cpuTime()
		start := time.Now()
		cfg, err := rulesfile.Parse("doc.yaml", tc.doc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		e, err := rules.NewEngine()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Load(cfg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wall, cpu := time.Since(start), cpuTime()-cpu0
		cfg = rules.Config{}
		heap := liveHeap() - base
		t.Logf("%s: %.2f MiB, %d limits: parse and load %.2f s of CPU (%.2f s wall), retained heap %.1f MB",
			tc.name, float64(len(tc.doc))/(1<<20), len(e.Limits()), cpu.Seconds(), wall.Seconds(), float64(heap)/1e6)
		if heap > 70e6 {
			t.Errorf("%s: the engine retains %.1f MB; docs/rules.md states at most 70 MB", tc.name, float64(heap)/1e6)
		}
		runtime.KeepAlive(e)
	}
}
