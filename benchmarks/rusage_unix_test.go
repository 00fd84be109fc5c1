//go:build unix

package benchmarks

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time, user and system, that this process
// (the benchmark's client side: every goroutine, the garbage collector
// included) has used.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// contextSwitches returns the OS context switches of this process's
// threads, voluntary and involuntary.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return int64(ru.Nvcsw + ru.Nivcsw)
}
