package benchmarks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/redistest"
)

// roundTrips is a go-redis hook that counts the client's round trips: a
// command, or a pipeline (one write, one read), counts one.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// redisTaker is a library's Taker on a client of its own for srv, with
// the round trips of that client counted. The client is closed when tb
// ends.
func redisTaker(tb testing.TB, srv *redistest.Server, lib RedisLibrary, q Quota) (RedisTaker, *roundTrips) {
	tb.Helper()
	rdb := redis.NewClient(lib.ClientOptions(srv.Addr()))
	tb.Cleanup(func() { _ = rdb.Close() })
	rt := &roundTrips{}
	rdb.AddHook(rt)
	tk, err := lib.New(rdb, q)
	if err != nil {
		tb.Fatalf("%s: %v", lib.Name, err)
	}
	tb.Cleanup(tk.Close)
	return tk, rt
}

// connectionCommands are the commands a go-redis client sends when it
// opens a connection, not for a decision.
var connectionCommands = map[string]bool{"info": true, "hello": true, "client|setinfo": true, "client|maint_notifications": true}

// A commandStat is one command's line of INFO commandstats.
type commandStat struct {
	calls int64
	usec  float64
}

// commandStats returns the server's INFO commandstats by command name
// (scripts' commands included), less the commands that open connections.
func commandStats(tb testing.TB, admin *redis.Client) map[string]commandStat {
	tb.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || connectionCommands[name] {
			continue
		}
		var st commandStat
		for _, f := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				tb.Fatalf("INFO commandstats: line %q: %v", line, err)
			}
		}
		out[name] = st
	}
	return out
}

// scriptCommands are the commands that run scripts.
var scriptCommands = []string{"fcall", "evalsha", "eval"}

// commandCalls returns the number of commands the server has run,
// scripts' commands included, less INFO itself and the commands that open
// connections, from INFO commandstats.
func commandCalls(tb testing.TB, admin *redis.Client) int64 {
	tb.Helper()
	total := int64(0)
	for _, st := range commandStats(tb, admin) {
		total += st.calls
	}
	return total
}

// serverCPU returns the CPU time the Redis server has used, user and
// system, in seconds (INFO cpu): all of its work, reading, parsing and
// answering commands included.
func serverCPU(tb testing.TB, admin *redis.Client) float64 {
	tb.Helper()
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	total := 0.0
	for _, field := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(infoValue(info, field), 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %s: %v", field, err)
		}
		total += v
	}
	return total
}

// printPlacement prints, once per benchmark binary, a line telling where
// the client and the Redis server may run: GOMAXPROCS and the CPUs of
// each process's affinity mask (Cpus_allowed_list in /proc, where there
// is one). cmd/compare -redis-run checks it for its pinned setup.
func printPlacement(tb testing.TB, admin *redis.Client) {
	placementOnce.Do(func() {
		info, err := admin.Info(context.Background(), "server").Result()
		if err != nil {
			tb.Fatalf("INFO server: %v", err)
		}
		fmt.Printf("redis-placement: client-cpus=%s gomaxprocs=%d redis-cpus=%s redis-version=%s\n",
			cpusAllowed("self"), runtime.GOMAXPROCS(0), cpusAllowed(infoValue(info, "process_id")), infoValue(info, "redis_version"))
	})
}

var placementOnce sync.Once

// cpusAllowed returns the Cpus_allowed_list of process pid ("self" for
// this one), or "?" where /proc does not tell.
func cpusAllowed(pid string) string {
	status, err := os.ReadFile("/proc/" + strings.TrimSpace(pid) + "/status")
	if err != nil {
		return "?"
	}
	if v := infoValue(string(status), "Cpus_allowed_list"); v != "" {
		return strings.TrimSpace(v)
	}
	return "?"
}

// infoValue returns the value of field in an INFO answer.
func infoValue(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// awayFromWindowEdge waits for the next window when the current one ends
// within margin: ratekit's window counters and httprate-redis's keep their
// counts per window of the wall clock, and a test of the quota must not
// see one end.
func awayFromWindowEdge(window, margin time.Duration) {
	now := time.Now()
	if left := now.Truncate(window).Add(window).Sub(now); left < margin {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// TestRedisTakersAdmitTheLimit checks that every Redis-backed library,
// configured with SlowQuota (10 per minute), admits exactly the first 10
// of 30 requests sent in a row on a key, keeps keys apart, and fails no
// decision: the benchmarks compare limiters that take the same decisions.
func TestRedisTakersAdmitTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	for _, lib := range RedisLibraries {
		t.Run(lib.Name, func(t *testing.T) {
			tk, _ := redisTaker(t, srv, lib, SlowQuota)
			awayFromWindowEdge(SlowQuota.window(), time.Second)
			for _, key := range []string{lib.Name + "-alice", lib.Name + "-bob"} {
				admitted := 0
				for i := 0; i < 30; i++ {
					if tk.Take(key) {
						if i != admitted {
							t.Fatalf("key %s: request %d admitted after a rejection", key, i)
						}
						admitted++
					}
				}
				if admitted != SlowQuota.Burst {
					t.Errorf("key %s: %d of 30 requests admitted, want %d", key, admitted, SlowQuota.Burst)
				}
			}
			if n, err := tk.Errors(); n > 0 {
				t.Errorf("%d decisions failed, the first: %v", n, err)
			}
		})
	}
}

// takeConcurrently makes n decisions with g goroutines, the i-th on
// keys[i % len(keys)], and returns how many were rejected.
func takeConcurrently(tk Taker, keys []string, g, n int) int64 {
	var next, denied atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := int64(0)
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if !tk.Take(keys[i%int64(len(keys))]) {
					d++
				}
			}
			denied.Add(d)
		}()
	}
	wg.Wait()
	return denied.Load()
}

