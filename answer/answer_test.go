package answer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

func fieldMap(fs []answer.Field) http.Header {
	h := http.Header{}
	for _, f := range fs {
		require.Len(nil, f.Value, 1)
		h[f.Name] = f.Value
	}
	return h
}

// member parses a RateLimit or RateLimit-Policy field with an RFC 9651
// parser: a List of one String item with integer parameters.
func member(t *testing.T, h http.Header, name string) (string, map[string]int64) {
	t.Helper()
	l, err := httpsfv.UnmarshalList(h.Values(name))
	require.NoError(t, err, "%s: %q is not a structured-field list", name, h.Values(name))
	require.Len(t, l, 1)
	it, ok := l[0].(httpsfv.Item)
	require.True(t, ok)
	s, ok := it.Value.(string)
	require.True(t, ok, "the policy name is a String")
	params := map[string]int64{}
	for _, k := range it.Params.Names() {
		v, _ := it.Params.Get(k)
		n, ok := v.(int64)
		require.True(t, ok, "parameter %s is an Integer", k)
		params[k] = n
	}
	return s, params
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// On a 429, the IETF t is the same moment as Retry-After; on an
// admission it is the time until the full quota is back: for every
// algorithm, checked with a structured-field parser.
func TestIETFFieldsAgreeWithRetryAfter(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(17 * time.Second))
			lim, err := core.NewLimiter(core.Limit{Name: "demo", Algorithm: alg, Rate: core.PerMinute(3)},
				core.WithStore(&core.MemoryStore{Clock: clock.Now}))
			require.NoError(t, err)
			r := &answer.Responder{Headers: answer.Both}
			for i := 0; i < 4; i++ {
				var v answer.Verdict
				fs := r.Verdict(ctx, &v, lim, "client", nil, 1, nil)
				h := fieldMap(fs)
				name, policy := member(t, h, answer.HeaderRateLimitPolicy)
				assert.Equal(t, "demo", name)
				assert.Equal(t, map[string]int64{"q": 3, "w": ceilSeconds(v.Decision.Window)}, policy)
				name, rl := member(t, h, answer.HeaderRateLimit)
				assert.Equal(t, "demo", name)
				assert.Equal(t, int64(v.Decision.Remaining), rl["r"])
				if i < 3 {
					require.True(t, v.Pass(), "request %d", i+1)
					assert.Equal(t, ceilSeconds(v.Decision.ResetAfter), rl["t"], "admitted: t is the time until the quota is full")
					assert.Empty(t, h.Get(answer.HeaderRetryAfter))
					clock.Advance(time.Second)
					continue
				}
				require.Equal(t, http.StatusTooManyRequests, v.Status)
				retry, err := strconv.ParseInt(h.Get(answer.HeaderRetryAfter), 10, 64)
				require.NoError(t, err)
				assert.Equal(t, retry, rl["t"], "429: t must be the moment of Retry-After")
				assert.Equal(t, h.Get(answer.HeaderRetryAfter), h.Get(answer.HeaderXRetryAfter))
				// And the moment is true: waiting it admits the request.
				clock.Advance(time.Duration(retry) * time.Second)
				r.Verdict(ctx, &v, lim, "client", nil, 1, nil)
				assert.True(t, v.Pass(), "retry after %d s", retry)
			}
		})
	}
}

