package stdhttp_test

// What adapters share is checked by adaptertest.RunScenarios, which
// adaptertest's TestStdhttp runs on this package, and the request flow by
// package adapter's tests: these tests keep what is net/http's alone.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

var quiet = slog.New(slog.DiscardHandler)

// get serves a GET of target from peer to h.
func get(h http.Handler, target, peer string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = peer
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// limiter is a fixed window of n requests a minute on a stopped clock.
func limiter(t *testing.T, n int) *core.Limiter {
	return adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(n)})
}

// downCounter fails every Take, the only method a limiter's Take calls.
type downCounter struct{ core.Counter }

func (downCounter) Bind([]core.Limit) (core.Counter, error) { return downCounter{}, nil }
func (downCounter) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errors.New("store down")
}

// The next handler finds the fields on the ResponseWriter, and answers
// with a status of its own; with WithDecisionInContext, it finds the
// decision in the request's context (none in a context the middleware did
// not make), and with a store failing open the limit that could not
// decide, with no quota.
func TestNextHandlerSees(t *testing.T) {
	var seen string
	var d core.Decision
	var found bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Get(answer.HeaderRemaining)
		d, found = stdhttp.DecisionFrom(r.Context())
		w.WriteHeader(http.StatusCreated)
	})
	assert.Equal(t, http.StatusCreated, get(stdhttp.New(limiter(t, 10), keyfuncs.PeerIP)(next), "/", "192.0.2.1:4711").Code)
	assert.Equal(t, "9", seen)
	assert.False(t, found)

	down := core.Must(core.NewLimiter(core.Limit{Name: "down", Rate: core.PerMinute(10)}, core.WithStore(downCounter{}), core.WithLogger(quiet)))
	assert.Equal(t, http.StatusCreated, get(stdhttp.New(down, keyfuncs.PeerIP, stdhttp.WithDecisionInContext())(next), "/", "192.0.2.1:4711").Code)
	assert.True(t, found)
	assert.Equal(t, "down", d.Name)
	assert.Zero(t, d.Quota)
	_, found = stdhttp.DecisionFrom(context.Background())
	assert.False(t, found)
}

// A Retry-After of 100 ms rounds up to a second, in both fields.
func TestRetryAfterRoundsUp(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	h := stdhttp.New(adaptertest.Limiter(t, clock, core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(40), Burst: 1}), keyfuncs.PeerIP)(ok)
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1:4711").Code)
	clock.Advance(1400 * time.Millisecond) // of the 1.5 s a token takes
	w := get(h, "/", "192.0.2.1:4711")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, []string{"1"}, w.Header().Values(answer.HeaderRetryAfter))
	assert.Equal(t, []string{"1"}, w.Header().Values(answer.HeaderXRetryAfter))
}

// Failures are logged once per episode: a failing key function at WARN,
// with its error; the end of the episode at INFO, with the count; requests
// without a key, which clients cause, at INFO.
func TestLogLevels(t *testing.T) {
	var logs bytes.Buffer
	errs := map[string]error{"/broken": errors.New("key lookup in postgres://user:secret@db failed"), "/anonymous": fmt.Errorf("no X-Api-Key: %w", core.ErrMissingKey)}
	key := func(r *http.Request) (string, error) { return "k", errs[r.URL.Path] }
	h := stdhttp.New(limiter(t, 100), key, stdhttp.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))(ok)
	for _, path := range []string{"/broken", "/broken", "/", "/anonymous", "/anonymous"} {
		get(h, path, "192.0.2.1:4711")
	}
	lines := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n")
	require.Len(t, lines, 3, logs.String())
	for i, want := range []string{
		`level=WARN .*key function failing.*postgres://user:secret@db`,
		`level=INFO .*decided again.*failed_requests=2`,
		`level=INFO .*without a rate-limit key.*X-Api-Key`,
	} {
		assert.Regexp(t, want, lines[i])
	}
}

// Descriptor key route is the ServeMux pattern (r.Pattern) where Rules
// wraps a handler registered on the mux: /items/1 and /items/2 share the
// counter of "GET /items/{id}", which a rule names. In front of the mux
// nothing is routed yet: the route is the path, a counter each.
func TestRulesRoute(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
		{Key: "route", Value: "GET /items/{id}", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2}},
	}})
	inside, outside := http.NewServeMux(), http.NewServeMux()
	inside.Handle("GET /items/{id}", stdhttp.Rules(e)(ok))
	outside.Handle("GET /items/{id}", ok)
	for i, c := range []struct {
		h                      http.Handler
		path, limit, remaining string
		status                 int
	}{
		{inside, "/items/1", "2", "1", 200},
		{inside, "/items/2", "2", "0", 200},
		{inside, "/items/3", "2", "0", 429},
		{stdhttp.Rules(e)(outside), "/items/1", "3", "2", 200},
		{stdhttp.Rules(e)(outside), "/items/2", "3", "2", 200},
	} {
		w := get(c.h, c.path, "192.0.2.1:4711")
		assert.Equal(t, c.status, w.Code, "request %d", i)
		assert.Equal(t, c.limit, w.Header().Get(answer.HeaderLimit), "request %d", i)
		assert.Equal(t, c.remaining, w.Header().Get(answer.HeaderRemaining), "request %d", i)
	}
}

// The forms of r.RemoteAddr that are no TCP peer. Over a Unix socket
// net/http gives no address ("@" on Linux): PeerIP finds no key (400), and
// a rule keyed by remote_address does not apply. An address without a port was
// rewritten from a header by a middleware in front, as chi's
// middleware.RealIP does: each forged X-Real-IP would be a fresh client,
// so remote_address refuses it (500).
func TestRemoteAddr(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 3}},
	}})
	byRules := stdhttp.Rules(e, stdhttp.WithLogger(quiet))(ok)
	for i := range 6 {
		assert.Equal(t, http.StatusInternalServerError, get(byRules, "/", "198.51.100."+string(rune('1'+i))).Code, "rewritten peer %d", i+1)
	}

	mux := http.NewServeMux()
	mux.Handle("/peer-ip", stdhttp.New(limiter(t, 3), keyfuncs.PeerIP, stdhttp.WithLogger(quiet))(ok))
	mux.Handle("/rules", byRules)
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for path, want := range map[string]int{"/peer-ip": 400, "/rules": 200} {
		res, err := client.Get("http://unix" + path)
		require.NoError(t, err)
		_ = res.Body.Close()
		assert.Equal(t, want, res.StatusCode, path)
		assert.Empty(t, res.Header.Get(answer.HeaderLimit), path)
	}
}
