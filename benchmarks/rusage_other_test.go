//go:build !unix

package benchmarks

import (
	"testing"
	"time"
)

// processCPU returns -1: the process's CPU time is read on Unix only.
func processCPU(testing.TB) time.Duration { return -1 }

// contextSwitches returns -1: they are read on Unix only.
func contextSwitches() int64 { return -1 }
