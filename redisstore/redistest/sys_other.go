//go:build !unix

package redistest

import "os"

// Pause and Resume need job-control signals, which this platform lacks;
// a nil signal makes them fail the test with an explanation.
var sigStop, sigCont os.Signal
