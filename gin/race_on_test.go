//go:build race

package ratekitgin_test

// raceEnabled reports whether the tests run under the race detector, which
// makes sync.Pool drop pooled values at random: Gin's pooled contexts are
// then reallocated, and allocation counts are noise.
const raceEnabled = true
