package stdhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// t0 is a whole hour since the Unix epoch, so that windows of a second, a
// minute and an hour all start at t0.
var t0 = time.Unix(1_699_999_200, 0)

func newClock() *storetest.Clock { return storetest.NewClock(t0) }

func newStore(clock *storetest.Clock) *core.MemoryStore { return &core.MemoryStore{Clock: clock.Now} }

// newLimiter returns a limiter on a memory store that reads clock.
func newLimiter(t testing.TB, clock *storetest.Clock, lim core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(lim, append([]core.Option{core.WithStore(newStore(clock))}, opts...)...)
	require.NoError(t, err)
	return l
}

// peerKey keys a request by its peer address, without keyfuncs.
func peerKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	return host, err
}

// okHandler answers "ok" and counts its calls.
type okHandler struct{ calls atomic.Int64 }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.calls.Add(1)
	_, _ = io.WriteString(w, "ok")
}

func get(h http.Handler, path, peer string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = peer + ":4711"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The problem types of rejections, from the IETF rate-limit headers draft.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Limit      string `json:"limit"`
	RetryAfter int64  `json:"retry_after"`
}

// requireProblem checks that w holds an uncacheable problem-details body
// with the given status, and returns it.
func requireProblem(t *testing.T, w *httptest.ResponseRecorder, status int) problem {
	t.Helper()
	require.Equal(t, status, w.Code, "body: %s", w.Body)
	assert.Equal(t, answer.ProblemContentType, w.Header().Get("Content-Type"))
	assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	var p problem
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), "body: %s", w.Body)
	assert.Equal(t, status, p.Status)
	assert.Equal(t, http.StatusText(status), p.Title)
	return p
}

func TestXRateLimitHeaders(t *testing.T) {
	// Limit 10 per minute, every request at t0. reset is X-Ratelimit-Reset
	// after the first request, retry the Retry-After of the 11th.
	tests := []struct {
		algo         core.Algorithm
		reset, retry string
	}{
		{core.TokenBucket, "6", "6"},
		{core.LeakyBucket, "6", "6"},
		{core.FixedWindow, "60", "60"},
		{core.SlidingWindowLog, "60", "60"},
		// Counts expire two windows after they were made; the 11th must
		// wait for the next window plus 1/10 of it, when the weighted
		// previous count falls to 9.
		{core.SlidingWindowCounter, "120", "66"},
	}
	for _, tt := range tests {
		t.Run(tt.algo.String(), func(t *testing.T) {
			clock := newClock()
			lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: tt.algo, Rate: core.PerMinute(10)})
			next := &okHandler{}
			h := stdhttp.New(lim, peerKey)(next)

			w := get(h, "/", "192.0.2.1")
			require.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, "ok", w.Body.String())
			assert.Equal(t, "10", w.Header().Get(answer.HeaderLimit))
			assert.Equal(t, "9", w.Header().Get(answer.HeaderRemaining))
			assert.Equal(t, tt.reset, w.Header().Get(answer.HeaderReset))
			assert.Empty(t, w.Header().Values(answer.HeaderRetryAfter), "no Retry-After on an admitted request")
			assert.Empty(t, w.Header().Values(answer.HeaderXRetryAfter))
			assert.Empty(t, w.Header().Values(answer.HeaderRateLimit), "no IETF fields in the default style")

			for i := 2; i <= 10; i++ {
				w = get(h, "/", "192.0.2.1")
				require.Equal(t, http.StatusOK, w.Code, "request %d", i)
				assert.Equal(t, strconv.Itoa(10-i), w.Header().Get(answer.HeaderRemaining))
			}

			w = get(h, "/", "192.0.2.1")
			p := requireProblem(t, w, http.StatusTooManyRequests)
			assert.Equal(t, problemQuotaExceeded, p.Type)
			assert.Equal(t, "api", p.Limit)
			assert.Equal(t, tt.retry, strconv.FormatInt(p.RetryAfter, 10))
			assert.Equal(t, "10", w.Header().Get(answer.HeaderLimit))
			assert.Equal(t, "0", w.Header().Get(answer.HeaderRemaining))
			assert.Equal(t, tt.retry, w.Header().Get(answer.HeaderRetryAfter))
			assert.Equal(t, tt.retry, w.Header().Get(answer.HeaderXRetryAfter))
			assert.EqualValues(t, 10, next.calls.Load(), "a rejected request is not passed on")

			// Another client has its own budget.
			require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.2").Code)

			// Retry-After is true: one second less is not enough, waiting
			// it out is.
			secs, err := strconv.Atoi(w.Header().Get(answer.HeaderRetryAfter))
			require.NoError(t, err)
			clock.Advance(time.Duration(secs-1) * time.Second)
			require.Equal(t, http.StatusTooManyRequests, get(h, "/", "192.0.2.1").Code)
			clock.Advance(time.Second)
			require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
		})
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	clock := newClock()
	// A token every 1.5 s.
	lim := newLimiter(t, clock, core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(40), Burst: 1})
	h := stdhttp.New(lim, peerKey)(&okHandler{})
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	clock.Advance(1400 * time.Millisecond)
	w := get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get(answer.HeaderRetryAfter), "100 ms rounds up to 1 s")
	assert.Equal(t, "1", w.Header().Get(answer.HeaderXRetryAfter))
}

