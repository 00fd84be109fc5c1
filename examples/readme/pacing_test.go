package readme

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
)

// TestPacingSnippets builds the fleet's client (nothing is sent to Redis)
// and runs the call snippet through a limiter in memory: sent while the
// budget lasts, then reported as limited, not sent, when the next turn is
// past the deadline.
func TestPacingSnippets(t *testing.T) {
	if hc, err := fleetClient(); err != nil || hc == nil {
		t.Fatalf("fleetClient: %v", err)
	}
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	defer srv.Close()
	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(1)}))
	rt, err := client.New(nil, client.WithLimiter(lim, nil))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: rt}
	resp, limited, err := callPaced(context.Background(), hc, srv.URL)
	if err != nil || limited || resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %v, limited %t", err, limited)
	}
	resp.Body.Close()
	resp, limited, err = callPaced(context.Background(), hc, srv.URL)
	if err != nil || !limited || resp != nil {
		t.Fatalf("second call: %v, limited %t, response %v", err, limited, resp)
	}
	if n := served.Load(); n != 1 {
		t.Fatalf("the server got %d requests, want 1", n)
	}
}
