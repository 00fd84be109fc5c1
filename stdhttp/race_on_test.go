//go:build race

package stdhttp_test

// raceEnabled reports whether the tests run under the race detector, which
// instruments memory accesses and makes sync.Pool drop pooled values at
// random, so that allocation counts are noise.
const raceEnabled = true
