//go:build !race

package ratekitecho5_test

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
