package rules_test

import (
	"context"
	"errors"
	"log/slog"
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

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// fixture is an engine on a clocked memory store, with its observer's
// events counted by limit and outcome, and the middleware of package
// stdhttp in front of a handler, which answers the requests as every
// adapter does (package adapter's Rules flow).
type fixture struct {
	t      *testing.T
	e      *rules.Engine
	clock  *storetest.Clock
	mw     http.Handler
	logs   adaptertest.SyncBuffer // the middleware's log
	mu     sync.Mutex
	events map[event]int
}

// passedOn marks the requests that the middleware passed on.
const passedOn = "X-Test-Passed-On"

type event struct {
	limit   string
	outcome core.Outcome
}

func newFixture(t *testing.T, opts ...rules.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: storetest.NewClock(storetest.Epoch), events: map[event]int{}}
	store := &core.MemoryStore{Clock: f.clock.Now}
	obs := func(e core.Event) {
		f.mu.Lock()
		f.events[event{e.Limit, e.Outcome}]++
		f.mu.Unlock()
	}
	opts = append([]rules.Option{rules.WithStore(store), rules.WithLimiterOptions(core.WithObserver(obs))}, opts...)
	var err error
	f.e, err = rules.NewEngine(opts...)
	require.NoError(t, err)
	f.mw = stdhttp.Rules(f.e, stdhttp.WithLogger(slog.New(slog.NewTextHandler(&f.logs, nil))))(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set(passedOn, "true") }))
	return f
}

func (f *fixture) load(cfg rules.Config) {
	f.t.Helper()
	require.NoError(f.t, f.e.Load(cfg))
}

func (f *fixture) event(limit string, o core.Outcome) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.events[event{limit, o}]
}

// req builds a request from "METHOD /path" with the peer ip and headers
// given as "Name: value".
func req(line, ip string, headers ...string) *http.Request {
	method, target, _ := strings.Cut(line, " ")
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = ip + ":1234"
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Add(k, v)
	}
	return r
}

// do serves r through the middleware and returns the status (0: passed
// on) and the header fields of the response.
func (f *fixture) do(r *http.Request) (int, http.Header) {
	f.t.Helper()
	w := httptest.NewRecorder()
	f.mw.ServeHTTP(w, r)
	h := w.Header()
	if h.Get(passedOn) != "" {
		h.Del(passedOn)
		return 0, h
	}
	require.NotEqual(f.t, http.StatusOK, w.Code, "answered by the middleware")
	return w.Code, h
}

// passes counts how many of n identical requests pass.
func (f *fixture) passes(n int, line, ip string, headers ...string) int {
	f.t.Helper()
	ok := 0
	for range n {
		if s, _ := f.do(req(line, ip, headers...)); s == 0 {
			ok++
		}
	}
	return ok
}

func rate(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

// loginConfig is the auth/login example: 5 login attempts per minute per
// client IP, on POST /login only.
func loginConfig() rules.Config {
	return rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{{
		Key:       "remote_address",
		Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
		RateLimit: rate("minute", 5),
	}}}
}

func TestLoginExample(t *testing.T) {
	f := newFixture(t)
	f.load(loginConfig())

	for i := range 5 {
		status, h := f.do(req("POST /login", "192.0.2.1"))
		require.Equal(t, 0, status, "attempt %d", i+1)
		assert.Equal(t, "5", h.Get("X-Ratelimit-Limit"))
		assert.Equal(t, []string{itoa(4 - i)}, h["X-Ratelimit-Remaining"])
	}
	status, h := f.do(req("POST /login", "192.0.2.1"))
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, "0", h.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, "60", h.Get("Retry-After"))
	assert.Equal(t, "60", h.Get("X-Ratelimit-Retry-After"))
	assert.Equal(t, 1, f.event(onlyName(t, f, "POST /login"), core.Denied))
	assert.Equal(t, 5, f.event(onlyName(t, f, "POST /login"), core.Allowed))

	// Another client, another method, another path: not limited by it.
	assert.Equal(t, 5, f.passes(5, "POST /login", "192.0.2.2"))
	status, h = f.do(req("GET /login", "192.0.2.1"))
	assert.Equal(t, 0, status)
	assert.Empty(t, h, "no rule applies, so no headers")
	assert.Equal(t, 0, f.passes(1, "POST //login/", "192.0.2.1"), "an uncleaned path is the same route")
	assert.Equal(t, 1, f.passes(1, "POST /login/x", "192.0.2.1"))

	f.clock.Advance(time.Minute)
	assert.Equal(t, 5, f.passes(6, "POST /login", "192.0.2.1"))
}

