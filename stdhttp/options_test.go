package stdhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// decisionHandler answers with the decision that DecisionFrom finds in
// the request's context, "none" when it finds none.
var decisionHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	d, ok := stdhttp.DecisionFrom(r.Context())
	if !ok {
		_, _ = io.WriteString(w, "none")
		return
	}
	fmt.Fprintf(w, "%s %d/%d", d.Name, d.Remaining, d.Quota)
})

func TestDecisionInContext(t *testing.T) {
	_, ok := stdhttp.DecisionFrom(context.Background())
	assert.False(t, ok, "no decision in a context the middleware did not make")

	clock := newClock()
	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	h := stdhttp.New(lim, peerKey, stdhttp.WithDecisionInContext(),
		stdhttp.WithSkipper(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))(decisionHandler)
	assert.Equal(t, "api 1/2", get(h, "/", "192.0.2.1").Body.String())
	assert.Equal(t, "api 0/2", get(h, "/", "192.0.2.1").Body.String())
	assert.Equal(t, "none", get(h, "/healthz", "192.0.2.1").Body.String(), "a skipped request is not decided")
	requireProblem(t, get(h, "/", "192.0.2.1"), http.StatusTooManyRequests)

	// Without the option the handler finds nothing, and neither does it
	// with no header fields: the context is the only way in then.
	lim = newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	assert.Equal(t, "none", get(stdhttp.New(lim, peerKey)(decisionHandler), "/", "192.0.2.1").Body.String())
	w := get(stdhttp.New(lim, peerKey, stdhttp.WithHeaders(answer.NoHeaders), stdhttp.WithDecisionInContext())(decisionHandler), "/", "192.0.2.1")
	assert.Equal(t, "api 0/2", w.Body.String())
	assert.Empty(t, w.Header().Values(answer.HeaderLimit))

	// A store failing open: the handler learns which limit could not
	// decide, with no quota.
	lim = core.Must(core.NewLimiter(core.Limit{Name: "down", Rate: core.PerMinute(10)},
		core.WithStore(failingStore{}), core.WithLogger(quiet)))
	assert.Equal(t, "down 0/0", get(stdhttp.New(lim, peerKey, stdhttp.WithDecisionInContext())(decisionHandler), "/", "192.0.2.1").Body.String())
}

func TestRulesDecisionInContext(t *testing.T) {
	e, _ := newEngine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Path: "/api/*"}, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
	}})
	h := stdhttp.Rules(e, stdhttp.WithDecisionInContext())(decisionHandler)
	body := get(h, "/api/items", "192.0.2.1").Body.String()
	assert.True(t, strings.HasPrefix(body, "api/remote_address"), "body %q", body)
	assert.True(t, strings.HasSuffix(body, " 2/3"), "body %q", body)
	assert.Equal(t, "none", get(h, "/other", "192.0.2.1").Body.String(), "no rule, no decision")
}

func TestNoHeaders(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	h := stdhttp.New(lim, peerKey, stdhttp.WithHeaders(answer.NoHeaders))(&okHandler{})
	w := get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, w.Header().Values(answer.HeaderLimit))
	assert.Empty(t, w.Header().Values(answer.HeaderRateLimit))
	w = get(h, "/", "192.0.2.1")
	requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, "60", w.Header().Get(answer.HeaderRetryAfter), "Retry-After is sent in every style")
	assert.Empty(t, w.Header().Values(answer.HeaderXRetryAfter))
	assert.Empty(t, w.Header().Values(answer.HeaderRemaining))
}

// TestIETFRejection: on a 429, the RateLimit field's t is Retry-After, the
// time until a retry is admitted, not the time until the bucket is full.
func TestIETFRejection(t *testing.T) {
	clock := newClock()
	// A token every 10 s, a bucket of 3: full again 30 s after it empties.
	lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 3})
	h := stdhttp.New(lim, peerKey, stdhttp.WithHeaders(answer.IETF))(&okHandler{})
	for range 3 {
		require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	}
	clock.Advance(3 * time.Second)
	w := get(h, "/", "192.0.2.1")
	requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, "7", w.Header().Get(answer.HeaderRetryAfter))
	assert.Equal(t, []sfItem{{"api", map[string]int64{"r": 0, "t": 7}}}, parseSFList(t, w.Header().Get(answer.HeaderRateLimit)))
	assert.Equal(t, []sfItem{{"api", map[string]int64{"q": 3, "w": 30}}}, parseSFList(t, w.Header().Get(answer.HeaderRateLimitPolicy)))
	assert.Empty(t, w.Header().Values(answer.HeaderXRetryAfter))
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n")
}

