#!/bin/bash
# trace-switches.sh TRACE: goroutine switches per decision in a trace of
# BenchmarkRedisLone (go test -trace), counted between the user log events
# "start N" and "end" of its last timed loop: goroutines put to run
# (Runnable->Running), blocking (Running->Waiting, by reason), system
# calls (Running->Syscall), goroutines created (NotExist->Runnable), each
# divided by N.
#
#	go test ./benchmarks -run '^$' -bench 'RedisLone/ratekit$' -benchtime 5000x -trace /tmp/t.out
#	benchmarks/scripts/trace-switches.sh /tmp/t.out
set -euo pipefail
trace=${1:?usage: trace-switches.sh TRACE}
go tool trace -d=parsed "$trace" 2>/dev/null | awk '
	/ Log .*Category="lone"/ {
		if ($0 ~ /Message="start /) { m = $0; sub(/.*Message="start /, "", m); sub(/".*/, "", m); n = m + 0; delete c; on = 1 }
		else if ($0 ~ /Message="end"/) { on = 0; for (k in c) last[k] = c[k]; lastn = n }
		next
	}
	on && / StateTransition .*GoID=/ {
		tr = ""; for (i = 1; i <= NF; i++) if ($i ~ /->/) tr = $i
		r = $0; sub(/.*Reason=/, "", r)
		if (tr == "Running->Waiting") tr = tr " " r
		c[tr]++
	}
	END {
		if (lastn == 0) { print "no timed loop in the trace"; exit 1 }
		printf "decisions: %d\n", lastn
		for (k in last) printf "%8.3f per decision  %s\n", last[k] / lastn, k
	}' | sort -k1,1 -rn
