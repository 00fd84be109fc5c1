//go:build !linux

package main

import "syscall"

// sysProcAttr returns nothing special outside Linux.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
