#!/bin/bash
# fcall-cost.sh REV [PORT]: the time Redis spends on one lone token-bucket
# decision (INFO commandstats usec_per_call of FCALL), for the decision
# code of git revision REV against the working tree's, in three alternating
# rounds of redis-benchmark -n 200000 -c 8, on a private redis-server
# started on PORT (default 16399) and stopped by PID.
set -euo pipefail
rev=${1:?usage: fcall-cost.sh REV [PORT]}
port=${2:-16399}
dir=$(mktemp -d)
root=$(git rev-parse --show-toplevel)
git -C "$root" show "$rev:redisstore/decide.lua" >"$dir/before.lua"
cp "$root/redisstore/decide.lua" "$dir/after.lua"
redis-server --port "$port" --save '' --appendonly no --daemonize yes \
	--pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid")"; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
for v in before after; do
	redis-cli -p "$port" FUNCTION LOAD "#!lua name=rk_$v
$(cat "$dir/$v.lua")
redis.register_function('rk_$v', function(keys, argv) return many(keys, argv, false) end)" >/dev/null
done
# 100 per minute, token bucket, in microseconds (see redisstore.limitSpec).
spec="1000 1000 1 100 60000000 100 600000 60000000 0 0 0"
for round in 1 2 3; do
	for v in before after; do
		redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
		redis-benchmark -p "$port" -n 200000 -c 8 -q FCALL "rk_$v" 1 "rk{abc$v}t" "$spec" 1 1 "" >/dev/null
		echo "$v, round $round: $(redis-cli -p "$port" INFO commandstats | grep cmdstat_fcall: | grep -o 'usec_per_call=[0-9.]*')"
	done
done