func itoa(n int) string { return strconv.Itoa(n) }

// onlyName returns the name of the one limit that applies to line.
func onlyName(t *testing.T, f *fixture, line string) string {
	t.Helper()
	names, _, err := f.e.Matches(rules.HTTPRequest(req(line, "192.0.2.1")))
	require.NoError(t, err)
	require.Len(t, names, 1)
	return names[0]
}

// The messaging example of the Envoy rate-limit service: nested
// descriptors apply a tighter limit to marketing messages, and a limit
// per number to all; both apply to a marketing message.
func TestNestedDescriptors(t *testing.T) {
	f := newFixture(t,
		rules.WithKey("message_type", headerKey("X-Message-Type")),
		rules.WithKey("to_number", headerKey("X-To")))
	f.load(rules.Config{Domain: "messaging", Descriptors: []rules.Descriptor{
		{Key: "message_type", Value: "marketing", Descriptors: []rules.Descriptor{
			{Key: "to_number", RateLimit: rate("day", 5)},
		}},
		{Key: "to_number", RateLimit: rate("day", 100)},
	}})

	marketing := func(to string) []string { return []string{"X-Message-Type: marketing", "X-To: " + to} }
	names, keys, err := f.e.Matches(rules.HTTPRequest(req("POST /send", "192.0.2.1", marketing("555")...)))
	require.NoError(t, err)
	assert.Equal(t, []string{"messaging/message_type:marketing/to_number", "messaging/to_number"}, names)
	assert.Equal(t, []string{"555", "555"}, keys)

	assert.Equal(t, 5, f.passes(10, "POST /send", "192.0.2.1", marketing("555")...))
	assert.Equal(t, 5, f.passes(10, "POST /send", "192.0.2.1", marketing("556")...), "the limit is per number")
	// Other message types to 555 share the 100 per day: 5 were counted.
	assert.Equal(t, 95, f.passes(100, "POST /send", "192.0.2.1", "X-Message-Type: alert", "X-To: 555"))
	// Without a number, no descriptor applies.
	assert.Equal(t, 3, f.passes(3, "POST /send", "192.0.2.1", "X-Message-Type: marketing"))
}

func headerKey(name string) rules.KeyFunc {
	return func(r rules.Request) (string, error) {
		if v := r.Values(name); len(v) > 0 {
			return v[0], nil
		}
		return "", nil
	}
}

// A specific value beats the key-only descriptor: tiers of API keys, a
// block-list entry (requests_per_unit 0) and an exempt one (unlimited).
func TestValueMatching(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "header:X-API-Key", RateLimit: rate("minute", 3)},
		{Key: "header:X-API-Key", Value: "premium-1", RateLimit: rate("minute", 30)},
		{Key: "header:X-API-Key", Value: "partner-*", RateLimit: rate("minute", 10)},
		{Key: "header:X-API-Key", Value: "internal", RateLimit: &rules.RateLimit{Unlimited: true}},
		{Key: "remote_address", Value: "198.51.100.66", RateLimit: rate("second", 0)},
	}})

	assert.Equal(t, 3, f.passes(50, "GET /", "192.0.2.1", "X-API-Key: free-1"))
	assert.Equal(t, 30, f.passes(50, "GET /", "192.0.2.1", "X-API-Key: premium-1"))
	assert.Equal(t, 10, f.passes(50, "GET /", "192.0.2.1", "X-API-Key: partner-a"))
	assert.Equal(t, 10, f.passes(50, "GET /", "192.0.2.1", "X-API-Key: partner-b"), "a prefix value keys by the whole value")
	assert.Equal(t, 50, f.passes(50, "GET /", "192.0.2.1", "X-API-Key: internal"))
	assert.Equal(t, 50, f.passes(50, "GET /", "192.0.2.1"), "no key, no limit")

	status, h := f.do(req("GET /", "198.51.100.66", "X-API-Key: internal"))
	assert.Equal(t, http.StatusTooManyRequests, status, "a block-list entry rejects every request")
	assert.Equal(t, "1", h.Get("Retry-After"), "one period")
	assert.Empty(t, h.Get("X-Ratelimit-Limit"), "a block has no counts")
}

