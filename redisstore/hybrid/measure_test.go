package hybrid_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/hybrid"
	"github.com/ratekit/ratekit/redisstore/internal/testenv"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// The measurements of the hybrid store across two regions, in real time
// (one 30 s window each), gated by RATEKIT_MEASURE:
//
//	RATEKIT_MEASURE=1 go test ./redisstore/hybrid -run TestMeasure -v
//
// Two regions, "eu" and "us", each with a private redis-server and two
// hybrid servers, share a fixed window of 1200 requests per 30 s on one
// client key, under a load of twice the limit spread evenly over the four
// servers. Each region reaches the other's Redis through a proxy that
// delays the link (one way) and can cut it. Every store's clock is
// shifted so that the load starts on a window boundary.

const (
	measureInterval  = 250 * time.Millisecond // sync interval
	measurePeriod    = 30 * time.Second
	measureLimit     = 1200
	measureLoad      = 2 // the request rate, as a multiple of the limit's
	measurePerRegion = 2 // hybrid servers per region
)

var measureRegionNames = [2]string{"eu", "us"}

// measuredRegions is one setup of two regions.
type measuredRegions struct {
	start   time.Time // the load's start: a window boundary on the stores' clock
	win     int64     // the window's index, as in the hybrid store's keys
	servers [2]*redistest.Server
	admins  [2]*redis.Client    // to read each region's Redis
	proxies [2]*redistest.Proxy // proxies[i]: region i's link to the other's Redis
	lims    [2][]*core.Limiter
}

// startRegions starts both regions' Redis, the proxies between them with
// a one-way delay, and the hybrid servers, whose clock reads a window
// boundary a second from now.
func startRegions(t *testing.T, delay time.Duration) *measuredRegions {
	return startRegionsWith(t, delay, 2*time.Second, time.Second)
}

