//go:build linux

package main

import "syscall"

// sysProcAttr makes the kernel kill the floor when the thread that
// started it ends, so that it does not outlive a comparison that crashed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
