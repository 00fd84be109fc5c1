package adapter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/episode"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

func TestHold(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, hold(ctx, 0))
	require.NoError(t, hold(ctx, -time.Second))
	require.NoError(t, hold(ctx, time.Nanosecond), "held for its slot, then passed on")
	cancel()
	require.NoError(t, hold(ctx, 0), "no delay: nothing to wait for, even for a client gone")
	require.ErrorIs(t, hold(ctx, time.Hour), context.Canceled)
	expired, cancel := context.WithDeadline(context.Background(), storetest.Epoch)
	defer cancel()
	require.ErrorIs(t, hold(expired, time.Hour), context.DeadlineExceeded)
}

// The Retry-After of a concurrency refusal is in whole seconds, rounded
// up, at least 1, appended to the caller's fields.
func TestRetryField(t *testing.T) {
	for retry, want := range map[time.Duration]string{
		0: "1", time.Nanosecond: "1", time.Second: "1", 1500 * time.Millisecond: "2", time.Hour: "3600",
	} {
		v := verdict{decision: core.Decision{Name: "n", Quota: 3, RetryAfter: retry}, status: http.StatusTooManyRequests, inFlight: true}
		dst := []answer.Field{{Name: "X-Other", Value: []string{"kept"}}}
		assert.Equal(t, []answer.Field{dst[0], {Name: answer.HeaderRetryAfter, Value: []string{want}}}, v.retryField(dst), "%s", retry)
	}
}

// probe is a request of the internal tests: its key, the key function's
// error and its cost, and what became of it.
type probe struct {
	key    string
	keyErr error
	cost   int
	status int // written by the kit; 0 while not answered
	passed bool
}

// probePort is a port that only records the outcome of a probe.
type probePort struct{}

func (probePort) Context(*probe) context.Context                        { return context.Background() }
func (probePort) Request(*probe) rules.Request                          { return nil }
func (probePort) Header(*probe, string, []string)                       {}
func (probePort) Next(p *probe) error                                   { p.passed = true; return nil }
func (probePort) Keep(p *probe, _ core.Decision) *probe                 { return p }
func (probePort) Stop(*probe, error) error                              { return nil }
func (probePort) Write(p *probe, status int, _ []byte) error            { p.status = status; return nil }
func (probePort) Offer(*probe, *queue.Offer, core.Decision) queue.Reply { return queue.Reply{} }

// Every kind of failure is its own episode, and requests that alternate
// between failing and being decided log at most two lines per kind per
// episode.Quiet (10 s of the clock), where each alternation used to log
// two; a failure that goes on past the quiet time is logged again, with
// the count of the failures in between.
func TestFailureLogsBoundedByTime(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	var logs bytes.Buffer
	m := New[*probe](probePort{}, func(c *Config[*probe]) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Cost = func(p *probe) int { return p.cost }
	})
	for kind := range m.log.kinds {
		m.log.kinds[kind].Now = clock.Now
	}
	lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1_000_000)})
	require.NoError(t, err)
	plans, err := core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) {
		return core.Limit{}, errors.New("plan store down")
	})
	require.NoError(t, err)
	key := func(p *probe) (string, error) { return p.key, p.keyErr }
	limit, planned := m.Limit(lim, key), m.Limit(plans, key)
	fail := map[string]struct {
		flow   func(*probe) error
		req    probe
		status int
	}{
		"without a rate-limit key": {limit, probe{keyErr: core.ErrMissingKey, cost: 1}, http.StatusBadRequest},
		"key function failing":     {limit, probe{keyErr: errors.New("lookup failed"), cost: 1}, http.StatusInternalServerError},
		"plan function failing":    {planned, probe{key: "k", cost: 1}, http.StatusInternalServerError},
		"cost out of range":        {limit, probe{key: "k", cost: 2_000_000}, http.StatusInternalServerError},
	}
	alternate := func() {
		for range 500 {
			for kind, f := range fail {
				p := f.req
				require.NoError(t, f.flow(&p))
				require.Equal(t, f.status, p.status, kind)
				require.False(t, p.passed, kind)
				ok := probe{key: "k", cost: 1}
				require.NoError(t, limit(&ok))
				require.True(t, ok.passed)
				clock.Advance(time.Millisecond)
			}
		}
	}
	count := func(kind string) (starts int) {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, kind) && !strings.Contains(line, "decided again") {
				starts++
			}
		}
		return starts
	}

	alternate() // 2 s of the clock
	for kind := range fail {
		assert.Equal(t, 1, count(kind), "%s:\n%s", kind, logs.String())
	}
	assert.Equal(t, 4, strings.Count(logs.String(), "decided again"), logs.String())
	assert.Equal(t, 4, strings.Count(logs.String(), "failed_requests=1\n"), logs.String())

	clock.Advance(episode.Quiet)
	alternate()
	for kind := range fail {
		assert.Equal(t, 2, count(kind), "%s, after the quiet time:\n%s", kind, logs.String())
	}
	assert.Equal(t, 8, strings.Count(logs.String(), "decided again"), logs.String())
	assert.Equal(t, 4, strings.Count(logs.String(), "failed_requests=500\n"),
		"the silent episodes' 499 failures and the logged one's: %s", logs.String())
}

// TestChecksKeyDistinct: two lists of rule keys that differ give two
// queue clients, even where a key holds the byte that once separated them.
func TestChecksKeyDistinct(t *testing.T) {
	one := checksKey([]core.Check{{Key: "a\x00b"}, {Key: "c"}})
	two := checksKey([]core.Check{{Key: "a"}, {Key: "b\x00c"}})
	if one == two {
		t.Fatalf("checksKey joined two lists to %q", one)
	}
	if got := checksKey([]core.Check{{Key: "k"}}); got != "k" {
		t.Fatalf("checksKey of one check = %q, want its key", got)
	}
}