// TestLogger: a key function that fails a hundred times in a row is
// logged once, with its error, and the first request decided after it
// logs the end of the episode with the count; the client sees none of it.
func TestLogger(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	errLookup := errors.New("key lookup in postgres://user:secret@db failed")
	var broken bool
	key := func(r *http.Request) (string, error) {
		if broken {
			return "", errLookup
		}
		return "k", nil
	}
	lim := newLimiter(t, newClock(), core.Limit{Rate: core.PerHour(1000)})
	h := stdhttp.New(lim, key, stdhttp.WithLogger(logger))(&okHandler{})

	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	assert.Empty(t, buf.buf.String(), "nothing to log while requests are decided")
	broken = true
	for range 100 {
		w := get(h, "/", "192.0.2.1")
		requireProblem(t, w, http.StatusInternalServerError)
		require.NotContains(t, w.Body.String(), "secret")
	}
	lines := buf.lines()
	require.Len(t, lines, 1, "one line for the episode:\n%s", strings.Join(lines, "\n"))
	assert.Contains(t, lines[0], "level=WARN")
	assert.Contains(t, lines[0], "key function failing")
	assert.Contains(t, lines[0], "postgres://user:secret@db", "the log has the error")

	broken = false
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	lines = buf.lines()
	require.Len(t, lines, 2, "and one for its end:\n%s", strings.Join(lines, "\n"))
	assert.Contains(t, lines[1], "level=INFO")
	assert.Contains(t, lines[1], "failed_requests=100")

	// Episodes that start within 10 seconds of the last one logged go on
	// silently: requests that alternate between a failing key and a good
	// one log no more lines, where each used to log two.
	for i := range 1000 {
		broken = i%2 == 0
		get(h, "/", "192.0.2.1")
	}
	assert.Len(t, buf.lines(), 2, "at most two lines per 10 seconds:\n%s", strings.Join(buf.lines(), "\n"))
}

// TestLoggerMissingKey: requests without a key are an episode too, logged
// at level INFO: clients cause them, not the server.
func TestLoggerMissingKey(t *testing.T) {
	var buf syncBuffer
	lim := newLimiter(t, newClock(), core.Limit{Rate: core.PerHour(1000)})
	h := stdhttp.New(lim, keyfuncs.Header("X-Api-Key"), stdhttp.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))(&okHandler{})
	for range 10 {
		requireProblem(t, get(h, "/", "192.0.2.1"), http.StatusBadRequest)
	}
	lines := buf.lines()
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "level=INFO")
	assert.Contains(t, lines[0], "X-Api-Key")
}

// TestAllocs: a request that the middleware passes on, with X-Ratelimit
// fields, costs no allocation when the numbers are below 4096 (answer's
// table of formatted numbers), and one (the block of the response's
// field values) when they are larger. The key is keyfuncs.PeerIP, the
// store the memory store, on a key it already tracks.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are noise under the race detector")
	}
	if testing.Short() {
		t.Skip("short")
	}
	tests := []struct {
		name   string
		rate   core.Rate
		style  answer.Style
		allocs float64
	}{
		{"ordinary", core.PerMinute(1000), answer.XRateLimit, 0},
		{"ordinary/no-headers", core.PerMinute(1000), answer.NoHeaders, 0},
		{"large", core.PerMinute(1_000_000_000), answer.XRateLimit, 1},
		{"ietf", core.PerMinute(1000), answer.IETF, 1},
		{"both/large", core.PerMinute(1_000_000_000), answer.Both, 1},
	}
	for _, tt := range tests {
		for _, algo := range algorithms {
			if algo == core.SlidingWindowLog && tt.rate.Count > 1000 {
				continue // a log of every request grows with each request
			}
			t.Run(tt.name+"/"+algo.String(), func(t *testing.T) {
				lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: algo, Rate: tt.rate}))
				h := stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithHeaders(tt.style))(http.HandlerFunc(okBench))
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = "192.0.2.1:4711"
				w := &benchWriter{h: make(http.Header, 8)}
				h.ServeHTTP(w, r) // the key is tracked from here on
				allocs := testing.AllocsPerRun(200, func() {
					w.reset()
					h.ServeHTTP(w, r)
				})
				require.Equal(t, 0, w.status, "the request must pass")
				if tt.style != answer.NoHeaders {
					require.NotEmpty(t, w.h, "the response has rate-limit fields")
				}
				assert.LessOrEqual(t, allocs, tt.allocs, "allocations per request")
			})
		}
	}
}
