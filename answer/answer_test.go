package answer_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
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

func fieldMap(t *testing.T, fs []answer.Field) http.Header {
	t.Helper()
	h := http.Header{}
	for _, f := range fs {
		require.Len(t, f.Value, 1, f.Name)
		h[f.Name] = f.Value
	}
	return h
}

// take takes the decision of one request of key, which must not fail.
func take(t *testing.T, lim *core.Limiter, key string, cost int) core.Decision {
	t.Helper()
	d, err := lim.Take(context.Background(), key, cost)
	require.NoError(t, err)
	return d
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
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch.Add(17 * time.Second))
			lim, err := core.NewLimiter(core.Limit{Name: "demo", Algorithm: alg, Rate: core.PerMinute(3)},
				core.WithStore(&core.MemoryStore{Clock: clock.Now}))
			require.NoError(t, err)
			for i := 0; i < 4; i++ {
				d := take(t, lim, "client", 1)
				h := fieldMap(t, answer.Both.Fields(nil, &d))
				name, policy := member(t, h, answer.HeaderRateLimitPolicy)
				assert.Equal(t, "demo", name)
				assert.Equal(t, map[string]int64{"q": 3, "w": ceilSeconds(d.Window)}, policy)
				name, rl := member(t, h, answer.HeaderRateLimit)
				assert.Equal(t, "demo", name)
				assert.Equal(t, int64(d.Remaining), rl["r"])
				if i < 3 {
					require.True(t, d.Allowed, "request %d", i+1)
					assert.Equal(t, ceilSeconds(d.ResetAfter), rl["t"], "admitted: t is the time until the quota is full")
					assert.Empty(t, h.Get(answer.HeaderRetryAfter))
					clock.Advance(time.Second)
					continue
				}
				require.False(t, d.Allowed, "request 4 is rejected")
				retry, err := strconv.ParseInt(h.Get(answer.HeaderRetryAfter), 10, 64)
				require.NoError(t, err)
				assert.Equal(t, retry, rl["t"], "429: t must be the moment of Retry-After")
				assert.Equal(t, h.Get(answer.HeaderRetryAfter), h.Get(answer.HeaderXRetryAfter))
				// And the moment is true: waiting it admits the request.
				clock.Advance(time.Duration(retry) * time.Second)
				assert.True(t, take(t, lim, "client", 1).Allowed, "retry after %d s", retry)
			}
		})
	}
}

func TestXRateLimitFields(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	lim, _ := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}))
	clock.Advance(15 * time.Second)
	d := take(t, lim, "k", 1)
	assert.Equal(t, http.Header{"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"45"}},
		fieldMap(t, answer.XRateLimit.Fields(nil, &d)))
	assert.Empty(t, answer.NoHeaders.Fields(nil, &d), "NoHeaders: nothing on an admission")
	take(t, lim, "k", 1)
	d = take(t, lim, "k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, http.Header{"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"45"},
		"Retry-After": {"45"}, "X-Ratelimit-Retry-After": {"45"}}, fieldMap(t, answer.XRateLimit.Fields(nil, &d)))
	assert.Equal(t, http.Header{"Retry-After": {"45"}}, fieldMap(t, answer.NoHeaders.Fields(nil, &d)))
}

// Fields appends to dst, keeping what it holds: the caller's buffer.
func TestFieldsAppend(t *testing.T) {
	lim, _ := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)})
	d := take(t, lim, "k", 1)
	var buf [8]answer.Field
	dst := append(buf[:0], answer.Field{Name: "X-Other", Value: []string{"kept"}})
	fs := answer.XRateLimit.Fields(dst, &d)
	require.Len(t, fs, 4)
	assert.Equal(t, answer.Field{Name: "X-Other", Value: []string{"kept"}}, fs[0])
	assert.Equal(t, answer.HeaderLimit, fs[1].Name)
	assert.Same(t, &buf[0], &fs[0], "in the caller's buffer")
}

