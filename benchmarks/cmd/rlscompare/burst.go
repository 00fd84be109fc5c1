package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/ratekit/ratekit/benchmarks/rlscases"
)

// burstWindows is how many windows' worth of requests a burst sends; it
// starts half a window before a boundary, so it spans a partial window, a
// full one and another partial one.
const burstWindows = 2

// burstLogAlgorithm is the algorithm of the burst rule in the ratekit
// variant that counts exactly: a log of the admitted requests, so that no
// second, at any offset, admits more than the limit.
const burstLogAlgorithm = "sliding-window-log"

// burstVariant is one setup of the burst test.
type burstVariant struct {
	kind  string
	label string
	env   []string // more environment of the reference
	// algorithm names the burst rule's algorithm (a ratekit extension of
	// the rules file) for a ratekit kind; "" leaves the fixed window of
	// the kind's own configuration.
	algorithm string
}

// burstVariants returns the setups to test: each kind; the reference
// also with Redis write buffering and with its local cache of over-limit
// keys; and ratekit (-store redis) also with the burst rule counted by a
// sliding window log. The hybrid store has no log variant: it merges only
// counts that add up (fixed windows and sliding window counters) and
// refuses a log.
func (h *harness) burstVariants() []burstVariant {
	var out []burstVariant
	for _, k := range h.kinds {
		out = append(out, burstVariant{kind: k.name, label: k.label})
		switch k.name {
		case kindReference:
			out = append(out,
				burstVariant{kind: k.name, label: "reference, REDIS_PIPELINE_WINDOW=150us", env: []string{"REDIS_PIPELINE_WINDOW=150us"}},
				burstVariant{kind: k.name, label: "reference, LOCAL_CACHE_SIZE_IN_BYTES=1048576", env: []string{"LOCAL_CACHE_SIZE_IN_BYTES=1048576"}},
			)
		case kindRatekit:
			out = append(out, burstVariant{kind: k.name, label: k.label + ", " + burstLogAlgorithm, algorithm: burstLogAlgorithm})
		}
	}
	return out
}

// burstCall is one call of a burst.
type burstCall struct {
	sent, recv time.Time
	instance   int
	admitted   bool
	failed     bool
}

// mid returns the middle of the call, the best guess of when the service
// decided.
func (c burstCall) mid() time.Time {
	return c.sent.Add(c.recv.Sub(c.sent) / 2)
}

// windowCount is what one fixed window of a second saw.
type windowCount struct {
	start          time.Time
	sent, admitted int
	// straddling counts the admitted calls sent in one window and
	// answered in the next, which may belong to either.
	straddling int
}

// burstResult is the outcome of one burst.
type burstResult struct {
	variant     burstVariant
	calls       int
	admitted    int
	perInstance [2]int // admitted by each instance
	windows     []windowCount
	maxSliding  int // admitted in the busiest second, at any offset
	ambiguous   int // calls whose sending and answer fall in different windows
	failed      int
	achieved    float64       // calls sent a second
	lateMax     time.Duration // latest send behind its schedule
}

// burst runs the burst test on every variant and prints the table.
func (h *harness) burst(ctx context.Context, w io.Writer) error {
	kinds := map[string]*kind{}
	for _, k := range h.kinds {
		kinds[k.name] = k
	}
	var results []burstResult
	for i, v := range h.burstVariants() {
		h.logf("burst: %s", v.label)
		r, err := h.burstRun(ctx, kinds[v.kind], v, i)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	h.printBurst(w, results)
	return nil
}

// burstRun starts two instances of a variant sharing the kind's Redis,
// sends the burst and counts.
func (h *harness) burstRun(ctx context.Context, k *kind, v burstVariant, n int) (burstResult, error) {
	res := burstResult{variant: v}
	if v.algorithm != "" {
		// The variant's instances read a configuration of their own, the
		// kind's with the burst rule's algorithm named.
		dir := filepath.Join(h.dir, k.name, fmt.Sprintf("burst%d-config", n))
		if err := rlscases.WriteConfig(dir); err != nil {
			return res, err
		}
		if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(benchConfig(h.o.burstLimit, v.algorithm)), 0o644); err != nil {
			return res, err
		}
		kc := *k
		kc.configDir = dir
		k = &kc
	}
	var conns [2]*grpc.ClientConn
	var clients [2]rlsv3.RateLimitServiceClient
	for i := range 2 {
		s, err := h.startInstance(ctx, k, fmt.Sprintf("%s-burst%d-%c", k.name, n, 'a'+i), v.env)
		if err != nil {
			return res, err
		}
		defer func() { _ = h.stopProc(s.Proc) }()
		if conns[i], err = dial(s.GRPCAddr); err != nil {
			return res, err
		}
		defer conns[i].Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conns[i])
		// Connect before the burst; the domain is unknown, nothing is
		// counted.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = clients[i].ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "warm-up", Descriptors: loadRequest("x", "x").Descriptors})
		cancel()
		if err != nil {
			return res, fmt.Errorf("%s: first call: %w", v.label, err)
		}
	}

	rate := h.o.burstLimit * h.o.burstFactor
	total := rate * burstWindows
	interval := time.Second / time.Duration(rate)
	req := loadRequest("burst", burstToken())
	// Start half a second before a boundary at least half a second away.
	t0 := time.Now().Truncate(time.Second).Add(time.Second + time.Second/2)
	if time.Until(t0) < 500*time.Millisecond {
		t0 = t0.Add(time.Second)
	}

	calls := make([]burstCall, total)
	jobs := make(chan int, total)
	var wg sync.WaitGroup
	for s := range h.o.burstStreams {
		inst := s % 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				c := &calls[i]
				c.instance = inst
				c.sent = time.Now()
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := clients[inst].ShouldRateLimit(cctx, req)
				cancel()
				c.recv = time.Now()
				c.failed = err != nil
				c.admitted = err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
			}
		}()
	}
	for i := range total {
		at := t0.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		res.lateMax = max(res.lateMax, time.Since(at))
		jobs <- i
		if ctx.Err() != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	count(&res, calls)
	return res, nil
}

