package replay_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/replay"
)

func optionsAll() replay.Options {
	return replay.Options{Limits: all(3, time.Minute), TargetLimited: 0.5}
}

// Replay a log through a fixed window of 2 per minute and the exact
// sliding window log, side by side: the fixed window lets the client
// through at the window boundary, 4 requests within 20 seconds.
func ExampleRun() {
	const accessLog = `192.0.2.1 - - [01/May/2024:12:00:40 +0000] "GET / HTTP/1.1" 200 5
192.0.2.1 - - [01/May/2024:12:00:50 +0000] "GET / HTTP/1.1" 200 5
192.0.2.1 - - [01/May/2024:12:01:00 +0000] "GET / HTTP/1.1" 200 5
192.0.2.1 - - [01/May/2024:12:01:00 +0000] "GET / HTTP/1.1" 200 5
`
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(accessLog)), nil }
	rep, err := replay.Run(context.Background(), replay.Options{
		Limits: []core.Limit{
			{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
			{Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(2)},
		},
	}, replay.Input{Name: "access.log", Open: open})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range rep.Limits {
		fmt.Printf("%s: %d admitted, %d rejected, at most %d admitted in one %s\n",
			l.Algorithm, l.Admitted, l.Rejected, l.MaxAdmittedInPeriod, l.Period)
	}
	// Output:
	// fixed-window: 4 admitted, 0 rejected, at most 4 admitted in one 1m0s
	// sliding-window-log: 2 admitted, 2 rejected, at most 2 admitted in one 1m0s
}