// A block-list entry is a limit of 0: it rejects every request, whatever
// the time, and the other rules that match a blocked request do not count
// it.
func TestBlockCountsNothing(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "all", RateLimit: rate("minute", 5)},
		{Key: "remote_address", Value: "198.51.100.66", RateLimit: rate("hour", 0)},
	}})
	for range 10 {
		status, h := f.do(req("GET /", "198.51.100.66"))
		require.Equal(t, http.StatusTooManyRequests, status, "a rejection, no error (503 or 500)")
		assert.Equal(t, "3600", h.Get("Retry-After"), "retry after an hour")
		assert.Empty(t, h.Get("X-Ratelimit-Limit"), "no quota")
	}
	assert.Equal(t, 5, f.passes(10, "GET /", "192.0.2.1"), "the blocked requests were not counted by the global limit")
	f.clock.Advance(2 * time.Hour)
	assert.Equal(t, 0, f.passes(3, "GET /", "198.51.100.66"), "a block never ends")
}

// replaces suppresses a named limit when the replacing one applies.
func TestReplaces(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2, Name: "per-ip"}},
		{Key: "header:X-Partner", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 20, Replaces: []string{"per-ip"}}},
	}})
	assert.Equal(t, 2, f.passes(10, "GET /", "192.0.2.1"))
	assert.Equal(t, 20, f.passes(30, "GET /", "192.0.2.1", "X-Partner: acme"), "the partner limit replaces the IP limit")
}

// Several rules apply: all must admit, a rejection is counted by none, and
// the headers describe the most restrictive.
func TestSeveralRules(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "global", RateLimit: rate("minute", 100)},
		{Key: "remote_address", Match: &rules.Match{Path: "/api/*"}, RateLimit: rate("minute", 4)},
	}})
	_, h := f.do(req("GET /api/items", "192.0.2.1"))
	assert.Equal(t, "4", h.Get("X-Ratelimit-Limit"))
	assert.Equal(t, "3", h.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, 3, f.passes(10, "GET /api/x/y", "192.0.2.1"))
	_, h = f.do(req("GET /other", "192.0.2.1"))
	assert.Equal(t, "100", h.Get("X-Ratelimit-Limit"))
	assert.Equal(t, "95", h.Get("X-Ratelimit-Remaining"), "4 admitted API requests and this one; the 7 rejected are not counted")
	assert.Equal(t, 0, f.passes(1, "GET /api", "192.0.2.1"), "/api/* covers /api")
	assert.Equal(t, 1, f.passes(1, "GET /apix", "192.0.2.1"))
}

func TestMatchPatterns(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "m", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "items", Match: &rules.Match{Methods: []string{"get", "HEAD"}, Path: "/items/*/reviews"}, RateLimit: rate("minute", 1)},
		{Key: "generic_key", Value: "root", Match: &rules.Match{Path: "/"}, RateLimit: rate("minute", 1)},
	}})
	for line, want := range map[string]int{
		"GET /items/7/reviews":      1,
		"HEAD /items/8/reviews/":    1,
		"POST /items/7/reviews":     0,
		"GET /items/7/reviews/1":    0,
		"GET /items/reviews":        0,
		"GET /":                     1,
		"GET /a/../":                1,
		"GET /items/7/../7/reviews": 1,
	} {
		names, _, err := f.e.Matches(rules.HTTPRequest(req(line, "192.0.2.1")))
		require.NoError(t, err)
		assert.Len(t, names, want, line)
	}
}