// startRegionsWith is startRegions with the read timeout of the clients
// between regions, and the time from now to the load's start (the stores
// are ready for it: their links set up).
func startRegionsWith(t *testing.T, delay, readTimeout, warm time.Duration) *measuredRegions {
	t.Helper()
	r := &measuredRegions{}
	for i := range r.servers {
		r.servers[i] = redistest.Start(t)
		r.admins[i] = r.servers[i].Client(t)
	}
	for i := range r.proxies {
		r.proxies[i] = redistest.StartProxy(t, r.servers[1-i].Addr())
		r.proxies[i].SetDelay(delay)
	}
	r.start = time.Now().Add(warm)
	period := measurePeriod.Nanoseconds()
	boundary := r.start.UnixNano() - ((r.start.UnixNano()%period)+period)%period
	r.win = boundary / period
	offset := time.Duration(boundary - r.start.UnixNano())
	clock := func() time.Time { return time.Now().Add(offset) }
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	limit := core.Limit{Name: "measure", Algorithm: core.FixedWindow, Rate: core.Rate{Count: measureLimit, Period: measurePeriod}}
	for i, name := range measureRegionNames {
		for range measurePerRegion {
			local := redis.NewClient(&redis.Options{Addr: r.servers[i].Addr(), ContextTimeoutEnabled: true})
			remote := redis.NewClient(&redis.Options{Addr: r.proxies[i].Addr(), ReadTimeout: readTimeout,
				WriteTimeout: readTimeout, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _, _ = local.Close(), remote.Close() }) // after the store's Close
			h, err := hybrid.New(local, measureInterval, hybrid.WithClock(clock), hybrid.WithLogger(logger),
				hybrid.WithRegion(name, map[string]redis.UniversalClient{measureRegionNames[1-i]: remote}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			r.lims[i] = append(r.lims[i], core.Must(core.NewLimiter(limit, core.WithStore(h))))
		}
	}
	if time.Now().After(r.start) {
		t.Fatal("setting up took past the start")
	}
	return r
}

// testWriter writes the stores' log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// A measuredTake is one request of the load.
type measuredTake struct {
	region  int
	at      time.Duration // since the start
	allowed bool
	failed  bool
}

// run sends the load for one window, each server on an even schedule of
// its own, staggered so that the whole load is even, each request a Take
// in a goroutine of its own; it returns once every request is answered.
func (r *measuredRegions) run() []measuredTake {
	servers := 2 * measurePerRegion
	tick := time.Duration(float64(measurePeriod) / (measureLoad * measureLimit) * float64(servers))
	n := int(measurePeriod / tick)
	all := make([][]measuredTake, servers)
	var wg sync.WaitGroup
	for k := range servers {
		region, lim := k%2, r.lims[k%2][k/2]
		first := r.start.Add(time.Duration(k) * tick / time.Duration(servers))
		all[k] = make([]measuredTake, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var takes sync.WaitGroup
			defer takes.Wait()
			timer := time.NewTimer(time.Until(first))
			defer timer.Stop()
			for i := range n {
				<-timer.C
				m := &all[k][i]
				takes.Add(1)
				go func() {
					defer takes.Done()
					m.region, m.at = region, time.Since(r.start)
					d, err := lim.Take(context.Background(), "client", 1)
					m.allowed, m.failed = d.Allowed, err != nil
				}()
				timer.Reset(time.Until(first.Add(time.Duration(i+1) * tick)))
			}
		}()
	}
	wg.Wait()
	return slices.Concat(all...)
}

// count returns the requests admitted by each region, and the failed
// ones, of those sent in [from, to).
func count(takes []measuredTake, from, to time.Duration) (admitted [2]int, failed int) {
	for _, m := range takes {
		if m.at < from || m.at >= to {
			continue
		}
		if m.allowed {
			admitted[m.region]++
		}
		if m.failed {
			failed++
		}
	}
	return admitted, failed
}

// windowCount is a region's window hash: its own count t and the other
// regions' R.
type windowCount struct{ own, others int64 }

func (w windowCount) total() int64 { return w.own + w.others }

// readWindow returns what region i's Redis holds of the window.
func (r *measuredRegions) readWindow(t *testing.T, i int) windowCount {
	t.Helper()
	ctx := context.Background()
	rdb := r.admins[i]
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	suffix := "w" + strconv.FormatInt(r.win, 10)
	var w windowCount
	found := 0
	for _, k := range keys {
		if !strings.HasSuffix(k, suffix) {
			continue
		}
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		own, _ := strconv.ParseInt(h["t"], 10, 64)
		others, _ := strconv.ParseInt(h["R"], 10, 64)
		w.own, w.others = w.own+own, w.others+others
		found++
	}
	if found != 1 {
		t.Errorf("%s's Redis holds %d hashes of window %d among its keys %q, want 1", measureRegionNames[i], found, r.win, keys)
	}
	return w
}

// converge reads both regions' window hashes at the window's end and two
// sync intervals, and, when they do not agree with what was admitted yet,
// for up to 10 s more; it returns the last reading and how long after the
// window's end it agreed (-1: it never did).
func (r *measuredRegions) converge(t *testing.T, admitted int) (w [2]windowCount, after time.Duration) {
	t.Helper()
	end := r.start.Add(measurePeriod)
	time.Sleep(time.Until(end.Add(2 * measureInterval)))
	for {
		w = [2]windowCount{r.readWindow(t, 0), r.readWindow(t, 1)}
		if w[0].total() == int64(admitted) && w[1].total() == int64(admitted) {
			return w, time.Since(end)
		}
		if time.Since(end) > 10*time.Second {
			return w, -1
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func convergedText(after time.Duration) string {
	if after < 0 {
		return "no (10 s after the window)"
	}
	return "yes, " + after.Round(10*time.Millisecond).String() + " after the window"
}

func overAdmission(admitted int) string {
	return fmt.Sprintf("%+.2f%%", 100*float64(admitted-measureLimit)/measureLimit)
}

// TestMeasureRegions measures what two regions admit together as the
// delay between them grows.
func TestMeasureRegions(t *testing.T) {
	testenv.SkipUnlessMeasuring(t)
	var mu sync.Mutex
	rows := map[time.Duration]string{}
	delays := []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}
	t.Cleanup(func() { // after the subtests
		t.Logf("2 regions × %d hybrid servers, sync every %s, fixed window of %d per %s, load %dx the limit, one window:", measurePerRegion, measureInterval, measureLimit, measurePeriod, measureLoad)
		t.Log("| one-way delay | eu admitted | us admitted | admitted | limit | over-admission | failed | eu Redis t+R | us Redis t+R | converged |")
		t.Log("|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
		for _, d := range delays {
			if row, ok := rows[d]; ok {
				t.Log(row)
			}
		}
	})
	for _, delay := range delays {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			r := startRegions(t, delay)
			takes := r.run()
			admitted, failed := count(takes, 0, measurePeriod+time.Hour)
			total := admitted[0] + admitted[1]
			w, after := r.converge(t, total)
			row := fmt.Sprintf("| %s | %d | %d | %d | %d | %s | %d | %d | %d | %s |", delay, admitted[0], admitted[1], total,
				measureLimit, overAdmission(total), failed, w[0].total(), w[1].total(), convergedText(after))
			t.Log(row)
			mu.Lock()
			rows[delay] = row
			mu.Unlock()
		})
	}
}

// TestMeasurePartition cuts the link between the regions, both ways, for
// the middle third of the window, and checks that both regions' Redis
// agree on the window's count once it is healed.
func TestMeasurePartition(t *testing.T) {
	testenv.SkipUnlessMeasuring(t)
	const delay = 20 * time.Millisecond
	r := startRegions(t, delay)
	cut, heal := measurePeriod/3, 2*measurePeriod/3
	var cutAt, healAt time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(time.Until(r.start.Add(cut)))
		for _, p := range r.proxies {
			p.Cut()
		}
		cutAt = time.Since(r.start)
		time.Sleep(time.Until(r.start.Add(heal)))
		for _, p := range r.proxies {
			p.Heal()
		}
		healAt = time.Since(r.start)
	}()
	takes := r.run()
	<-done
	before, _ := count(takes, 0, cutAt)
	during, _ := count(takes, cutAt, healAt)
	afterHeal, _ := count(takes, healAt, measurePeriod+time.Hour)
	all, failed := count(takes, 0, measurePeriod+time.Hour)
	total := all[0] + all[1]
	w, after := r.converge(t, total)

	t.Logf("2 regions × %d hybrid servers, sync every %s, one-way delay %s, fixed window of %d per %s, load %dx the limit; link cut both ways from %s to %s:",
		measurePerRegion, measureInterval, delay, measureLimit, measurePeriod, measureLoad, cutAt.Round(time.Millisecond), healAt.Round(time.Millisecond))
	t.Log("| | eu | us | both |")
	t.Log("|---|--:|--:|--:|")
	for _, row := range []struct {
		name string
		n    [2]int
	}{{"admitted before the cut", before}, {"admitted during the cut", during}, {"admitted after the heal", afterHeal}, {"admitted in the window", all}} {
		t.Logf("| %s | %d | %d | %d |", row.name, row.n[0], row.n[1], row.n[0]+row.n[1])
	}
	t.Logf("| over-admission (limit %d) | | | %s |", measureLimit, overAdmission(total))
	t.Logf("| failed Takes | | | %d |", failed)
	t.Logf("| Redis: own count t | %d | %d | |", w[0].own, w[1].own)
	t.Logf("| Redis: other region's R | %d | %d | |", w[0].others, w[1].others)
	t.Logf("| Redis: t+R | %d | %d | |", w[0].total(), w[1].total())
	t.Logf("converged (eu t+R = us t+R = %d admitted): %s", total, convergedText(after))
	if after < 0 || after > 2*measureInterval+time.Second {
		t.Errorf("the regions' counts did not converge within two sync intervals of the window's end (and a second): eu t+R %d, us t+R %d, admitted %d",
			w[0].total(), w[1].total(), total)
	}
}

// TestMeasureSlowLink measures what two regions admit together when the
// link between them is slow but answers: a proxy delays every byte each
// way by 1.5 s or 3 s (a round trip of 3 s or 6 s; a new connection, with
// go-redis's defaults, three round trips). The clients between regions
// wait as long as the store does (ReadTimeout -1), and the stores have
// 20 s to set up their links before the load starts.
func TestMeasureSlowLink(t *testing.T) {
	testenv.SkipUnlessMeasuring(t)
	var mu sync.Mutex
	rows := map[time.Duration]string{}
	delays := []time.Duration{1500 * time.Millisecond, 3 * time.Second}
	t.Cleanup(func() {
		t.Logf("2 regions × %d hybrid servers, sync every %s, fixed window of %d per %s, load %dx the limit, one window, slow link:", measurePerRegion, measureInterval, measureLimit, measurePeriod, measureLoad)
		t.Log("| one-way delay | round trip | eu admitted | us admitted | admitted | limit | over-admission | failed | eu Redis t+R | us Redis t+R |")
		t.Log("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		for _, d := range delays {
			if row, ok := rows[d]; ok {
				t.Log(row)
			}
		}
	})
	for _, delay := range delays {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			r := startRegionsWith(t, delay, -1, 20*time.Second)
			takes := r.run()
			admitted, failed := count(takes, 0, measurePeriod+time.Hour)
			total := admitted[0] + admitted[1]
			time.Sleep(time.Until(r.start.Add(measurePeriod + 4*delay + time.Second))) // the last sends arrive
			w := [2]windowCount{r.readWindow(t, 0), r.readWindow(t, 1)}
			row := fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %s | %d | %d | %d |", delay, 2*delay, admitted[0], admitted[1], total,
				measureLimit, overAdmission(total), failed, w[0].total(), w[1].total())
			t.Log(row)
			mu.Lock()
			rows[delay] = row
			mu.Unlock()
		})
	}
}

