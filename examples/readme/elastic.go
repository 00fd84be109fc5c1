package readme

import (
	"net/http"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// elasticAPI serves mux behind a limit of 100 requests an hour per client
// IP that stretches to 200 while the work queue jobs is less than half
// full.
func elasticAPI(jobs chan func(), mux http.Handler) (http.Handler, error) {
	// snippet: elastic
	// Room while the work queue (a buffered channel the handlers feed) is less
	// than half full. Any fast func() bool will do: CPU, memory, queue depth.
	spare := func() bool { return len(jobs) < cap(jobs)/2 }
	lim, err := core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(100)},
		core.WithElastic(100, spare), // up to 200 an hour while there is room
	)
	if err != nil {
		return nil, err
	}
	handler := stdhttp.New(lim, keyfuncs.PeerIP)(mux)
	// end snippet
	return handler, nil
}
