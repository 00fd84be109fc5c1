// Package unixtime places a time within periods counted from the Unix
// epoch, for any time.Time: before 1970 and after 2262, where the
// nanoseconds since the epoch do not fit an int64, included.
package unixtime

import (
	"math/bits"
	"time"
)

// Mod returns the nanoseconds since the start of the period of length
// period (nanoseconds, positive) that t falls in, periods being counted
// from the Unix epoch: t's Unix time in nanoseconds modulo period, in
// [0, period).
func Mod(t time.Time, period int64) int64 {
	sec := t.Unix() % period
	if sec < 0 {
		sec += period
	}
	hi, lo := bits.Mul64(uint64(sec), uint64(time.Second))
	return (int64(bits.Rem64(hi, lo, uint64(period))) + int64(t.Nanosecond())) % period
}
