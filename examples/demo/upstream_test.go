package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/stdhttp"
)

// TestUpstream: GET /upstream calls the demo's provider, paced; the
// provider never answers 429 (demotest.CheckUpstream).
func TestUpstream(t *testing.T) { demotest.CheckUpstream(t, demo.StdHTTP) }

// waitedRE reads the wait of an answer of GET /upstream.
var waitedRE = regexp.MustCompile(`^upstream: 200 OK after waiting (\S+) for its turn\n$`)

// burst sends n calls of GET /upstream to the demos at once, in turn, and
// requires each to be answered 200 by the provider at the first attempt;
// it returns the longest wait.
func burst(t *testing.T, n int, demos ...*demotest.Demo) time.Duration {
	t.Helper()
	calls := make([]<-chan demotest.Response, n)
	for i := range calls {
		calls[i] = demos[i%len(demos)].GoDo("GET", "/upstream")
	}
	var longest time.Duration
	for i, ch := range calls {
		r := demotest.Receive(t, ch)
		require.Equal(t, http.StatusOK, r.Status, "call %d: %s", i+1, r.Body)
		m := waitedRE.FindStringSubmatch(r.Body)
		require.NotNil(t, m, "call %d, one attempt: %q", i+1, r.Body)
		waited, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		longest = max(longest, waited)
	}
	return longest
}

// TestUpstreamBurst: on the system clock, a burst of calls waits for the
// pacer (5 a second, bursts of 2) instead of being answered 429 by the
// demo's provider. Six calls take at least 4/5 s, whatever the machine's
// load; a slow machine only spaces them more, which the provider's larger
// burst absorbs.
func TestUpstreamBurst(t *testing.T) {
	d := startReal(t)
	longest := burst(t, 6, d)
	assert.GreaterOrEqual(t, longest, 750*time.Millisecond, "the last of 6 waits for 4 tokens at 5 a second")
}

// TestUpstreamFleet: two demo servers on one Redis pace their calls to
// one provider (net/http limited by ratekit to 5 a second, bursts of 5,
// for all callers) through one token bucket: eight calls, four on each,
// take at least 6/5 s (each server alone would wait 2/5 s), and the
// provider admits each at once.
func TestUpstreamFleet(t *testing.T) {
	srv := redistest.Start(t)
	var calls, denied atomic.Int64
	// The limit of the demo's own provider.
	lim := core.Must(core.NewLimiter(core.Limit{Name: "provider", Algorithm: core.TokenBucket, Rate: core.PerSecond(5)}))
	all := func(*http.Request) (string, error) { return "all", nil }
	provider := httptest.NewServer(stdhttp.New(lim, all, stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, _ core.Decision) {
		denied.Add(1)
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) })))
	t.Cleanup(provider.Close)

	args := []string{"-store", "redis", "-redis", demotest.RedisURL(srv), "-upstream", provider.URL + "/"}
	a, b := startReal(t, args...), startReal(t, args...)
	longest := burst(t, 8, a, b)
	assert.GreaterOrEqual(t, longest, 1150*time.Millisecond, "the last of 8 waits for 6 tokens at 5 a second")
	assert.Equal(t, int64(8), calls.Load())
	assert.Zero(t, denied.Load(), "the provider answered no 429")
	// The demos' connections to the provider must not count as a leak of
	// the one that stops first.
	provider.CloseClientConnections()
	a.Client.CloseIdleConnections()
	b.Client.CloseIdleConnections()
}

// TestUpstreamUnreachable: a provider that does not answer is a 502,
// logged once however many calls fail.
func TestUpstreamUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	d := start(t, "-upstream", "http://"+addr+"/")
	for range 3 {
		r := d.Get("/upstream")
		require.Equal(t, http.StatusBadGateway, r.Status)
		assert.Equal(t, "upstream: unreachable\n", r.Body)
	}
	assert.Equal(t, 1, strings.Count(d.Stderr(), "does not answer"), d.Stderr())
}