// sfItem is one member of a structured-field list (RFC 8941) whose value
// is a string and whose parameters are integers, the shape of the IETF
// rate-limit fields.
type sfItem struct {
	Value  string
	Params map[string]int64
}

// parseSFList parses such a list strictly enough for a test.
func parseSFList(t *testing.T, field string) []sfItem {
	t.Helper()
	var items []sfItem
	s := field
	for {
		s = strings.TrimLeft(s, " ")
		require.True(t, strings.HasPrefix(s, `"`), "member of %q must start with a string", field)
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
			require.Less(t, i, len(s), "unterminated string in %q", field)
			b.WriteByte(s[i])
		}
		require.Less(t, i, len(s), "unterminated string in %q", field)
		s = s[i+1:]
		item := sfItem{Value: b.String(), Params: map[string]int64{}}
		for strings.HasPrefix(s, ";") {
			s = s[1:]
			end := strings.IndexAny(s, ";,")
			if end < 0 {
				end = len(s)
			}
			k, v, ok := strings.Cut(s[:end], "=")
			require.True(t, ok, "parameter %q of %q has no value", s[:end], field)
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "parameter %q of %q", s[:end], field)
			_, dup := item.Params[k]
			require.False(t, dup, "duplicate parameter %q in %q", k, field)
			item.Params[k] = n
			s = s[end:]
		}
		items = append(items, item)
		if s == "" {
			return items
		}
		require.True(t, strings.HasPrefix(s, ","), "junk %q in %q", s, field)
		s = s[1:]
	}
}

func TestIETFHeaders(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, clock, core.Limit{Name: "name", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	h := stdhttp.New(lim, peerKey, stdhttp.WithHeaders(answer.IETF))(&okHandler{})

	w := get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	require.Len(t, w.Header().Values(answer.HeaderRateLimitPolicy), 1)
	require.Len(t, w.Header().Values(answer.HeaderRateLimit), 1)
	assert.Equal(t, []sfItem{{"name", map[string]int64{"q": 10, "w": 60}}},
		parseSFList(t, w.Header().Get("RateLimit-Policy")))
	assert.Equal(t, []sfItem{{"name", map[string]int64{"r": 9, "t": 60}}},
		parseSFList(t, w.Header().Get("RateLimit")))
	assert.Empty(t, w.Header().Values(answer.HeaderLimit), "no X-Ratelimit fields in the IETF style")

	clock.Advance(15 * time.Second)
	for i := 0; i < 9; i++ {
		require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	}
	w = get(h, "/", "192.0.2.1")
	requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, []sfItem{{"name", map[string]int64{"r": 0, "t": 45}}},
		parseSFList(t, w.Header().Get("RateLimit")))
	assert.Equal(t, "45", w.Header().Get("Retry-After"))
	assert.Empty(t, w.Header().Values(answer.HeaderXRetryAfter))
}

func TestBothHeaderStyles(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Name: "both", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	w := get(stdhttp.New(lim, peerKey, stdhttp.WithHeaders(answer.Both))(&okHandler{}), "/", "192.0.2.1")
	assert.Equal(t, "9", w.Header().Get(answer.HeaderRemaining))
	assert.Equal(t, []sfItem{{"both", map[string]int64{"r": 9, "t": 60}}},
		parseSFList(t, w.Header().Get(answer.HeaderRateLimit)))
}