// Each invalid element is reported with its source, line and path; all
// of them at once.
func TestLoadErrors(t *testing.T) {
	f := newFixture(t)
	one := func(d rules.Descriptor) rules.Config {
		return rules.Config{Source: "rules.yaml", Domain: "d", Line: 1, Descriptors: []rules.Descriptor{d}}
	}
	for _, tc := range []struct {
		cfg  rules.Config
		want string
	}{
		{rules.Config{Source: "rules.yaml", Line: 1}, "rules.yaml:1: domain: domain is required"},
		{one(rules.Descriptor{Line: 3, RateLimit: rate("minute", 1)}), "rules.yaml:3: descriptors[0].key: key is required"},
		{one(rules.Descriptor{Key: "plan", Line: 3, RateLimit: rate("minute", 1)}), `rules.yaml:3: descriptors[0].key: unknown descriptor key "plan"`},
		{one(rules.Descriptor{Key: "user", Line: 3, RateLimit: rate("minute", 1)}), "rules.yaml:3: descriptors[0].key: descriptor key user needs"},
		{one(rules.Descriptor{Key: "header:X Y", Line: 3, RateLimit: rate("minute", 1)}), `header name "X Y" is not a valid field name`},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "fortnight", RequestsPerUnit: 1, Line: 5}}),
			`rules.yaml:5: descriptors[0].rate_limit: unit "fortnight" is not one of second, minute, hour, day, week, month or year`},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{RequestsPerUnit: 1, Line: 5}}), "rules.yaml:5: descriptors[0].rate_limit: unit is required"},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unlimited: true, Unit: "minute", Line: 5}}), "rules.yaml:5: descriptors[0].rate_limit: unlimited excludes unit"},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: -1, Line: 5}}), "requests_per_unit -1 must not be negative"},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, Algorithm: "gcra", Line: 5}}), `rules.yaml:5: descriptors[0].rate_limit: ratekit: unknown algorithm "gcra"`},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, Burst: 5, Line: 5}}), "burst applies to token-bucket and leaky-bucket, not fixed-window"},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, SoftPercent: 5000, Line: 5}}), "soft percent 5000 must be between 0 and 1000"},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, Replaces: []string{"nope"}, Line: 5}}), `rules.yaml:5: descriptors[0].rate_limit.replaces: no rate limit is named "nope"`},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, Match: &rules.Match{Path: "login", Line: 4}, RateLimit: rate("minute", 1)}), `rules.yaml:4: descriptors[0].match: path "login" must start with /`},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, Match: &rules.Match{Path: "/a*", Line: 4}, RateLimit: rate("minute", 1)}), `* must be a whole segment`},
		{one(rules.Descriptor{Key: "remote_address", Line: 3, Match: &rules.Match{Methods: []string{"P0ST"}, Line: 4}, RateLimit: rate("minute", 1)}), `method "P0ST" is not a request method`},
		{rules.Config{Source: "rules.yaml", Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "remote_address", Line: 3, RateLimit: rate("minute", 1)},
			{Key: "remote_address", Line: 6, RateLimit: rate("minute", 2)},
		}}, `rules.yaml:6: descriptors[1]: duplicate descriptor: key "remote_address", value ""`},
		{rules.Config{Source: "rules.yaml", Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "remote_address", Line: 3, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, Name: "a", Line: 4}},
			{Key: "header:X", Line: 6, RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, Name: "a", Line: 7}},
		}}, `rules.yaml:7: descriptors[1].rate_limit: name "a" is already used by descriptors[0].rate_limit`},
		{rules.Config{Source: "rules.yaml", Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Line: 3, Descriptors: []rules.Descriptor{{Key: "what", Line: 4, RateLimit: rate("minute", 1)}}},
		}}, `rules.yaml:4: descriptors[0].descriptors[0].key: unknown descriptor key "what"`},
	} {
		err := f.e.Load(tc.cfg)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		var re *rules.Error
		assert.True(t, errors.As(err, &re), "errors are *rules.Error")
	}

	// Every problem is reported, not only the first.
	err := f.e.Load(rules.Config{Source: "r.yaml", Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "x", Line: 2, RateLimit: rate("minute", 1)},
		{Key: "remote_address", Line: 5, RateLimit: &rules.RateLimit{Unit: "fortnight", RequestsPerUnit: 1, Line: 6}},
	}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "r.yaml:2:")
	assert.Contains(t, err.Error(), "r.yaml:6:")
}

// Counts survive a reload: an unchanged identity keeps its counters and a
// changed limit applies to them; a failed reload keeps the rules in force.
func TestReloadKeepsCounts(t *testing.T) {
	f := newFixture(t)
	f.load(loginConfig())
	assert.Equal(t, 3, f.passes(3, "POST /login", "192.0.2.1"))

	bad := loginConfig()
	bad.Descriptors[0].RateLimit = rate("fortnight", 6)
	require.Error(t, f.e.Load(bad))
	assert.Equal(t, 5, f.e.Config().Descriptors[0].RateLimit.RequestsPerUnit, "the old rules stay")

	raised := loginConfig()
	raised.Descriptors[0].RateLimit = rate("minute", 6)
	raised.Descriptors = append(raised.Descriptors, rules.Descriptor{Key: "generic_key", Value: "other", RateLimit: rate("minute", 1000)})
	f.load(raised)
	_, h := f.do(req("POST /login", "192.0.2.1"))
	assert.Equal(t, "6", h.Get("X-Ratelimit-Limit"))
	assert.Equal(t, "2", h.Get("X-Ratelimit-Remaining"), "3 of 5 used, then 6: this is the 4th, 2 left")
	assert.Equal(t, 2, f.passes(5, "POST /login", "192.0.2.1"))

	tb := loginConfig()
	tb.Descriptors[0].RateLimit.Algorithm = "token-bucket"
	f.load(tb)
	assert.Equal(t, 5, f.passes(10, "POST /login", "192.0.2.1"), "a new algorithm counts afresh")
}

