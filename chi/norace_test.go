//go:build !race

package ratekitchi_test

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