func TestRouteGroupsKeepSeparateCounters(t *testing.T) {
	clock := newClock()
	store := newStore(clock)
	api := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)},
		core.WithStore(store)))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		core.WithStore(store)))

	apiHits, loginHits := &okHandler{}, &okHandler{}
	mux := http.NewServeMux()
	mux.Handle("/api/", stdhttp.New(api, peerKey)(apiHits))
	mux.Handle("/api/login", stdhttp.New(login, peerKey)(loginHits))

	for i := 1; i <= 5; i++ {
		w := get(mux, "/api/login", "192.0.2.1")
		require.Equal(t, http.StatusOK, w.Code, "login %d", i)
		assert.Equal(t, "5", w.Header().Get(answer.HeaderLimit))
		assert.Equal(t, strconv.Itoa(5-i), w.Header().Get(answer.HeaderRemaining))
	}
	w := get(mux, "/api/login", "192.0.2.1")
	requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, "60", w.Header().Get(answer.HeaderRetryAfter))

	// The API group has not seen the logins.
	for i := 1; i <= 20; i++ {
		w := get(mux, "/api/items", "192.0.2.1")
		require.Equal(t, http.StatusOK, w.Code, "api %d", i)
		assert.Equal(t, "100", w.Header().Get(answer.HeaderLimit))
		assert.Equal(t, strconv.Itoa(100-i), w.Header().Get(answer.HeaderRemaining))
	}
	assert.EqualValues(t, 5, loginHits.calls.Load())
	assert.EqualValues(t, 20, apiHits.calls.Load())

	// And the logins still count their own window only.
	clock.Advance(time.Minute)
	w = get(mux, "/api/login", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "4", w.Header().Get(answer.HeaderRemaining))
}

func TestMostRestrictiveLimit(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, clock,
		core.Limit{Name: "second", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)},
		core.WithLimit(core.Limit{Name: "hour", Algorithm: core.FixedWindow, Rate: core.PerHour(15)}))
	h := stdhttp.New(lim, peerKey, stdhttp.WithHeaders(answer.Both))(&okHandler{})

	w := get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "10", w.Header().Get(answer.HeaderLimit), "9 of 10 left per second beats 14 of 15 per hour")
	assert.Equal(t, "9", w.Header().Get(answer.HeaderRemaining))
	assert.Equal(t, []sfItem{{"second", map[string]int64{"q": 10, "w": 1}}},
		parseSFList(t, w.Header().Get(answer.HeaderRateLimitPolicy)), "the policy lists the deciding limit")
	assert.Equal(t, []sfItem{{"second", map[string]int64{"r": 9, "t": 1}}},
		parseSFList(t, w.Header().Get(answer.HeaderRateLimit)))

	for i := 0; i < 9; i++ {
		require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	}
	w = get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "10", w.Header().Get(answer.HeaderLimit))
	assert.Equal(t, "1", w.Header().Get(answer.HeaderRetryAfter))

	// A second later the bucket is full again; 5 of 15 are left this hour.
	clock.Advance(time.Second)
	w = get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "15", w.Header().Get(answer.HeaderLimit))
	assert.Equal(t, "4", w.Header().Get(answer.HeaderRemaining))
	assert.Equal(t, "3599", w.Header().Get(answer.HeaderReset))
	for i := 0; i < 4; i++ {
		require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	}
	w = get(h, "/", "192.0.2.1")
	p := requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, "hour", p.Limit)
	assert.Equal(t, "15", w.Header().Get(answer.HeaderLimit))
	assert.Equal(t, "3599", w.Header().Get(answer.HeaderRetryAfter))
	assert.Equal(t, []sfItem{{"hour", map[string]int64{"q": 15, "w": 3600}}},
		parseSFList(t, w.Header().Get(answer.HeaderRateLimitPolicy)))
	assert.Equal(t, []sfItem{{"hour", map[string]int64{"r": 0, "t": 3599}}},
		parseSFList(t, w.Header().Get(answer.HeaderRateLimit)), "t is Retry-After on a rejection")
}

