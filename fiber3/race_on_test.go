//go:build race

package ratekitfiber3_test

// raceEnabled reports whether the tests run under the race detector, which
// makes sync.Pool drop pooled values at random: the rules engine's pooled
// walkers are then reallocated, and allocation counts are noise.
const raceEnabled = true
