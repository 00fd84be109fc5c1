//go:build linux

package redistest

import "syscall"

// sysProcAttr asks the kernel to SIGKILL the redis-server when the test
// binary dies without running its cleanups (for example when go test kills
// it after -timeout), so that no orphan server outlives the test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