// A block (count 0) carries no count fields, only Retry-After.
func TestBlockFields(t *testing.T) {
	lim, _ := core.NewLimiter(core.Limit{Name: "banned", Rate: core.Rate{Period: time.Hour}})
	d := take(t, lim, "k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, http.Header{"Retry-After": {"3600"}}, fieldMap(t, answer.Both.Fields(nil, &d)))
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
	var buf [8]answer.Field
	fields := func(lim *core.Limiter, key string, cost int) []answer.Field {
		d, _ := lim.Take(ctx, key, cost)
		return answer.XRateLimit.Fields(buf[:0], &d)
	}
	allocs := testing.AllocsPerRun(1600, func() { fields(lim, "k", 1) })
	assert.LessOrEqual(t, allocs, 1.0/16+0.01, "allocations per response")
	small, _ := core.NewLimiter(core.Limit{Name: "small", Algorithm: core.TokenBucket, Rate: core.PerSecond(1000)})
	allocs = testing.AllocsPerRun(1000, func() { fields(small, "k", 1) })
	assert.Zero(t, allocs)
	h := fieldMap(t, fields(lim, "k", 1))
	assert.Equal(t, "1000000000", h.Get(answer.HeaderLimit))
	rem, err := strconv.Atoi(h.Get(answer.HeaderRemaining))
	require.NoError(t, err)
	assert.Greater(t, rem, 999_990_000)

	// 10,000 an hour: once every run has been made, no key allocates.
	hourly, _ := core.NewLimiter(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(10_000)})
	for range 10_000 {
		fields(hourly, "warm", 1)
	}
	keys := 0
	allocs = testing.AllocsPerRun(1000, func() {
		keys++
		fields(hourly, strconv.Itoa(keys%50), 1+keys%200)
	})
	assert.Zero(t, allocs, "allocations per response, quota 10000")
}

// Every number reads as itself, across runs, slots that runs share, the
// table's end and the largest int64, from many goroutines at once.
func TestNumbersReadAsThemselves(t *testing.T) {
	check := func(t *testing.T, n int) {
		lim, err := core.NewLimiter(core.Limit{Name: "n", Algorithm: core.FixedWindow, Rate: core.Rate{Count: n, Period: time.Hour}})
		require.NoError(t, err)
		d := take(t, lim, "k", 1)
		h := fieldMap(t, answer.XRateLimit.Fields(nil, &d))
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

// Bodies say what kind of failure it is in fixed words, whatever the
// error behind it, which may hold anything: it is for the logger (package
// adapter logs it, once per episode), never for the client.
func TestProblemsDoNotLeak(t *testing.T) {
	secret := errors.New("dial postgres://app:s3cret@db:5432: refused")
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadRequest, http.StatusInternalServerError} {
		body := string(answer.Problem(status, &core.Decision{Name: "api", RetryAfter: time.Second}, secret))
		require.NotContains(t, body, "s3cret", status)
		require.NotContains(t, body, "postgres", status)
	}
	var p map[string]any
	require.NoError(t, json.Unmarshal(answer.Problem(http.StatusInternalServerError, &core.Decision{}, secret), &p))
	assert.Equal(t, map[string]any{"title": "Internal Server Error", "status": 500.0, "detail": "rate limit unavailable for this request"}, p)

	missing := errors.Join(errors.New("keyfuncs: header X-Api-Key: <script>"), core.ErrMissingKey)
	require.NoError(t, json.Unmarshal(answer.Problem(http.StatusBadRequest, &core.Decision{}, missing), &p))
	assert.Equal(t, map[string]any{"title": "Bad Request", "status": 400.0, "detail": "the request has no value to be rate limited by"}, p)

	// A cost beyond the limit's capacity: the error of core itself.
	lim, _ := core.NewLimiter(core.Limit{Rate: core.PerMinute(5)})
	_, err := lim.Take(context.Background(), "k", 6)
	require.ErrorIs(t, err, core.ErrCostExceedsLimit)
	clear(p)
	require.NoError(t, json.Unmarshal(answer.Problem(http.StatusInternalServerError, &core.Decision{}, err), &p))
	assert.Equal(t, map[string]any{"title": "Internal Server Error", "status": 500.0, "detail": "rate limit misconfigured"}, p)
}

func TestProblemBodies(t *testing.T) {
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 2 s","limit":"api","retry_after":2}`,
		string(answer.Problem(http.StatusTooManyRequests, &core.Decision{Name: "api", RetryAfter: 1500 * time.Millisecond}, nil)))
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"rate limiter unavailable","retry_after":1}`,
		string(answer.Problem(http.StatusServiceUnavailable, &core.Decision{RetryAfter: time.Second}, errors.New("redis: connection refused"))))
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 1 s","limit":"api","retry_after":1}`,
		string(answer.Problem(http.StatusTooManyRequests, &core.Decision{Name: "api"}, nil)), "retry in at least 1 s")
	body := answer.Problem(http.StatusTooManyRequests, &core.Decision{Name: "api"}, nil)
	assert.Equal(t, byte('\n'), body[len(body)-1], "one line")
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