func TestXRateLimitFields(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	lim, _ := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}))
	var r answer.Responder
	clock.Advance(15 * time.Second)
	var v answer.Verdict
	fs := r.Verdict(ctx, &v, lim, "k", nil, 1, nil)
	assert.Equal(t, http.Header{"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"45"}}, fieldMap(fs))
	r.Verdict(ctx, &answer.Verdict{}, lim, "k", nil, 1, nil)
	fs = r.Verdict(ctx, &v, lim, "k", nil, 1, nil)
	assert.Equal(t, http.StatusTooManyRequests, v.Status)
	assert.Equal(t, http.Header{"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"45"},
		"Retry-After": {"45"}, "X-Ratelimit-Retry-After": {"45"}}, fieldMap(fs))

	none := answer.Responder{Headers: answer.NoHeaders}
	fs = none.Verdict(ctx, &v, lim, "k", nil, 1, nil)
	assert.Equal(t, http.Header{"Retry-After": {"45"}}, fieldMap(fs))
}

// A block (count 0) carries no count fields, only Retry-After.
func TestBlockFields(t *testing.T) {
	lim, _ := core.NewLimiter(core.Limit{Name: "banned", Rate: core.Rate{Period: time.Hour}})
	r := answer.Responder{Headers: answer.Both}
	var v answer.Verdict
	fs := r.Verdict(context.Background(), &v, lim, "k", nil, 1, nil)
	assert.Equal(t, http.StatusTooManyRequests, v.Status)
	assert.Equal(t, http.Header{"Retry-After": {"3600"}}, fieldMap(fs))
}

// Numbers of 4096 and more come from runs of consecutive numbers: a hot
// key of a large quota allocates one run per 16 responses, and a quota up
// to 16384 nothing once its runs are made.
func TestLargeNumbersAllocateByRun(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	lim, _ := core.NewLimiter(core.Limit{Name: "big", Algorithm: core.FixedWindow, Rate: core.Rate{Count: 1_000_000_000, Period: 24 * time.Hour}})
	var r answer.Responder
	var buf [8]answer.Field
	allocs := testing.AllocsPerRun(1600, func() {
		var v answer.Verdict
		r.Verdict(ctx, &v, lim, "k", nil, 1, buf[:0])
	})
	assert.LessOrEqual(t, allocs, 1.0/16+0.01, "allocations per response")
	small, _ := core.NewLimiter(core.Limit{Name: "small", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)})
	allocs = testing.AllocsPerRun(1000, func() {
		var v answer.Verdict
		r.Verdict(ctx, &v, small, "k", nil, 1, buf[:0])
	})
	assert.Zero(t, allocs)
	var v answer.Verdict
	fs := r.Verdict(ctx, &v, lim, "k", nil, 1, buf[:0])
	assert.Equal(t, "1000000000", fieldMap(fs).Get(answer.HeaderLimit))
	rem, err := strconv.Atoi(fieldMap(fs).Get(answer.HeaderRemaining))
	require.NoError(t, err)
	assert.Greater(t, rem, 999_990_000)

	// 10,000 an hour: once every run has been made, no key allocates.
	hourly, _ := core.NewLimiter(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(10_000)})
	for range 10_000 {
		r.Verdict(ctx, &v, hourly, "warm", nil, 1, buf[:0])
	}
	keys := 0
	allocs = testing.AllocsPerRun(1000, func() {
		keys++
		var v answer.Verdict
		r.Verdict(ctx, &v, hourly, strconv.Itoa(keys%50), nil, 1+keys%200, buf[:0])
	})
	assert.Zero(t, allocs, "allocations per response, quota 10000")
}

// Every number reads as itself, across runs, slots that runs share, the
// table's end and the largest int64, from many goroutines at once.
func TestNumbersReadAsThemselves(t *testing.T) {
	var r answer.Responder
	ctx := context.Background()
	check := func(t *testing.T, n int) {
		lim, err := core.NewLimiter(core.Limit{Name: "n", Algorithm: core.FixedWindow, Rate: core.Rate{Count: n, Period: time.Hour}})
		require.NoError(t, err)
		var v answer.Verdict
		fs := r.Verdict(ctx, &v, lim, "k", nil, 1, nil)
		h := fieldMap(fs)
		assert.Equal(t, strconv.Itoa(n), h.Get(answer.HeaderLimit))
		assert.Equal(t, strconv.Itoa(n-1), h.Get(answer.HeaderRemaining))
	}
	for _, n := range []int{4095, 4096, 4097, 4111, 4112, 4113, 16383, 16384, 16385, 4096 + 16384, core.MaxCount} {
		check(t, n)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				check(t, 4097+rng.IntN(1<<20)) // runs that share slots replace each other
			}
		}()
	}
	wg.Wait()
}

