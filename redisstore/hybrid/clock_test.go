package hybrid

import (
	"math"
	"testing"
	"time"
)

// TestClockHoldsSmallStepsBack runs the store's clock through readings
// of Redis's clock by hand: between readings it runs on this server's
// clock; a reading up to maxStepBack behind what the clock says holds it
// still until it catches up, so that it never re-enters a window it left;
// a reading further behind (Redis's clock was set back) is taken at once;
// one ahead is taken at once.
func TestClockHoldsSmallStepsBack(t *testing.T) {
	local := time.Unix(1000, 0) // this server's clock, by hand
	h := &Store{config: config{localClock: func() time.Time { return local }}}
	at := func(s float64) int64 { return int64(math.Round(s*1000)) * int64(time.Millisecond) } // s in seconds, to the millisecond
	check := func(step string, want int64) {
		t.Helper()
		if got := h.now().UnixNano(); got != want {
			t.Fatalf("%s: the clock reads %.3f s, want %.3f s", step, float64(got)/1e9, float64(want)/1e9)
		}
	}
	ms := time.Millisecond

	check("before any reading: this server's clock", at(1000))
	// Sent at 1000, answered at 1000.010: Redis read 5000 at 1000.005.
	h.clockRead(at(5000), local, local.Add(10*ms))
	local = local.Add(10 * ms)
	check("first reading", at(5000.005))
	local = local.Add(1000 * ms)
	check("a second later, on this server's clock", at(5001.005)) // window 5001 of a 1 s period

	// Sent at 1001.010, answered at 1001.020: Redis read 5000.510 at
	// 1001.015, 0.5 s behind the clock's 5001.010 (window 5000).
	h.clockRead(at(5000.510), local, local.Add(10*ms))
	local = local.Add(10 * ms)
	check("0.5 s back: held", at(5001.015))
	local = local.Add(300 * ms)
	check("held while the reading catches up", at(5001.015))
	local = local.Add(200 * ms)
	check("caught up: on the reading", at(5001.015)) // 5000.510 + 0.505
	local = local.Add(100 * ms)
	check("past it", at(5001.115))

	// Redis's clock was set back 1.5 s: taken at once.
	h.clockRead(at(4999.62), local, local.Add(10*ms))
	local = local.Add(10 * ms)
	check("1.5 s back: taken", at(4999.625))

	// A reading ahead is taken at once.
	h.clockRead(at(5010), local, local.Add(10*ms))
	local = local.Add(10 * ms)
	check("ahead: taken", at(5010.005))

	// Under WithClock, readings change nothing.
	h.clock = func() time.Time { return time.Unix(7, 0) }
	h.clockRead(at(9000), local, local)
	check("WithClock", at(7))
}
