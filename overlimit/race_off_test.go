//go:build !race

package overlimit

const raceEnabled = false