func TestSkipper(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, clock, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	next := &okHandler{}
	h := stdhttp.New(lim, peerKey, stdhttp.WithSkipper(func(r *http.Request) bool {
		return r.URL.Path == "/healthz"
	}))(next)

	for i := 0; i < 20; i++ {
		w := get(h, "/healthz", "192.0.2.1")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Values(answer.HeaderLimit))
		assert.Empty(t, w.Header().Values(answer.HeaderRemaining))
		assert.Empty(t, w.Header().Values(answer.HeaderReset))
	}
	w := get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "1", w.Header().Get(answer.HeaderRemaining), "skipped requests were not counted")
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	require.Equal(t, http.StatusTooManyRequests, get(h, "/", "192.0.2.1").Code)
	require.Equal(t, http.StatusOK, get(h, "/healthz", "192.0.2.1").Code, "skipped even when over the limit")
	assert.EqualValues(t, 23, next.calls.Load())
}

func TestCost(t *testing.T) {
	clock := newClock()
	lim := newLimiter(t, clock, core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	next := &okHandler{}
	h := stdhttp.New(lim, peerKey, stdhttp.WithLogger(quiet), stdhttp.WithCost(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("cost"))
		return n
	}))(next)

	w := get(h, "/?cost=3", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "7", w.Header().Get(answer.HeaderRemaining))

	w = get(h, "/?cost=0", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "7", w.Header().Get(answer.HeaderRemaining), "cost 0 counts nothing")

	w = get(h, "/?cost=8", "192.0.2.1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "7", w.Header().Get(answer.HeaderRemaining), "a rejected request counts nothing")

	// A cost above the capacity can never pass: a server error, not 429.
	w = get(h, "/?cost=11", "192.0.2.1")
	requireProblem(t, w, http.StatusInternalServerError)
	assert.Empty(t, w.Header().Values(answer.HeaderRetryAfter))
	assert.EqualValues(t, 2, next.calls.Load())
}

func TestDeniedHandler(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Name: "d", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	var got core.Decision
	h := stdhttp.New(lim, peerKey, stdhttp.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d core.Decision) {
		got = d
		assert.Equal(t, "60", w.Header().Get(answer.HeaderRetryAfter), "headers are set before the handler runs")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "slow down")
	}))(&okHandler{})

	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	w := get(h, "/", "192.0.2.1")
	assert.Equal(t, http.StatusTeapot, w.Code)
	assert.Equal(t, "slow down", w.Body.String())
	assert.Equal(t, "60", w.Header().Get(answer.HeaderXRetryAfter))
	assert.False(t, got.Allowed)
	assert.Equal(t, "d", got.Name)
	assert.Equal(t, time.Minute, got.RetryAfter)
}

func TestKeyErrors(t *testing.T) {
	errNoToken := errors.New("no token")
	tests := []struct {
		name   string
		key    func(*http.Request) (string, error)
		status int
		detail string
	}{
		{"missing", func(*http.Request) (string, error) {
			return "", errors.Join(errNoToken, core.ErrMissingKey)
		}, http.StatusBadRequest, "the request has no value to be rate limited by"},
		{"empty key without error", func(*http.Request) (string, error) { return "", nil },
			http.StatusBadRequest, "the request has no value to be rate limited by"},
		{"other error", func(*http.Request) (string, error) { return "", errNoToken },
			http.StatusInternalServerError, "rate limit unavailable for this request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(newClock())
			limit := core.Limit{Rate: core.PerMinute(1)}
			lim := core.Must(core.NewLimiter(limit, core.WithStore(store)))
			next := &okHandler{}
			h := stdhttp.New(lim, tt.key, stdhttp.WithLogger(quiet))(next)
			for i := 0; i < 3; i++ {
				w := get(h, "/", "192.0.2.1")
				p := requireProblem(t, w, tt.status)
				assert.Empty(t, p.Type)
				assert.Equal(t, tt.detail, p.Detail)
				assert.NotContains(t, w.Body.String(), "no token", "the error's text stays out of the body")
				assert.Empty(t, w.Header().Values(answer.HeaderLimit))
				assert.Empty(t, w.Header().Values(answer.HeaderRetryAfter))
			}
			assert.Zero(t, next.calls.Load())
			assert.Zero(t, store.TrackedKeys(limit), "nothing was counted, under any key")

			var got error
			h = stdhttp.New(lim, tt.key, stdhttp.WithLogger(quiet), stdhttp.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
				got = err
				w.WriteHeader(http.StatusUnauthorized)
			}))(next)
			assert.Equal(t, http.StatusUnauthorized, get(h, "/", "192.0.2.1").Code)
			require.Error(t, got)
			assert.Equal(t, tt.status == http.StatusBadRequest, errors.Is(got, core.ErrMissingKey), "error: %v", got)
			assert.Zero(t, store.TrackedKeys(limit))
		})
	}
}

