//go:build linux

package rlsproc

import "syscall"

// sysProcAttr makes the kernel kill the child when the thread that started
// it ends, so that no server outlives a harness that crashed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