// TestMeasureSkew measures what two hybrid servers on one redis-server
// admit when their clocks disagree: one reads Redis's time, the other
// 2 s or 1 h ahead. A fixed window of 200 per 4 s, a load of twice the
// limit spread evenly over both servers for five windows; each admission
// is filed under the window of Redis's clock (this machine's) when it was
// sent.
func TestMeasureSkew(t *testing.T) {
	testenv.SkipUnlessMeasuring(t)
	const (
		period  = 4 * time.Second
		limit   = 200
		windows = 5
		load    = 2
	)
	skews := []time.Duration{0, 2 * time.Second, time.Hour}
	var mu sync.Mutex
	rows := map[time.Duration]string{}
	t.Cleanup(func() {
		t.Logf("2 hybrid servers on one redis-server, one off by the skew; sync every %s; fixed window of %d per %s; load %dx the limit; %d windows of Redis's clock:", measureInterval, limit, period, load, windows)
		t.Log("| skew | admitted per window (Redis's clock) | most in a window | over-admission, worst window | admitted in all | of the limit × windows |")
		t.Log("|--:|---|--:|--:|--:|--:|")
		for _, s := range skews {
			if row, ok := rows[s]; ok {
				t.Log(row)
			}
		}
	})
	for _, skew := range skews {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client(t)
			lim := core.Limit{Name: "skew", Algorithm: core.FixedWindow, Rate: core.Rate{Count: limit, Period: period}}
			var lims [2]*core.Limiter
			for i, d := range [2]time.Duration{0, skew} {
				h, err := hybrid.New(rdb, measureInterval, withSkew(d), hybrid.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = h.Close() })
				lims[i] = core.Must(core.NewLimiter(lim, core.WithStore(h)))
			}
			// Start a second before a boundary of Redis's clock, and send
			// for one more window than counted: the first second and the
			// last window are not counted.
			first := time.Now().Truncate(period).Add(2*period - time.Second)
			tick := period / (load * limit)
			n := int((windows + 1) * period / tick)
			per := map[int64]int{}
			var wg sync.WaitGroup
			var pmu sync.Mutex
			for i := range n {
				time.Sleep(time.Until(first.Add(time.Duration(i) * tick)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					at := time.Now()
					d, err := lims[i%2].Take(context.Background(), "client", 1)
					if err == nil && d.Allowed {
						pmu.Lock()
						per[at.UnixNano()/period.Nanoseconds()]++
						pmu.Unlock()
					}
				}()
			}
			wg.Wait()
			base := first.Add(time.Second).UnixNano() / period.Nanoseconds()
			var counts []string
			most, all := 0, 0
			for w := base; w < base+windows; w++ {
				counts = append(counts, strconv.Itoa(per[w]))
				most, all = max(most, per[w]), all+per[w]
			}
			row := fmt.Sprintf("| %s | %s | %d | %+.1f%% | %d | %d (%+.1f%%) |", skew, strings.Join(counts, ", "), most,
				100*float64(most-limit)/limit, all, limit*windows, 100*float64(all-limit*windows)/(limit*windows))
			t.Log(row)
			mu.Lock()
			rows[skew] = row
			mu.Unlock()
		})
	}
}