func TestKeyfuncsMissingHeader(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Rate: core.PerMinute(10)})
	h := stdhttp.New(lim, keyfuncs.Header("X-Api-Key"), stdhttp.WithLogger(quiet))(&okHandler{})
	requireProblem(t, get(h, "/", "192.0.2.1"), http.StatusBadRequest)
}

// failingStore is a store whose counters always fail.
type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Bind([]core.Limit) (core.Counter, error) { return failingCounter{}, nil }

type failingCounter struct{}

func (failingCounter) Take(context.Context, string, int, []core.Decision) (time.Time, error) {
	return time.Time{}, errDown
}

func (failingCounter) Peek(context.Context, string, int, []core.Decision) error { return errDown }

func (failingCounter) Refund(context.Context, string, int, time.Time, []core.Decision) error {
	return errDown
}
func (failingCounter) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, errDown
}
func (failingCounter) Reset(context.Context, string) (bool, error) {
	return false, errDown
}
func (failingCounter) Grant(context.Context, string, int, time.Duration) error { return errDown }

// quiet is a logger that discards everything.
var quiet = slog.New(slog.DiscardHandler)

func TestFailModes(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		var events []core.Event
		lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(10)},
			core.WithStore(failingStore{}), core.WithLogger(quiet),
			core.WithObserver(func(e core.Event) { events = append(events, e) })))
		next := &okHandler{}
		w := get(stdhttp.New(lim, peerKey)(next), "/", "192.0.2.1")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "ok", w.Body.String())
		assert.EqualValues(t, 1, next.calls.Load())
		assert.Empty(t, w.Header().Values(answer.HeaderLimit), "no counts without a store")
		assert.Empty(t, w.Header().Values(answer.HeaderRetryAfter))
		require.Len(t, events, 1)
		assert.Equal(t, core.ErrorAllowed, events[0].Outcome)
		assert.ErrorIs(t, events[0].Err, errDown)
	})
	t.Run("closed", func(t *testing.T) {
		lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(10)},
			core.WithStore(failingStore{}), core.WithLogger(quiet), core.WithFailClosed()))
		next := &okHandler{}
		w := get(stdhttp.New(lim, peerKey)(next), "/", "192.0.2.1")
		p := requireProblem(t, w, http.StatusServiceUnavailable)
		assert.Equal(t, problemReducedCapacity, p.Type)
		assert.Equal(t, "1", w.Header().Get(answer.HeaderRetryAfter))
		assert.Empty(t, w.Header().Values(answer.HeaderLimit))
		assert.Zero(t, next.calls.Load())
		assert.NotContains(t, w.Body.String(), "192.0.2.1", "the body never holds the key")
	})
	t.Run("closed with denied handler", func(t *testing.T) {
		lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(10)},
			core.WithStore(failingStore{}), core.WithLogger(quiet), core.WithFailClosed()))
		var got core.Decision
		h := stdhttp.New(lim, peerKey, stdhttp.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, d core.Decision) {
			got = d
			w.WriteHeader(http.StatusServiceUnavailable)
		}))(&okHandler{})
		w := get(h, "/", "192.0.2.1")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, "1", w.Header().Get(answer.HeaderRetryAfter))
		assert.False(t, got.Allowed)
		assert.Zero(t, got.Quota, "a decision without a store has no quota")
		assert.Equal(t, time.Second, got.RetryAfter)
	})
}

// algorithms are the five algorithms.
var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

// serveAsync serves r in a goroutine and returns a channel that is closed
// when ServeHTTP returns.
func serveAsync(h http.Handler, r *http.Request) (*httptest.ResponseRecorder, <-chan struct{}) {
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, r)
	}()
	return w, done
}

func waitDone(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the middleware did not return")
	}
}

func TestShapingHoldsRequests(t *testing.T) {
	clock := newClock() // the store's time stands still; only the hold is real
	// One slot every 40 ms, a queue of 5.
	lim := newLimiter(t, clock, core.Limit{
		Algorithm: core.LeakyBucket, Rate: core.PerSecond(25), Burst: 5,
		Shaping: true, MaxDelay: time.Second,
	})
	next := &okHandler{}
	h := stdhttp.New(lim, peerKey)(next)

	w := get(h, "/", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code, "the first request has slot 0")

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	start := time.Now()
	w, done := serveAsync(h, r)
	waitDone(t, done)
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "held for its slot")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "ok", w.Body.String())
	assert.EqualValues(t, 2, next.calls.Load())
}