// Reloads race with traffic: every request is decided by one rule set,
// never a mix of two.
func TestReloadUnderTraffic(t *testing.T) {
	f := newFixture(t)
	version := func(v string) rules.Config {
		return rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Value: v + "-a", RateLimit: rate("minute", 1_000_000)},
			{Key: "remote_address", Descriptors: []rules.Descriptor{
				{Key: "generic_key", Value: v + "-b", RateLimit: rate("minute", 1_000_000)},
			}},
		}}
	}
	f.load(version("v1"))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mixed, decided atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rules.HTTPRequest(req("GET /", "192.0.2."+strconv.Itoa(g+1)))
			for !stop.Load() {
				names, _, err := f.e.Matches(r)
				if err != nil || len(names) != 2 || strings.Contains(names[0], "v1") != strings.Contains(names[1], "v1") {
					mixed.Add(1)
				}
				var buf [2]core.Check
				checks, err := f.e.Checks(r, buf[:0])
				if err != nil || len(checks) != 2 {
					mixed.Add(1)
					continue
				}
				if d, err := core.TakeAll(context.Background(), checks, 1); err == nil && d.Allowed {
					decided.Add(1)
				}
			}
		}()
	}
	for i := 0; i < 200 || decided.Load() < 2000; i++ {
		f.load(version([]string{"v1", "v2"}[i%2]))
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, mixed.Load())
	assert.Positive(t, decided.Load())
}

// Shadow mode counts and reports, but never rejects.
func TestShadowMode(t *testing.T) {
	f := newFixture(t)
	cfg := loginConfig()
	cfg.Descriptors[0].ShadowMode = true
	f.load(cfg)
	name := onlyName(t, f, "POST /login")
	for i := range 8 {
		status, h := f.do(req("POST /login", "192.0.2.1"))
		require.Equal(t, 0, status, "request %d", i+1)
		assert.Equal(t, "5", h.Get("X-Ratelimit-Limit"), "headers are still sent")
		assert.Equal(t, itoa(max(4-i, 0)), h.Get("X-Ratelimit-Remaining"))
		assert.Empty(t, h.Get("Retry-After"))
	}
	assert.Equal(t, 5, f.event(name, core.Allowed))
	assert.Equal(t, 3, f.event(name, core.ShadowDenied))
	assert.Zero(t, f.event(name, core.Denied))

	// Enforcing it keeps the counts the shadow run made.
	cfg.Descriptors[0].ShadowMode = false
	f.load(cfg)
	assert.Equal(t, 0, f.passes(1, "POST /login", "192.0.2.1"))

	// A shadow rule beside an enforced one: the enforced one decides.
	g := newFixture(t)
	g.load(rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: rate("minute", 3), ShadowMode: true},
		{Key: "generic_key", RateLimit: rate("minute", 5)},
	}})
	assert.Equal(t, 5, g.passes(10, "GET /", "192.0.2.1"))

	// The global switch.
	s := newFixture(t, rules.WithShadow())
	s.load(loginConfig())
	assert.Equal(t, 10, s.passes(10, "POST /login", "192.0.2.1"))
	assert.Equal(t, 5, s.event(onlyName(t, s, "POST /login"), core.ShadowDenied))
}

// Soft throttling admits soft_percent over the limit, flagged.
func TestSoftThrottling(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 10, SoftPercent: 20}},
	}})
	name := onlyName(t, f, "GET /")
	for i := range 13 {
		status, h := f.do(req("GET /", "192.0.2.1"))
		switch {
		case i < 10:
			assert.Equal(t, 0, status)
			assert.Empty(t, h.Get("X-Ratelimit-Soft"), "request %d", i+1)
			assert.Equal(t, itoa(9-i), h.Get("X-Ratelimit-Remaining"))
		case i < 12:
			assert.Equal(t, 0, status)
			assert.Equal(t, "true", h.Get("X-Ratelimit-Soft"), "request %d", i+1)
			assert.Equal(t, "0", h.Get("X-Ratelimit-Remaining"))
		default:
			assert.Equal(t, http.StatusTooManyRequests, status)
		}
		assert.Equal(t, "10", h.Get("X-Ratelimit-Limit"))
	}
	assert.Equal(t, 10, f.event(name, core.Allowed))
	assert.Equal(t, 2, f.event(name, core.SoftAllowed))
	assert.Equal(t, 1, f.event(name, core.Denied))
}