// Bodies say what kind of failure it is in fixed words; the error text,
// which may hold anything, goes to the logger, once per episode.
func TestProblemsDoNotLeak(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	r := answer.Responder{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	lim, _ := core.NewLimiter(core.Limit{Rate: core.PerMinute(5)})
	secret := errors.New("dial postgres://app:s3cret@db:5432: refused")
	for i := 0; i < 100; i++ {
		var v answer.Verdict
		fs := r.Verdict(ctx, &v, lim, "", secret, 1, nil)
		require.Equal(t, http.StatusInternalServerError, v.Status)
		require.Empty(t, fs)
		require.False(t, v.Rejected())
		body := string(answer.Problem(&v))
		require.NotContains(t, body, "s3cret")
		require.NotContains(t, body, "postgres")
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "key function failing"), logs.String())
	assert.Contains(t, logs.String(), "s3cret", "the error is logged")
	var v answer.Verdict
	r.Verdict(ctx, &v, lim, "k", nil, 1, nil)
	require.True(t, v.Pass())
	assert.Contains(t, logs.String(), "failed_requests=100")

	missing := errors.Join(errors.New("keyfuncs: header X-Api-Key: <script>"), core.ErrMissingKey)
	r.Verdict(ctx, &v, lim, "", missing, 1, nil)
	assert.Equal(t, http.StatusBadRequest, v.Status)
	var p map[string]any
	require.NoError(t, json.Unmarshal(answer.Problem(&v), &p))
	assert.Equal(t, map[string]any{"title": "Bad Request", "status": 400.0, "detail": "the request has no value to be rate limited by"}, p)

	r.Verdict(ctx, &v, lim, "k", nil, 6, nil)
	assert.Equal(t, http.StatusInternalServerError, v.Status)
	require.NoError(t, json.Unmarshal(answer.Problem(&v), &p))
	assert.Equal(t, "rate limit misconfigured", p["detail"])
}

func TestProblemBodies(t *testing.T) {
	v := answer.Verdict{Status: 429, Decision: core.Decision{Name: "api", RetryAfter: 1500 * time.Millisecond}}
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 2 s","limit":"api","retry_after":2}`,
		string(answer.Problem(&v)))
	v = answer.Verdict{Status: 503, Err: errors.New("redis: connection refused"), Decision: core.Decision{RetryAfter: time.Second}}
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"rate limiter unavailable","retry_after":1}`,
		string(answer.Problem(&v)))
	assert.True(t, v.Rejected())
}

func TestHold(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, answer.Hold(ctx, &core.Decision{}))
	cancel()
	require.ErrorIs(t, answer.Hold(ctx, &core.Decision{Delay: time.Hour}), context.Canceled)
}

func TestParseStyle(t *testing.T) {
	for s, want := range map[string]answer.Style{"": answer.XRateLimit, "x-ratelimit": answer.XRateLimit, "ietf": answer.IETF, "both": answer.Both, "none": answer.NoHeaders} {
		got, err := answer.ParseStyle(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := answer.ParseStyle("draft")
	assert.ErrorContains(t, err, "valid: x-ratelimit, ietf, both, none")
}

// Every kind of failure is its own episode, and requests that alternate
// between failing and being decided log at most two lines per kind per
// 10 seconds, where each alternation used to log two.
func TestFailureLogsBoundedByTime(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	r := &answer.Responder{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	lim, err := core.NewLimiter(core.Limit{Rate: core.PerMinute(1_000_000)})
	require.NoError(t, err)
	plans, err := core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) {
		return core.Limit{}, errors.New("plan store down")
	})
	require.NoError(t, err)
	fail := map[string]func(){
		"without a rate-limit key": func() { r.Verdict(ctx, &answer.Verdict{}, lim, "", core.ErrMissingKey, 1, nil) },
		"key function failing":     func() { r.Verdict(ctx, &answer.Verdict{}, lim, "", errors.New("lookup failed"), 1, nil) },
		"plan function failing":    func() { r.Verdict(ctx, &answer.Verdict{}, plans, "k", nil, 1, nil) },
		"cost out of range":        func() { r.Verdict(ctx, &answer.Verdict{}, lim, "k", nil, 2_000_000, nil) },
	}
	for range 500 {
		for _, f := range fail {
			f()
			var v answer.Verdict
			r.Verdict(ctx, &v, lim, "k", nil, 1, nil)
			require.NoError(t, v.Err)
		}
	}
	for kind := range fail {
		starts := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, kind) && !strings.Contains(line, "decided again") {
				starts++
			}
		}
		assert.Equal(t, 1, starts, "%s:\n%s", kind, logs.String())
	}
	assert.Equal(t, 4, strings.Count(logs.String(), "decided again"), logs.String())
}
