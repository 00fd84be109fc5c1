package benchmarks

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// BenchmarkRedisScriptCost measures the time Redis spends running one
// decision's script: ratekit's FCALL beside the peer's EVALSHA for the same
// algorithm, one limit, one goroutine, on one hot key and on 10k keys,
// against a private redis-server:
//
//	go test ./benchmarks -run '^$' -bench RedisScriptCost -benchtime 20000x -count 3
//	RATEKIT_DECIDE_LUA=/tmp/wt/redisstore/decide.lua go test ./benchmarks -run '^$' -bench RedisScriptCost -benchtime 20000x
//
// Each sub-benchmark runs every key once, then CONFIG RESETSTAT, then
// b.N decisions, and reads INFO commandstats: script-us/call is the
// usec of the FCALL or EVALSHA entry divided by its calls (the script's
// commands included; reading the request and writing the answer are not),
// calls/decision checks that a decision is one script call, and
// inner-us/decision is the time of the commands the script ran (TIME,
// GET, SET, INCRBY...), so that script-us/call less it is the Lua's own
// share.
//
// The runners, per algorithm (token-bucket, fixed-window,
// sliding-window-counter):
//
//	ratekit               core.Limiter.Take on redisstore, as in BenchmarkRedis
//	ratekit-client-clock  the same FCALL with the decision's time given by
//	                      the client instead of read from Redis TIME (the
//	                      argument a test clock sets): for a bucket, what
//	                      TIME costs; a window then also sets its key's TTL
//	                      on every take (SET ... PX, not INCRBY), as the
//	                      script does for any time that is not Redis's
//	ratekit-alt           the same FCALL sent to a library built from the
//	                      decide.lua that RATEKIT_DECIDE_LUA names (an
//	                      older revision's, say), loaded beside the store's
//	                      on the same server: runs just after ratekit, so
//	                      that the two are compared under the same load
//	go-redis-redis_rate   the token bucket's peer (GCRA, EVALSHA)
//	ulule-limiter         the fixed window's peer (INCRBY and PTTL, EVALSHA)
func BenchmarkRedisScriptCost(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	alt := ""
	if path := os.Getenv("RATEKIT_DECIDE_LUA"); path != "" {
		src, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		alt = "ratekit_alt"
		lib := "#!lua name=" + alt + "\n" + string(src) + "\nredis.register_function('" + alt +
			"', function(keys, argv) return many(keys, argv, false) end)\n"
		if err := admin.FunctionLoad(ctx, lib).Err(); err != nil {
			b.Fatalf("loading %s: %v", path, err)
		}
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}

	ratekit := func(l core.Limit) func(*redis.Client, Quota) (RedisTaker, error) {
		return func(rdb *redis.Client, _ Quota) (RedisTaker, error) { return newRatekitRedisLimit(rdb, l) }
	}
	window := min(FastQuota.window(), maxWindow)
	algs := []struct {
		name string
		new  func(*redis.Client, Quota) (RedisTaker, error)
		peer *RedisLibrary
	}{
		{"token-bucket", newRatekitRedis, redisLibrary(b, "go-redis-redis_rate")},
		{"fixed-window", newRatekitRedisWindow, redisLibrary(b, "ulule-limiter")},
		{"sliding-window-counter", ratekit(core.Limit{Name: "bench-counter", Algorithm: core.SlidingWindowCounter,
			Rate: core.Rate{Count: FastQuota.Burst, Period: window}}), nil},
	}
	for _, alg := range algs {
		type runner struct {
			name string
			hook redis.Hook
			new  func(*redis.Client, Quota) (RedisTaker, error)
		}
		runners := []runner{
			{"ratekit", nil, alg.new},
			{"ratekit-client-clock", fcallRewrite{clock: true}, alg.new},
		}
		if alt != "" {
			runners = append(runners, runner{"ratekit-alt", fcallRewrite{function: alt}, alg.new})
		}
		if alg.peer != nil {
			runners = append(runners, runner{alg.peer.Name, nil, alg.peer.New})
		}
		for _, spread := range []int{1, len(keys)} {
			for _, r := range runners {
				b.Run(fmt.Sprintf("%s/keys=%d/%s", alg.name, spread, r.name), func(b *testing.B) {
					rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
					defer rdb.Close()
					if r.hook != nil {
						rdb.AddHook(r.hook)
					}
					tk, err := r.new(rdb, FastQuota)
					if err != nil {
						b.Fatal(err)
					}
					defer tk.Close()
					for i := range max(spread, 4) {
						tk.Take(keys[i%spread])
					}
					if err := admin.ConfigResetStat(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for i := range b.N {
						tk.Take(keys[(i*7919)%spread])
					}
					b.StopTimer()
					if n, err := tk.Errors(); n > 0 {
						b.Fatalf("%d decisions failed, the first: %v", n, err)
					}
					reportScriptCost(b, admin)
				})
			}
		}
	}
}

// redisLibrary returns the RedisLibrary of the given name.
func redisLibrary(tb testing.TB, name string) *RedisLibrary {
	for i := range RedisLibraries {
		if RedisLibraries[i].Name == name {
			return &RedisLibraries[i]
		}
	}
	tb.Fatalf("no library %s", name)
	return nil
}

// reportScriptCost reports, from INFO commandstats since CONFIG
// RESETSTAT, the usec per call of the script commands (FCALL, EVALSHA,
// EVAL), their calls per decision and the usec per decision of the
// commands the scripts ran.
func reportScriptCost(b *testing.B, admin *redis.Client) {
	b.Helper()
	var scriptCalls, scriptUsec, innerUsec float64
	for name, st := range commandStats(b, admin) {
		switch {
		case name == "config|resetstat":
		case slices.Contains(scriptCommands, name):
			scriptCalls += float64(st.calls)
			scriptUsec += st.usec
		default:
			innerUsec += st.usec
		}
	}
	if scriptCalls == 0 {
		b.Fatal("no script ran")
	}
	n := float64(b.N)
	b.ReportMetric(scriptUsec/scriptCalls, "script-us/call")
	b.ReportMetric(scriptCalls/n, "calls/decision")
	b.ReportMetric(innerUsec/n, "inner-us/decision")
}

// fcallRewrite is a go-redis hook that changes ratekit's FCALLs of one
// decision: the function called, when function is set, and, with clock,
// the decision's time, from "" (read Redis TIME) to the client's clock in
// microseconds, the scripts' unit.
type fcallRewrite struct {
	function string
	clock    bool
}

func (h fcallRewrite) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h fcallRewrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 3 && args[0] == "fcall" {
			if h.function != "" {
				args[1] = h.function
			}
			if h.clock {
				// FCALL function numkeys key... spec mode cost now: the
				// time is the fourth argument after the keys.
				nkeys, err := strconv.Atoi(fmt.Sprint(args[2]))
				if i := 3 + nkeys + 3; err == nil && i < len(args) {
					args[i] = strconv.FormatInt(time.Now().UnixMicro(), 10)
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (h fcallRewrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
