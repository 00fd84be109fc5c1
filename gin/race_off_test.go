//go:build !race

package ratekitgin_test

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
