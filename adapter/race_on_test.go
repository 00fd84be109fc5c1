//go:build race

package adapter_test

// raceEnabled reports whether the tests run under the race detector, which
// instruments memory accesses, so that allocation counts are noise.
const raceEnabled = true
