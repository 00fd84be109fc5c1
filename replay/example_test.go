package replay_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
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

// Suggest a limit from the normal clients: the busiest normal client's
// peak with 50% headroom. Nine clients send 2 to 10 requests in one
// minute, and an abuser 41, as many as all of them together. The median
// client's peak is 4, so a client peaking above 10 x 4 = 40 is an
// outlier: the abuser. The busiest normal client sent 10, so the
// suggestion is 10 x 1.5 = 15 a minute, which refuses the abuser 26 of
// its 41 requests and no normal client any.
func ExampleRun_headroom() {
	type request struct {
		at     time.Time
		client string
	}
	var requests []request
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for i, n := range []int{2, 3, 3, 4, 4, 4, 5, 6, 10, 41} {
		client := fmt.Sprintf("10.0.0.%d", i+1)
		if n == 41 {
			client = "10.0.0.99"
		}
		for j := range n { // evenly over the minute
			requests = append(requests, request{start.Add(time.Duration(j) * time.Minute / time.Duration(n)), client})
		}
	}
	slices.SortStableFunc(requests, func(a, b request) int { return a.at.Compare(b.at) })
	var accessLog strings.Builder
	for _, r := range requests {
		fmt.Fprintf(&accessLog, "%s - - [%s] \"GET / HTTP/1.1\" 200 5\n", r.client, r.at.Format("02/Jan/2006:15:04:05 -0700"))
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(accessLog.String())), nil }
	rep, err := replay.Run(context.Background(), replay.Options{
		Limits:   []core.Limit{{Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(100)}},
		Headroom: 1.5,
		ShowKeys: true,
	}, replay.Input{Name: "access.log", Open: open})
	if err != nil {
		log.Fatal(err)
	}
	n, s := rep.Normal, rep.Suggestions[0]
	fmt.Printf("busiest normal client: %s, %d per %s\n", n.BusiestClient, n.BusiestPeak, n.Period)
	fmt.Printf("suggested: %d per %s (%gx), normal clients limited: %d of %d\n", s.Limit, s.Period, s.Headroom, s.NormalLimited, s.NormalClients)
	for _, x := range s.Outliers {
		fmt.Printf("outlier %s: peak %d, %d of its %d requests refused\n", x.Key, x.Peak, x.Rejected, x.Requests)
	}
	// Output:
	// busiest normal client: 10.0.0.9, 10 per 1m0s
	// suggested: 15 per 1m0s (1.5x), normal clients limited: 0 of 9
	// outlier 10.0.0.99: peak 41, 26 of its 41 requests refused
}