// Key sources: query, user from the context, route, custom keys; a key
// function's failure is an error verdict, a missing value no match.
func TestKeySources(t *testing.T) {
	type ctxKey struct{}
	f := newFixture(t,
		rules.WithUserKey(ctxKey{}),
		rules.WithKey("plan", func(r rules.Request) (string, error) {
			if r.Values("X-Plan") != nil && r.Values("X-Plan")[0] == "broken" {
				return "", errors.New("auth backend down")
			}
			return "", keyfuncs.ErrMissing
		}))
	f.load(rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "query:token", RateLimit: rate("minute", 1)},
		{Key: "user", RateLimit: rate("minute", 2)},
		{Key: "route", RateLimit: rate("minute", 3)},
		{Key: "plan", RateLimit: rate("minute", 4)},
	}})
	r := req("GET /items/7?token=abc", "192.0.2.1")
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, 42))
	names, keys, err := f.e.Matches(rules.HTTPRequest(r))
	require.NoError(t, err)
	assert.Equal(t, []string{"d/query:token", "d/user", "d/route"}, names)
	assert.Equal(t, []string{"abc", "42", "GET /items/7"}, keys)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, keys, _ = f.e.Matches(rules.HTTPRequest(r))
	})
	mux.ServeHTTP(httptest.NewRecorder(), req("GET /items/8", "192.0.2.1"))
	assert.Equal(t, []string{"GET /items/{id}"}, keys, "the mux pattern is the route")

	checks, err := f.e.Checks(rules.HTTPRequest(req("GET /", "192.0.2.1", "X-Plan: broken")), nil)
	assert.ErrorContains(t, err, "auth backend down")
	assert.Empty(t, checks)
	status, h := f.do(req("GET /", "192.0.2.1", "X-Plan: broken"))
	assert.Equal(t, http.StatusInternalServerError, status)
	assert.Empty(t, h.Get("X-Ratelimit-Limit"), "an error has no rate-limit fields")
	assert.Contains(t, f.logs.String(), "auth backend down", "the error is logged")
}

func TestNoRules(t *testing.T) {
	e, err := rules.NewEngine()
	require.NoError(t, err)
	var buf [8]core.Check
	checks, err := e.Checks(rules.HTTPRequest(req("GET /", "192.0.2.1")), buf[:0])
	require.NoError(t, err)
	assert.Empty(t, checks)
	d, err := core.TakeAll(context.Background(), checks, 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "no checks, no limit")
	_, err = rules.NewEngine(rules.WithKey("remote_address", headerKey("X")))
	assert.Error(t, err)
	_, err = rules.NewEngine(rules.WithStore(nil))
	assert.Error(t, err)
}