func TestShapingCancelled(t *testing.T) {
	clock := newClock()
	// One slot a minute: the second request would be held for a minute.
	lim := newLimiter(t, clock, core.Limit{
		Algorithm: core.LeakyBucket, Rate: core.PerMinute(1), Burst: 3, Shaping: true,
	})
	next := &okHandler{}
	h := stdhttp.New(lim, peerKey)(next)
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)

	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	_, done := serveAsync(h, r)
	select {
	case <-done:
		t.Fatal("the request was not held")
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	waitDone(t, done)
	assert.EqualValues(t, 1, next.calls.Load(), "a request whose client is gone is not passed on")

	// Already cancelled before it arrives: not passed on either.
	r = httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	_, done = serveAsync(h, r)
	waitDone(t, done)
	assert.EqualValues(t, 1, next.calls.Load())
}

func TestShapingMaxDelay(t *testing.T) {
	clock := newClock()
	// Slots a second apart; no request may wait longer than 500 ms.
	lim := newLimiter(t, clock, core.Limit{
		Algorithm: core.LeakyBucket, Rate: core.PerSecond(1), Burst: 5,
		Shaping: true, MaxDelay: 500 * time.Millisecond,
	})
	next := &okHandler{}
	h := stdhttp.New(lim, peerKey)(next)
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	w := get(h, "/", "192.0.2.1")
	requireProblem(t, w, http.StatusTooManyRequests)
	assert.Equal(t, "1", w.Header().Get(answer.HeaderRetryAfter))
	assert.EqualValues(t, 1, next.calls.Load())
}

func TestConcurrentRequestsOnOneKey(t *testing.T) {
	const limit, workers, perWorker = 100, 64, 8
	for _, algo := range algorithms {
		t.Run(algo.String(), func(t *testing.T) {
			lim := newLimiter(t, newClock(), core.Limit{Algorithm: algo, Rate: core.PerMinute(limit)})
			next := &okHandler{}
			h := stdhttp.New(lim, peerKey)(next)
			var ok, denied atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perWorker {
						switch get(h, "/", "192.0.2.1").Code {
						case http.StatusOK:
							ok.Add(1)
						case http.StatusTooManyRequests:
							denied.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			assert.EqualValues(t, limit, ok.Load())
			assert.EqualValues(t, workers*perWorker-limit, denied.Load())
			assert.EqualValues(t, limit, next.calls.Load())
		})
	}
}

func TestHeadersVisibleToNextHandler(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(10)})
	var seen string
	h := stdhttp.New(lim, peerKey)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Get(answer.HeaderRemaining)
		w.WriteHeader(http.StatusCreated)
	}))
	w := get(h, "/", "192.0.2.1")
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, "9", seen)
}

func TestKeyfuncsIP(t *testing.T) {
	ip, err := keyfuncs.IP()
	require.NoError(t, err)
	lim := newLimiter(t, newClock(), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	h := stdhttp.New(lim, ip)(&okHandler{})
	require.Equal(t, http.StatusOK, get(h, "/", "192.0.2.1").Code)
	require.Equal(t, http.StatusTooManyRequests, get(h, "/", "192.0.2.1").Code)

	// Addresses in one IPv6 /64 are one client.
	require.Equal(t, http.StatusOK, get(h, "/", "[2001:db8::1]").Code)
	require.Equal(t, http.StatusTooManyRequests, get(h, "/", "[2001:db8::2]").Code)
}

func TestNewPanicsWithoutLimiterOrKey(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Rate: core.PerMinute(1)})
	assert.Panics(t, func() { stdhttp.New(nil, peerKey) })
	assert.Panics(t, func() { stdhttp.New(lim, nil) })
}

func TestNilOptionsKeepDefaults(t *testing.T) {
	lim := newLimiter(t, newClock(), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(1)})
	h := stdhttp.New(lim, keyfuncs.Header("X-Api-Key"),
		stdhttp.WithSkipper(nil), stdhttp.WithCost(nil),
		stdhttp.WithDeniedHandler(nil), stdhttp.WithErrorHandler(nil))(&okHandler{})
	requireProblem(t, get(h, "/", "192.0.2.1"), http.StatusBadRequest)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Api-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	requireProblem(t, w, http.StatusTooManyRequests)
}
