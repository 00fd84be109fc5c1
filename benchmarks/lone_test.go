package benchmarks

import (
	"context"
	"runtime/metrics"
	"runtime/trace"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/redistest"
)

// BenchmarkRedisLone measures the lone decision, one goroutine on a hot
// key, against plain go-redis round trips that do the same or less work
// in Redis, so that what ratekit's client path adds shows:
//
//	go test ./benchmarks -run '^$' -bench RedisLone -benchtime 5000x -count 3
//	go test ./benchmarks -run '^$' -bench 'RedisLone/ratekit$' -benchtime 5000x -cpuprofile cpu.out -trace trace.out
//
// The sub-benchmarks:
//
//	evalsha-trivial   go-redis EvalSha of "return 1" on one key
//	fcall-same-args   go-redis Do of the very FCALL ratekit sends for a
//	                  decision (captured from its client): the same Redis
//	                  work, without ratekit's client path
//	fcall-deadline    the same, under a context deadline per call, on a
//	                  client with ContextTimeoutEnabled (what the store
//	                  does to bound a decision)
//	ratekit           core.Limiter.Take on redisstore, token bucket
//	ratekit-fixed-window, ratekit-default-options, ulule-limiter,
//	go-redis-redis_rate: as in
//	                  BenchmarkRedis
//
// Besides the metrics of BenchmarkRedis, each reports the time Redis
// spent in the commands that run scripts (script-us/decision, INFO
// commandstats), the OS context
// switches of the client process per decision (getrusage, voluntary and
// involuntary: a thread that blocks in futex or epoll to hand work over)
// and the goroutines it created per decision (runtime/metrics). Under
// -trace, the timed decisions lie between two user log events, category
// "lone", "start N" and "end", so that scripts/trace-switches.sh counts
// the goroutine switches of the decisions alone.
func BenchmarkRedisLone(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	lib := func(name string) RedisLibrary {
		for _, l := range RedisLibraries {
			if l.Name == name {
				return l
			}
		}
		b.Fatalf("no library %s", name)
		return RedisLibrary{}
	}

	// The FCALL of one ratekit decision, as its client sends it.
	spy := &lastArgs{}
	{
		rdb := redis.NewClient(lib("ratekit").ClientOptions(srv.Addr()))
		rdb.AddHook(spy)
		tk, err := lib("ratekit").New(rdb, FastQuota)
		if err != nil {
			b.Fatal(err)
		}
		tk.Take("lone")
		tk.Close()
		_ = rdb.Close()
	}
	fcall := spy.get()
	if len(fcall) == 0 || fcall[0] != "fcall" {
		b.Fatalf("ratekit's decision was not an FCALL: %v", fcall)
	}
	b.Logf("ratekit's FCALL: %q", fcall)

	plain := func(opts *redis.Options, op func(context.Context, *redis.Client) error, deadline bool) func(b *testing.B) {
		return func(b *testing.B) {
			rdb := redis.NewClient(opts)
			defer rdb.Close()
			one := func() error {
				if !deadline {
					return op(ctx, rdb)
				}
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return op(ctx, rdb)
			}
			for range 4 {
				if err := one(); err != nil {
					b.Fatal(err)
				}
			}
			loneLoop(b, admin, func() bool { return one() == nil })
		}
	}
	sha, err := admin.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("evalsha-trivial", plain(&redis.Options{Addr: srv.Addr()}, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.EvalSha(ctx, sha, []string{"lone"}).Err()
	}, false))
	b.Run("fcall-same-args", plain(&redis.Options{Addr: srv.Addr()}, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.Do(ctx, fcall...).Err()
	}, false))
	b.Run("fcall-deadline", plain(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.Do(ctx, fcall...).Err()
	}, true))
	for _, name := range []string{"ratekit", "ratekit-fixed-window", "ratekit-default-options", "ulule-limiter", "go-redis-redis_rate"} {
		b.Run(name, func(b *testing.B) {
			tk, _ := redisTaker(b, srv, lib(name), FastQuota)
			for range 4 {
				tk.Take("lone")
			}
			loneLoop(b, admin, func() bool { return tk.Take("lone") })
			if n, err := tk.Errors(); n > 0 {
				b.Fatalf("%d decisions failed, the first: %v", n, err)
			}
		})
	}
}

// loneLoop runs take b.N times from this goroutine and reports the
// metrics of a lone decision.
func loneLoop(b *testing.B, admin *redis.Client, take func() bool) {
	cpu0 := serverCPU(b, admin)
	script0 := scriptMicros(b, admin)
	client0 := processCPU(b)
	switches0 := contextSwitches()
	created0 := goroutinesCreated()
	b.ReportAllocs()
	b.ResetTimer()
	// Under go test -trace, the decisions are between these two events.
	trace.Log(context.Background(), "lone", "start "+strconv.Itoa(b.N))
	failed := 0
	for range b.N {
		if !take() {
			failed++
		}
	}
	trace.Log(context.Background(), "lone", "end")
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric((serverCPU(b, admin)-cpu0)*1e6/n, ServerMicrosPerDecision)
	b.ReportMetric((scriptMicros(b, admin)-script0)/n, "script-us/decision")
	if client0 >= 0 {
		b.ReportMetric((processCPU(b)-client0).Seconds()*1e6/n, ClientMicrosPerDecision)
	}
	if switches0 >= 0 {
		b.ReportMetric(float64(contextSwitches()-switches0)/n, "ctxsw/decision")
	}
	b.ReportMetric(float64(goroutinesCreated()-created0)/n, GoroutinesPerDecision)
	if failed > 0 {
		b.ReportMetric(float64(failed)/n, ErrorsPerDecision)
	}
}

// scriptMicros returns the microseconds Redis has spent running FCALL,
// EVALSHA and EVAL commands, their scripts' commands included (INFO
// commandstats, usec): the time inside Redis, without reading requests
// or writing answers.
func scriptMicros(tb testing.TB, admin *redis.Client) float64 {
	tb.Helper()
	stats := commandStats(tb, admin)
	total := 0.0
	for _, cmd := range scriptCommands {
		total += stats[cmd].usec
	}
	return total
}

// goroutinesCreated returns the number of goroutines this process has
// created.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// lastArgs is a go-redis hook that keeps the arguments of the last
// command, pointers to strings read.
type lastArgs struct {
	mu   sync.Mutex
	args []any
}

func (h *lastArgs) get() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.args
}

func (h *lastArgs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lastArgs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := make([]any, len(cmd.Args()))
		for i, a := range cmd.Args() {
			if p, ok := a.(*string); ok {
				a = *p
			}
			args[i] = a
		}
		h.mu.Lock()
		h.args = args
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *lastArgs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