// count fills a result from the calls.
func count(res *burstResult, calls []burstCall) {
	res.calls = len(calls)
	byWindow := map[int64]*windowCount{}
	var admitted []time.Time
	first, last := calls[0].sent, calls[0].sent
	for _, c := range calls {
		first, last = minTime(first, c.sent), maxTime(last, c.sent)
		if c.failed {
			res.failed++
		}
		straddles := c.sent.Unix() != c.recv.Unix()
		if straddles {
			res.ambiguous++
		}
		m := c.mid()
		wc := byWindow[m.Unix()]
		if wc == nil {
			wc = &windowCount{start: time.Unix(m.Unix(), 0)}
			byWindow[m.Unix()] = wc
		}
		wc.sent++
		if c.admitted {
			wc.admitted++
			if straddles {
				wc.straddling++
			}
			res.admitted++
			res.perInstance[c.instance]++
			admitted = append(admitted, m)
		}
	}
	for _, wc := range byWindow {
		res.windows = append(res.windows, *wc)
	}
	sort.Slice(res.windows, func(i, j int) bool { return res.windows[i].start.Before(res.windows[j].start) })
	if d := last.Sub(first); d > 0 {
		res.achieved = float64(len(calls)-1) / d.Seconds()
	}
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].Before(admitted[j]) })
	lo := 0
	for hi := range admitted {
		for admitted[hi].Sub(admitted[lo]) >= time.Second {
			lo++
		}
		res.maxSliding = max(res.maxSliding, hi-lo+1)
	}
}

// printBurst prints the burst table.
func (h *harness) printBurst(w io.Writer, results []burstResult) {
	limit := h.o.burstLimit
	fmt.Fprintln(w, "## Burst across two instances")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Two instances of each service share one Redis (fixed windows of a second, limit %d/s on one descriptor value). "+
		"This command sends %d calls a second (%dx the limit) for %d seconds from %d concurrent streams, half on each instance, "+
		"starting half a second before a window boundary. A call counts in the window of the middle of its round trip; "+
		"a straddling call, sent in one window and answered in the next, may belong to either. "+
		"At most %d per window is exact; a fixed window lets up to %d through in a second that spans a boundary.",
		limit, limit*h.o.burstFactor, h.o.burstFactor, burstWindows, h.o.burstStreams, limit, 2*limit)
	for _, k := range h.kinds {
		if k.name == kindRatekit {
			fmt.Fprintf(w, " \"ratekit, %s\" is ratekit's pair with the burst rule counted by a log of the requests admitted "+
				"(algorithm: %s in the rule, a ratekit extension of the rules file): at most %d in any second, at any offset; "+
				"its per-window figures count the same fixed windows as the other rows', for comparison.",
				burstLogAlgorithm, burstLogAlgorithm, limit)
		}
	}
	for _, k := range h.kinds {
		if k.name == kindHybrid {
			fmt.Fprint(w, " ratekit hybrid's two instances decide in process, on leases of the limit taken from their Redis, "+
				"and sync with it every second (-hybrid-interval's default).")
		}
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "| service | calls | admitted | per window (sent → admitted) | max per window | over-admitted | windows × limit | busiest second | per instance | straddling | errors | achieved calls/s | latest send |")
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	for _, r := range results {
		var parts []string
		maxW, over := 0, 0
		for _, wc := range r.windows {
			p := fmt.Sprintf("%s: %d → %d", wc.start.UTC().Format("15:04:05"), wc.sent, wc.admitted)
			if wc.straddling > 0 {
				p += fmt.Sprintf(" (%d straddling)", wc.straddling)
			}
			parts = append(parts, p)
			maxW = max(maxW, wc.admitted)
			over += max(0, wc.admitted-wc.straddling-limit)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %d | %d | %d | %d | %d / %d | %d | %d | %.0f | %s |\n",
			r.variant.label, r.calls, r.admitted, strings.Join(parts, "; "), maxW, over, len(r.windows)*limit, r.maxSliding,
			r.perInstance[0], r.perInstance[1], r.ambiguous, r.failed, r.achieved, r.lateMax.Round(time.Microsecond))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "over-admitted: the sum over windows of admitted beyond %d, straddling calls left out (a lower bound: 0 unless a window surely admitted more than the limit); "+
		"windows × limit: the most a fixed window may admit over the windows the burst touched; busiest second: admitted in the second, at any offset, that holds the most; latest send: how far behind its schedule the latest call left.\n\n", limit)
}

// burstToken returns a fresh descriptor value, so that a burst starts
// with no counter.
func burstToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "b" + hex.EncodeToString(b[:])
}

// minTime returns the earlier time.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// maxTime returns the later time.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
