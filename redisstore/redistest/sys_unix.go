//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// Signals used by Pause and Resume. They exist on Unix only.
var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)
