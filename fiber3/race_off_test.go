//go:build !race

package ratekitfiber3_test

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
