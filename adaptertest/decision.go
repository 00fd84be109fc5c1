package adaptertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DecisionTrace checks an adapter's WithDecisionInContext option with one
// trace: the limiter is a fixed window of 2 requests per minute named
// "api", on an injected clock; get serves a GET of path with client in the
// X-Client header (no header when client is "") and returns its status;
// got returns the decisions the handlers after the middleware read with
// DecisionFrom, in order. Path "/on" has the option on, "/off" off; again
// is the path of the second request of the client "alice": "/on", or
// another route with the option on (a Config form of it).
//
// A request passed on with the option carries its decision; one without
// the option, or one not passed on (429, or 400 for a missing key),
// carries none.
func DecisionTrace(t *testing.T, get func(path, client string) int, got func() []core.Decision, again string) {
	t.Helper()
	status := func(path, client string, want int) {
		t.Helper()
		if s := get(path, client); s != want {
			t.Errorf("GET %s as %q: status %d, want %d", path, client, s, want)
		}
	}
	status("/on", "alice", http.StatusOK)
	ds := got()
	if len(ds) != 1 {
		t.Fatalf("after one request with the option: %d decisions, want 1", len(ds))
	}
	d := ds[0]
	if !d.Allowed || d.Name != "api" || d.Quota != 2 || d.Remaining != 1 || d.Window != time.Minute {
		t.Errorf("decision %+v, want allowed, api, quota 2, remaining 1, window 1m", d)
	}

	status("/off", "bob", http.StatusOK)
	if n := len(got()); n != 1 {
		t.Errorf("off by default: %d decisions, want 1", n)
	}
	status(again, "alice", http.StatusOK)
	status("/on", "alice", http.StatusTooManyRequests)
	status("/on", "", http.StatusBadRequest)
	ds = got()
	if len(ds) != 2 {
		t.Fatalf("only requests passed on carry a decision: %d decisions, want 2", len(ds))
	}
	if ds[1].Remaining != 0 {
		t.Errorf("second decision: remaining %d, want 0", ds[1].Remaining)
	}
}
