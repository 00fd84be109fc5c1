package readme

// snippet: quickstart
import (
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// end snippet

import (
	"fmt"
	"net/http"
)

// quickStart is the quick start for net/http: mux behind a limit of 100
// requests a minute per client IP.
func quickStart(mux *http.ServeMux) http.Handler {
	// snippet: quickstart
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	handler := stdhttp.New(lim, keyfuncs.PeerIP)(mux) // Chi: r.Use(stdhttp.New(lim, keyfuncs.PeerIP))
	// end snippet
	return handler
}

// moreLimits registers POST /login, limited to 5 a minute, and /api/,
// limited to 10 a second and 1000 an hour, on mux.
func moreLimits(mux *http.ServeMux, loginHandler, apiHandler http.Handler) {
	// snippet: quickstart-more
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))
	mux.Handle("POST /login", stdhttp.New(login, keyfuncs.PeerIP)(loginHandler))

	// 10 per second and 1000 per hour: a request passes only if both admit it,
	// and a rejected request is counted by neither.
	api := core.Must(core.NewLimiter(
		core.Limit{Name: "burst", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)},
		core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.SlidingWindowCounter, Rate: core.PerHour(1000)}),
	))
	mux.Handle("/api/", stdhttp.New(api, keyfuncs.PeerIP)(apiHandler))
	// end snippet
}

// quotaRoute registers /quota, limited by lim, which answers the requests
// left from the decision in the request context.
func quotaRoute(lim *core.Limiter, mux *http.ServeMux) {
	// snippet: decision
	limited := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithDecisionInContext())
	mux.Handle("/quota", limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := stdhttp.DecisionFrom(r.Context()); ok {
			fmt.Fprintf(w, "%d requests left under %q\n", d.Remaining, d.Name)
		}
	})))
	// end snippet
}
