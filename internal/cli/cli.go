// Package cli holds what ratekit's commands (the demo, ratekit) share on
// their command lines: an error for bad arguments, which exits with
// status 2, and the exit status of a run's error.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// A UsageError reports bad command-line arguments: exit status 2.
type UsageError struct {
	Err error
	// Reported is set when the message is printed already (by the flag
	// package, or with the usage).
	Reported bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError of the formatted message (%w wraps).
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Reported returns err as a UsageError whose message is printed already.
func Reported(err error) error {
	return &UsageError{Err: err, Reported: true}
}

// ExitCode prints err to stderr after the command's name, unless it is
// printed already, and returns the exit status for it: 0 for none (or
// -help), 2 for a UsageError, 1 otherwise.
func ExitCode(command string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		if !ue.Reported {
			fmt.Fprintln(stderr, command+":", err)
		}
		return 2
	}
	fmt.Fprintln(stderr, command+":", err)
	return 1
}
