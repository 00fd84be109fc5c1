//go:build unix

package core_test

import "syscall"

// cpuTime returns the CPU time the process has used, user and system, in
// nanoseconds, over all its threads.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