// BenchmarkRedis compares ratekit's Redis store with the Redis-backed
// peers (RedisLibraries, redis.go) against one private redis-server,
// under FastQuota, so that every decision is an admission:
//
//	go test ./benchmarks -run '^$' -bench Redis -benchtime 2000x
//	go test ./benchmarks -run '^$' -bench 'Redis/hot-key/goroutines-64' -benchtime 5000x
//
// Each benchmark, Redis/<keys>/goroutines-<g>/<library>, makes b.N
// decisions from g goroutines (1, 8 or 64), on one hot key or spread
// over 10k keys that every library has decided once before. Every
// library has a client of its own (a pool of 10 connections per CPU, by
// go-redis's default), whose connections are opened before the timer
// starts. ns/op is wall time per decision, the inverse of decisions/s;
// allocs/op counts the client side only. cmds/decision is the number of
// commands Redis ran, those of scripts included, per decision (the
// delta of INFO commandstats, less INFO and the commands that open
// connections); roundtrips/decision the number of commands and pipelines
// the client sent; server-us/decision the CPU time the Redis server used
// per decision, in microseconds (the delta of INFO cpu, user and system:
// Redis runs commands on one thread, so this bounds the decisions per
// second one Redis can make); client-us/decision the CPU time of this
// process, the client side, per decision (getrusage, user and system;
// on Unix only); goroutines/decision the goroutines the process created
// per decision (runtime/metrics). denied/op and errors/op appear when
// some decisions were rejected or failed: such a result did not measure
// admissions only.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	printPlacement(b, admin)
	for _, ks := range []struct {
		name string
		keys []string
	}{
		{"hot-key", []string{"hot"}},
		{"10k-keys", Keys(10_000)},
	} {
		b.Run(ks.name, func(b *testing.B) {
			takers := make([]RedisTaker, len(RedisLibraries))
			trips := make([]*roundTrips, len(RedisLibraries))
			for i, lib := range RedisLibraries {
				takers[i], trips[i] = redisTaker(b, srv, lib, FastQuota)
				// Every key exists before the benchmarks, which then
				// measure updates only. On a loaded machine a first
				// request may fail by its deadline; the quota admits
				// everything, so the keys are taken again, a few times.
				d := takeConcurrently(takers[i], ks.keys, 8, len(ks.keys))
				for try := 0; d > 0 && try < 3; try++ {
					b.Logf("%s: %d first requests rejected or failed; taking every key again", lib.Name, d)
					d = takeConcurrently(takers[i], ks.keys, 8, len(ks.keys))
				}
				if d > 0 {
					b.Fatalf("%s: %d first requests rejected", lib.Name, d)
				}
			}
			for _, g := range []int{1, 8, 64} {
				b.Run(fmt.Sprintf("goroutines-%d", g), func(b *testing.B) {
					for i, lib := range RedisLibraries {
						b.Run(lib.Name, benchRedis(admin, takers[i], trips[i], ks.keys, g))
					}
				})
			}
			for i, lib := range RedisLibraries {
				if n, err := takers[i].Errors(); n > 0 {
					b.Logf("%s: %d decisions failed, the first: %v", lib.Name, n, err)
				}
			}
		})
	}
}

func benchRedis(admin *redis.Client, tk RedisTaker, rt *roundTrips, keys []string, g int) func(*testing.B) {
	return func(b *testing.B) {
		// Open the connections g goroutines use, outside the timer.
		takeConcurrently(tk, keys, g, 4*g)
		errors0, _ := tk.Errors()
		trips0 := rt.n.Load()
		calls0 := commandCalls(b, admin)
		cpu0 := serverCPU(b, admin)
		client0 := processCPU(b)
		created0 := goroutinesCreated()
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		denied := takeConcurrently(tk, keys, g, b.N)
		elapsed := time.Since(start)
		b.StopTimer()
		client := processCPU(b) - client0
		created := goroutinesCreated() - created0
		if client0 < 0 {
			client = -1
		}
		calls := commandCalls(b, admin) - calls0
		cpu := serverCPU(b, admin) - cpu0
		errors, _ := tk.Errors()
		n := float64(b.N)
		b.ReportMetric(n/elapsed.Seconds(), DecisionsPerSecond)
		b.ReportMetric(float64(calls)/n, CommandsPerDecision)
		b.ReportMetric(float64(rt.n.Load()-trips0)/n, RoundTripsPerDecision)
		b.ReportMetric(cpu*1e6/n, ServerMicrosPerDecision)
		if client >= 0 {
			b.ReportMetric(client.Seconds()*1e6/n, ClientMicrosPerDecision)
		}
		b.ReportMetric(float64(created)/n, GoroutinesPerDecision)
		reportDenied(b, denied)
		if errors > errors0 {
			b.ReportMetric(float64(errors-errors0)/n, ErrorsPerDecision)
		}
	}
}
