package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// TestHarness runs the exact store and the hybrid store side by side for
// one short window (real time, a few seconds): the hybrid store admits no
// more than the limit and costs Redis fewer script calls per request.
func TestHarness(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH")
	}
	cfg := config{duration: 2 * time.Second, limit: 200, period: 2 * time.Second, load: 2, instances: 2, bin: bin}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	modes := []mode{{algorithm: core.FixedWindow}, {algorithm: core.FixedWindow, interval: 100 * time.Millisecond}}
	results, err := runAll(context.Background(), cfg, modes)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	printTable(&table, cfg, results)
	t.Log("\n" + table.String())

	exact, hybrid := results[0], results[1]
	for _, r := range results {
		if r.requests != 400 {
			t.Errorf("%s: %d requests, want 2 instances × 200", r.mode.store(), r.requests)
		}
		// One window, and a second only for requests sent late, past
		// its end (a loaded machine).
		if len(r.perWindow) == 0 || len(r.perWindow) > 2 {
			t.Fatalf("%s: admitted in %d windows, want 1 (or 2 when late)", r.mode.store(), len(r.perWindow))
		}
		for w, n := range r.perWindow {
			if n > int64(cfg.limit) {
				t.Errorf("%s admitted %d in window %d, want at most %d", r.mode.store(), n, w, cfg.limit)
			}
		}
	}
	if hybrid.perWindow[0] == 0 {
		t.Errorf("hybrid admitted nothing in the window")
	}
	if exact.errors == 0 && exact.perWindow[0] != int64(cfg.limit) {
		t.Errorf("exact admitted %d in the window, want the limit, %d", exact.perWindow[0], cfg.limit)
	}
	e, h := exact.perRequest(exact.scripts), hybrid.perRequest(hybrid.scripts)
	if e == 0 || h >= e {
		t.Errorf("script calls per request: hybrid %.3f, exact %.3f; want the hybrid's fewer", h, e)
	}
	if !strings.Contains(table.String(), "| fixed-window | hybrid, sync 100ms | 400 |") {
		t.Errorf("no hybrid row in the table")
	}
}

// TestPeakEstimate checks the sliding window counter's peak against a
// hand-computed trace: a limit of 10 per 10 s, 10 admitted in window 0,
// then in window 1 five returned at 5 s (estimate 10 × 0.5 + 5 = 10, at
// the limit) and a sixth at 6 s (10 × 0.4 + 6 = 10): peak 0. A seventh
// returned at 6 s too makes 11: peak +1.
func TestPeakEstimate(t *testing.T) {
	cfg := config{limit: 10, period: 10 * time.Second}
	var samples []sample
	add := func(window int, done time.Duration) {
		samples = append(samples, sample{window: window, allowed: true, done: int64(done)})
	}
	for i := range 10 {
		add(0, time.Duration(i)*time.Second)
	}
	for range 5 {
		add(1, 15*time.Second)
	}
	add(1, 16*time.Second)
	samples = append(samples, sample{window: 1, allowed: false, done: int64(16 * time.Second)}) // rejected: not counted
	if got := peakEstimate(cfg, samples, []int64{10, 6}); got != 0 {
		t.Errorf("peak %v, want 0", got)
	}
	add(1, 16*time.Second)
	if got := peakEstimate(cfg, samples, []int64{10, 7}); got != 1 {
		t.Errorf("peak %v, want +1", got)
	}
}