// TestWithClientIP: remote_address reads X-Forwarded-For only from the
// trusted proxies that WithClientIP names, walked from the right; without
// it, the peer is the client; an invalid option fails NewEngine with the
// error keyfuncs.IP gives, naming the value.
func TestWithClientIP(t *testing.T) {
	cfg := rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: rate("minute", 10)},
	}}
	keyOf := func(e *rules.Engine, r *http.Request) string {
		t.Helper()
		_, keys, err := e.Matches(rules.HTTPRequest(r))
		require.NoError(t, err)
		require.Len(t, keys, 1)
		return keys[0]
	}
	proxied := req("GET /", "10.0.0.1", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2")

	e, err := rules.NewEngine(rules.WithClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.IPv6Prefix(48)))
	require.NoError(t, err)
	require.NoError(t, e.Load(cfg))
	assert.Equal(t, "198.51.100.7", keyOf(e, proxied))
	assert.Equal(t, "203.0.113.9", keyOf(e, req("GET /", "203.0.113.9", "X-Forwarded-For: 6.6.6.6")))
	assert.Equal(t, "2001:db8:1::/48", keyOf(e, req("GET /", "[2001:db8:1:2::1]")))

	def, err := rules.NewEngine()
	require.NoError(t, err)
	require.NoError(t, def.Load(cfg))
	assert.Equal(t, "10.0.0.1", keyOf(def, proxied), "no trusted proxies: the peer")
	assert.Equal(t, "2001:db8:1:2::/64", keyOf(def, req("GET /", "[2001:db8:1:2::1]")))

	_, err = rules.NewEngine(rules.WithClientIP(keyfuncs.TrustedProxies("10.0.0.0/33")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"10.0.0.0/33"`)
	_, err = rules.NewEngine(rules.WithClientIP(keyfuncs.IPv6Prefix(0)))
	assert.ErrorContains(t, err, "IPv6Prefix(0)")
}

// Limit names come from the rule identity: readable, and told apart by a
// hash only where the readable forms of two rules would be the same, or
// where one is too long.
func TestLimitNames(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("x", 80)
	f.load(rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "header:X-K", Value: "a b", RateLimit: rate("minute", 1)},
		{Key: "header:X-K", Value: "a_b", RateLimit: rate("minute", 1)},
		{Key: "header:X-K", Value: long, RateLimit: rate("minute", 1)},
	}})
	n1 := onlyNameH(t, f, "X-K: a b")
	n2 := onlyNameH(t, f, "X-K: a_b")
	n3 := onlyNameH(t, f, "X-K: "+long)
	assert.Equal(t, "d/header:X-K:a_b", n2)
	assert.NotEqual(t, n1, n2)
	assert.True(t, strings.HasPrefix(n1, "d/header:X-K:a_b-"), n1)
	assert.LessOrEqual(t, len(n3), 64)
	for _, n := range []string{n1, n2, n3} {
		_, err := core.Limit{Name: n, Rate: core.PerMinute(1)}.Params(time.Nanosecond)
		require.NoError(t, err, n)
	}

	// A match reads as @METHODS/path, with no hash while no other rule
	// reads alike; two that read alike are both told apart by a hash.
	f.load(rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: rate("minute", 5)},
		{Key: "header:X-K", Value: "a b", RateLimit: rate("minute", 1)},
		{Key: "header:X-K", Value: "a\tb", RateLimit: rate("minute", 1)},
	}})
	names, _, err := f.e.Matches(rules.HTTPRequest(req("POST /login", "192.0.2.1")))
	require.NoError(t, err)
	assert.Equal(t, []string{"auth/remote_address@POST/login"}, names)
	n1, n2 = onlyNameH(t, f, "X-K: a b"), onlyNameH(t, f, "X-K: a\tb")
	assert.NotEqual(t, n1, n2)
	assert.True(t, strings.HasPrefix(n1, "auth/header:X-K:a_b-") && strings.HasPrefix(n2, "auth/header:X-K:a_b-"), "%s, %s", n1, n2)
}

func onlyNameH(t *testing.T, f *fixture, header string) string {
	t.Helper()
	names, _, err := f.e.Matches(rules.HTTPRequest(req("GET /", "192.0.2.1", header)))
	require.NoError(t, err)
	require.Len(t, names, 1)
	return names[0]
}

// Review findings, each once a bug: identities that read alike must not
// share counters; GET rules cover HEAD; an escaped slash cannot dodge a
// path; unlimited rules can replace; replaces works past many rules.
func TestRulesEdges(t *testing.T) {
	f := newFixture(t, rules.WithKey("a", headerKey("X-A")), rules.WithKey("query", headerKey("X-Q")))
	f.load(rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "path", Value: "/x", Descriptors: []rules.Descriptor{{Key: "generic_key", RateLimit: rate("minute", 100)}}},
		{Key: "path", Value: "/x/generic_key", RateLimit: rate("minute", 2)},
		{Key: "query:a", Value: "b", RateLimit: rate("minute", 3)},
		{Key: "query", Value: "a:b", RateLimit: rate("minute", 4)},
	}})
	n1 := onlyName(t, f, "GET /x")
	n2 := onlyName(t, f, "GET /x/generic_key")
	assert.NotEqual(t, n1, n2)
	names, _, err := f.e.Matches(rules.HTTPRequest(req("GET /?a=b", "192.0.2.1", "X-Q: a:b")))
	require.NoError(t, err)
	require.Len(t, names, 2)
	assert.NotEqual(t, names[0], names[1])

	g := newFixture(t)
	g.load(rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"GET"}, Path: "/users/*/export"}, RateLimit: rate("minute", 2)},
	}})
	assert.Equal(t, 2, g.passes(3, "GET /users/1/export", "192.0.2.1"))
	assert.Equal(t, 0, g.passes(1, "HEAD /users/1/export", "192.0.2.1"), "HEAD is served by the GET route")
	assert.Equal(t, 0, g.passes(1, "GET /users/1%2Fx/export", "192.0.2.1"), "ServeMux routes it to /users/{id}/export")
	assert.Equal(t, 0, g.passes(1, "GET /users/%31/expor%74", "192.0.2.1"))
	assert.Equal(t, 3, g.passes(3, "POST /users/1/export", "192.0.2.1"))

	descs := []rules.Descriptor{{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 2, Name: "per-ip"}}}
	for i := range 20 {
		descs = append(descs, rules.Descriptor{Key: "generic_key", Value: "g" + itoa(i), RateLimit: rate("minute", 1000)})
	}
	descs = append(descs, rules.Descriptor{Key: "header:X-Partner", RateLimit: &rules.RateLimit{Unlimited: true, Replaces: []string{"per-ip"}}})
	h := newFixture(t)
	h.load(rules.Config{Domain: "d", Descriptors: descs})
	assert.Equal(t, 2, h.passes(5, "GET /", "192.0.2.1"))
	assert.Equal(t, 5, h.passes(5, "GET /", "192.0.2.1", "X-Partner: acme"), "an unlimited rule replaces, past 20 other rules")
}

// Limits lists the limits of the rules in force, and TrackedKeys counts
// each one's keys in a memory store; a reload replaces the list.
func TestLimitsAndTrackedKeys(t *testing.T) {
	f := newFixture(t)
	f.load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "remote_address", RateLimit: rate("minute", 5)},
		{Key: "generic_key", Value: "free", RateLimit: &rules.RateLimit{Unlimited: true}},
		{Key: "header:X-Plan", Value: "gold", RateLimit: rate("hour", 100)},
	}})
	names := func() (out []string) {
		for _, l := range f.e.Limits() {
			out = append(out, l.Name)
		}
		return out
	}
	assert.Equal(t, []string{"api/remote_address", "api/header:X-Plan:gold"}, names())
	assert.Equal(t, 3, f.passes(3, "GET /", "192.0.2.1"))
	assert.Equal(t, 1, f.passes(1, "GET /", "192.0.2.2", "X-Plan: gold"))
	tracked := map[string]int{}
	for _, l := range f.e.Limits() {
		n, ok := f.e.TrackedKeys(l)
		require.True(t, ok)
		tracked[l.Name] = n
	}
	assert.Equal(t, map[string]int{"api/remote_address": 2, "api/header:X-Plan:gold": 1}, tracked)

	f.load(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "remote_address", RateLimit: rate("minute", 6)}}})
	assert.Equal(t, []string{"api/remote_address"}, names())

	other, err := rules.NewEngine(rules.WithStore(storetest.Slow(&core.MemoryStore{}, 0)))
	require.NoError(t, err)
	_, ok := other.TrackedKeys(core.Limit{Name: "x", Rate: core.PerMinute(1)})
	assert.False(t, ok, "a store that is not a memory store (here one wrapped) does not count keys")
}

// TestAnyKey: under WithAnyKey a config may name any key, as the Envoy
// service's may; Lookup decides by the proxy's values, and Checks, with
// no value for such a key from a request, matches none of its rules.
func TestAnyKey(t *testing.T) {
	cfg := rules.Config{Domain: "d", Descriptors: []rules.Descriptor{
		{Key: "tenant", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5}},
		{Key: "header:bad name", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5}},
	}}
	strict, err := rules.NewEngine()
	require.NoError(t, err)
	require.Error(t, strict.Load(cfg), "unknown key without WithAnyKey")

	e, err := rules.NewEngine(rules.WithAnyKey())
	require.NoError(t, err)
	require.NoError(t, e.Load(cfg))
	a, ok := e.Lookup("d", rules.Entry{Key: "tenant", Value: "acme"})
	require.True(t, ok)
	assert.Equal(t, "acme", a.Check.Key)
	require.NotNil(t, a.Check.Limiter)
	d, err := a.Check.Limiter.Take(context.Background(), a.Check.Key, 1)
	require.NoError(t, err)
	assert.Equal(t, 4, d.Remaining)
	checks, err := e.Checks(rules.HTTPRequest(httptest.NewRequest("GET", "/", nil)), nil)
	require.NoError(t, err)
	assert.Empty(t, checks)
}
