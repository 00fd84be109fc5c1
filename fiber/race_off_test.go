//go:build !race

package ratekitfiber_test

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
