//go:build !race

package adaptertest

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
