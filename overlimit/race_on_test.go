//go:build race

package overlimit

const raceEnabled = true
