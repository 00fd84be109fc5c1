package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// quiet is a logger that discards everything.
var quiet = slog.New(slog.DiscardHandler)

// secret starts every key, reason and unknown name the tests send: no
// response body may hold it.
const secret = "key-text-"

const base = "/admin/ratekit/"

// fixture is a handler over real limiters on a memory store whose clock
// stands still, and over limiters that fail.
type fixture struct {
	h     *admin.Handler
	clock *storetest.Clock
	api   *core.Limiter // 5 per minute (fixed window) and 10 per second (token bucket)
	logs  *bytes.Buffer // the handler's log
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	store := &core.MemoryStore{Clock: clock.Now}
	api, err := core.NewLimiter(
		core.Limit{Name: "per-minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		core.WithLimit(core.Limit{Name: "per-second", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)}),
		core.WithStore(store), core.WithLogger(quiet))
	require.NoError(t, err)
	down, err := core.NewLimiter(core.Limit{Name: "down", Rate: core.PerMinute(5)},
		core.WithStore(failingStore{}), core.WithLogger(quiet))
	require.NoError(t, err)
	plan, err := core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) {
		return core.Limit{}, errors.New("accounts database unreachable")
	}, core.WithStore(store), core.WithLogger(quiet))
	require.NoError(t, err)
	keyless, err := core.NewPlanLimiter(func(context.Context, string) (core.Limit, error) {
		return core.Limit{}, fmt.Errorf("%w: no account", core.ErrMissingKey)
	}, core.WithStore(store), core.WithLogger(quiet))
	require.NoError(t, err)

	logs := &bytes.Buffer{}
	h, err := admin.New(map[string]*core.Limiter{"api": api, "down": down, "plan": plan, "keyless": keyless},
		admin.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	return &fixture{h: h, clock: clock, api: api, logs: logs}
}

// serve sends a request to h and checks what every response must have.
func serve(t *testing.T, h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
	assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	assert.NotContains(t, w.Body.String(), secret, "a response body holds client text")
	return w
}

func (f *fixture) get(t *testing.T, target string) *httptest.ResponseRecorder {
	t.Helper()
	return serve(t, f.h, httptest.NewRequest(http.MethodGet, base+target, nil))
}

func (f *fixture) post(t *testing.T, route, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, base+route, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return serve(t, f.h, r)
}

// take sends n requests of key to the api limiter and counts the admitted.
func (f *fixture) take(t *testing.T, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		d, err := f.api.Take(context.Background(), key, 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// The bodies, as the tests read them: decoding fails on any field the
// tests do not know.
type decisionBody struct {
	Name       string  `json:"name"`
	Allowed    bool    `json:"allowed"`
	Remaining  int     `json:"remaining"`
	Quota      int     `json:"quota"`
	Window     float64 `json:"window"`
	ResetAfter float64 `json:"reset_after"`
	RetryAfter float64 `json:"retry_after"`
}

type limitBody struct {
	decisionBody
	Granted bool `json:"granted"`
	Grant   struct {
		Amount    int     `json:"amount"`
		ExpiresIn float64 `json:"expires_in"`
	} `json:"grant"`
}

type stateBody struct {
	Limiter  string       `json:"limiter"`
	KeyHash  string       `json:"key_hash"`
	Tracked  bool         `json:"tracked"`
	Decision decisionBody `json:"decision"`
	Limits   []limitBody  `json:"limits"`
}

type resetBody struct {
	Limiter string `json:"limiter"`
	KeyHash string `json:"key_hash"`
	Found   bool   `json:"found"`
}

type grantBody struct {
	Limiter string     `json:"limiter"`
	KeyHash string     `json:"key_hash"`
	Amount  int        `json:"amount"`
	State   *stateBody `json:"state"`
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var v T
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v))
	return v
}

func (f *fixture) state(t *testing.T, key string) stateBody {
	t.Helper()
	return decode[stateBody](t, f.get(t, "state?limiter=api&key="+key))
}

func (f *fixture) reset(t *testing.T, key string) resetBody {
	t.Helper()
	return decode[resetBody](t, f.post(t, "reset", `{"limiter":"api","key":"`+key+`","reason":"`+secret+`ticket"}`))
}

func (f *fixture) grant(t *testing.T, key string, amount int) grantBody {
	t.Helper()
	return decode[grantBody](t, f.post(t, "grant", fmt.Sprintf(`{"limiter":"api","key":%q,"amount":%d}`, key, amount)))
}

func TestNew(t *testing.T) {
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}))
	for name, limiters := range map[string]map[string]*core.Limiter{
		"nil map":         nil,
		"empty map":       {},
		"nil limiter":     {"api": nil},
		"empty name":      {"": lim},
		"space":           {"a b": lim},
		"query character": {"a?b": lim},
		"not ASCII":       {"ä": lim},
		"65 bytes":        {strings.Repeat("a", 65): lim},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := admin.New(limiters)
			assert.Error(t, err)
			assert.Nil(t, h)
		})
	}
	t.Run("bad options", func(t *testing.T) {
		_, err := admin.New(map[string]*core.Limiter{"api": lim}, admin.WithLogger(nil))
		assert.Error(t, err)
		_, err = admin.New(map[string]*core.Limiter{"api": lim}, nil)
		assert.Error(t, err)
	})
	t.Run("valid names", func(t *testing.T) {
		h, err := admin.New(map[string]*core.Limiter{strings.Repeat("a", 64): lim, "Az09-_.:/": lim})
		assert.NoError(t, err)
		assert.NotNil(t, h)
	})
}

func TestLimiters(t *testing.T) {
	f := newFixture(t)
	w := f.get(t, "limiters")
	require.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"limiters":["api","down","keyless","plan"]}`, w.Body.String())

	w = serve(t, f.h, httptest.NewRequest(http.MethodHead, base+"limiters", nil))
	assert.Equal(t, http.StatusOK, w.Code)
}

// The route is the path's last element, wherever the handler is mounted.
func TestMounts(t *testing.T) {
	f := newFixture(t)
	stripped := http.NewServeMux()
	stripped.Handle(base, http.StripPrefix("/admin/ratekit", f.h))
	strippedSlash := http.NewServeMux()
	strippedSlash.Handle(base, http.StripPrefix(base, f.h))
	full := http.NewServeMux()
	full.Handle(base, f.h)
	for _, tc := range []struct {
		name, path string
		h          http.Handler
	}{
		{"bare", "/limiters", f.h},
		{"deep prefix", "/a/b/c/d/limiters", f.h},
		{"full path", base + "limiters", full},
		{"StripPrefix", base + "limiters", stripped},
		{"StripPrefix with slash", base + "limiters", strippedSlash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(t, tc.h, httptest.NewRequest(http.MethodGet, tc.path, nil))
			assert.Equal(t, http.StatusOK, w.Code)
			assert.JSONEq(t, `{"limiters":["api","down","keyless","plan"]}`, w.Body.String())
		})
	}
}

// A state is what the key's next request would get, as its rate-limit
// headers would say: remaining is what would be left after it. A key never
// seen is at full capacity.
func TestStateOfUnknownKey(t *testing.T) {
	f := newFixture(t)
	w := f.get(t, "state?limiter=api&key="+secret+"new")
	require.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{
		"limiter": "api",
		"key_hash": "`+core.KeyHash(secret+"new")+`",
		"tracked": false,
		"decision": {"name": "per-minute", "allowed": true, "remaining": 4, "quota": 5,
			"window": 60, "reset_after": 60, "retry_after": 0},
		"limits": [
			{"name": "per-minute", "allowed": true, "remaining": 4, "quota": 5,
				"window": 60, "reset_after": 60, "retry_after": 0,
				"granted": false, "grant": {"amount": 0, "expires_in": 0}},
			{"name": "per-second", "allowed": true, "remaining": 9, "quota": 10,
				"window": 1, "reset_after": 0.1, "retry_after": 0,
				"granted": false, "grant": {"amount": 0, "expires_in": 0}}
		]
	}`, w.Body.String())

	w = serve(t, f.h, httptest.NewRequest(http.MethodHead, base+"state?limiter=api&key="+secret+"new", nil))
	assert.Equal(t, http.StatusOK, w.Code)
}

func TestStateAfterRequests(t *testing.T) {
	f := newFixture(t)
	key := secret + "client"
	require.Equal(t, 2, f.take(t, key, 2))
	st := f.state(t, key)
	assert.True(t, st.Tracked)
	assert.Equal(t, core.KeyHash(key), st.KeyHash)
	assert.Equal(t, decisionBody{Name: "per-minute", Allowed: true, Remaining: 2, Quota: 5, Window: 60, ResetAfter: 60}, st.Decision)
	require.Len(t, st.Limits, 2)
	assert.Equal(t, 2, st.Limits[0].Remaining)
	assert.Equal(t, 7, st.Limits[1].Remaining)
	assert.InDelta(t, 0.3, st.Limits[1].ResetAfter, 1e-9, "three tokens of 0.1 s, the next request's included")

	f.clock.Advance(1500 * time.Millisecond)
	require.Equal(t, 3, f.take(t, key, 4))
	st = f.state(t, key)
	assert.Equal(t, decisionBody{Name: "per-minute", Allowed: false, Remaining: 0, Quota: 5, Window: 60, ResetAfter: 58.5, RetryAfter: 58.5}, st.Decision)
	assert.False(t, st.Limits[0].Allowed)
	assert.True(t, st.Limits[1].Allowed)
}

func TestReset(t *testing.T) {
	f := newFixture(t)
	key := secret + "client"
	require.Equal(t, 5, f.take(t, key, 6))
	require.False(t, f.state(t, key).Decision.Allowed)

	assert.Equal(t, resetBody{Limiter: "api", KeyHash: core.KeyHash(key), Found: true}, f.reset(t, key))
	st := f.state(t, key)
	assert.False(t, st.Tracked)
	assert.True(t, st.Decision.Allowed)
	assert.Equal(t, f.state(t, secret+"never-seen").Decision, st.Decision, "as a key never seen")
	assert.Equal(t, 5, f.take(t, key, 6), "a full budget again")

	other := secret + "never-seen"
	assert.Equal(t, resetBody{Limiter: "api", KeyHash: core.KeyHash(other), Found: false}, f.reset(t, other))
	assert.Empty(t, f.logs.String(), "the handler logs only failures")
}

func TestGrant(t *testing.T) {
	f := newFixture(t)
	key := secret + "client"
	require.Equal(t, 5, f.take(t, key, 6), "over its limit")

	g := f.grant(t, key, 3)
	assert.Equal(t, "api", g.Limiter)
	assert.Equal(t, core.KeyHash(key), g.KeyHash)
	assert.Equal(t, 3, g.Amount)
	require.NotNil(t, g.State)
	assert.Equal(t, f.state(t, key), *g.State, "the state, as GET state returns it")
	assert.True(t, g.State.Decision.Allowed)
	assert.Equal(t, 2, g.State.Decision.Remaining, "the grant, less the next request")
	for _, l := range g.State.Limits {
		assert.True(t, l.Granted, l.Name)
		assert.Equal(t, 3, l.Grant.Amount, l.Name)
		assert.Equal(t, 60.0, l.Grant.ExpiresIn, "%s: one window of the longest limit", l.Name)
	}
	assert.Equal(t, 3, f.take(t, key, 10), "exactly the amount granted")
	st := f.state(t, key)
	assert.False(t, st.Decision.Allowed)
	assert.Zero(t, st.Limits[0].Grant.Amount)
	assert.False(t, st.Limits[0].Granted)

	// A second grant adds to what is left and starts its time afresh.
	f.grant(t, key, 2)
	f.clock.Advance(10 * time.Second)
	g = f.grant(t, key, 2)
	require.NotNil(t, g.State)
	assert.Equal(t, 4, g.State.Limits[0].Grant.Amount)
	assert.Equal(t, 60.0, g.State.Limits[0].Grant.ExpiresIn)
	assert.Equal(t, 3, g.State.Decision.Remaining)

	// Beyond the capacity of 5: refused, nothing changes.
	w := f.post(t, "grant", `{"limiter":"api","key":"`+key+`","amount":2}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.JSONEq(t, `{"error":"amount must be at least 1 and within the limit's capacity"}`, w.Body.String())
	assert.Equal(t, *g.State, f.state(t, key))
	assert.Equal(t, 4, f.take(t, key, 10))

	// A fresh key cannot be granted more than the capacity either.
	w = f.post(t, "grant", `{"limiter":"api","key":"`+secret+`fresh","amount":6}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.False(t, f.state(t, secret+"fresh").Tracked)
	assert.Empty(t, f.logs.String(), "the handler logs only failures")
}

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	for route, methods := range map[string][]string{
		"limiters": {http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions},
		"state":    {http.MethodPost, http.MethodPatch},
		"reset":    {http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete},
		"grant":    {http.MethodGet, http.MethodHead, http.MethodPatch},
	} {
		allow := "POST"
		if route == "limiters" || route == "state" {
			allow = "GET, HEAD"
		}
		for _, m := range methods {
			t.Run(route+" "+m, func(t *testing.T) {
				r := httptest.NewRequest(m, base+route+"?limiter=api&key="+secret, strings.NewReader(`{}`))
				r.Header.Set("Content-Type", "application/json")
				w := serve(t, f.h, r)
				assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
				assert.Equal(t, allow, w.Header().Get("Allow"))
				assert.JSONEq(t, `{"error":"method not allowed"}`, w.Body.String())
			})
		}
	}
}

func TestRefusals(t *testing.T) {
	key := secret + "client"
	big := `{"limiter":"api","key":"` + key + `"}` + strings.Repeat(" ", 64<<10)
	for _, tc := range []struct {
		name, method, target, ctype, body string
		unknownLength                     bool // the body's length is not declared
		status                            int
		text                              string
	}{
		{name: "unknown route", method: "GET", target: "keys", status: 404, text: "no such route"},
		{name: "no route", method: "GET", target: "", status: 404, text: "no such route"},
		{name: "trailing slash", method: "GET", target: "limiters/", status: 404, text: "no such route"},
		{name: "unknown route POST", method: "POST", target: "forget", body: `{}`, status: 404, text: "no such route"},

		{name: "state: unknown limiter", method: "GET", target: "state?limiter=" + secret + "x&key=" + key, status: 404, text: "no such limiter"},
		{name: "state: no limiter", method: "GET", target: "state?key=" + key, status: 400, text: "limiter is required"},
		{name: "state: no key", method: "GET", target: "state?limiter=api", status: 400, text: "key is required"},
		{name: "state: empty key", method: "GET", target: "state?limiter=api&key=", status: 400, text: "key is required"},
		{name: "state: plan failed", method: "GET", target: "state?limiter=plan&key=" + key, status: 500, text: "the limiter's plan for the key could not be found"},
		{name: "state: plan has no key", method: "GET", target: "state?limiter=keyless&key=" + key, status: 400, text: "the key names no client the limiter can limit"},
		{name: "state: store failed", method: "GET", target: "state?limiter=down&key=" + key, status: 503, text: "the limiter's store failed; try again"},

		{name: "reset: no Content-Type", method: "POST", target: "reset", ctype: "-", body: `{"limiter":"api","key":"` + key + `"}`, status: 415, text: "Content-Type must be application/json"},
		{name: "reset: text/plain", method: "POST", target: "reset", ctype: "text/plain", body: `{"limiter":"api","key":"` + key + `"}`, status: 415, text: "Content-Type must be application/json"},
		{name: "reset: HTML form", method: "POST", target: "reset", ctype: "application/x-www-form-urlencoded", body: "limiter=api&key=" + key, status: 415, text: "Content-Type must be application/json"},
		{name: "grant: multipart form", method: "POST", target: "grant", ctype: "multipart/form-data; boundary=x", body: "--x--", status: 415, text: "Content-Type must be application/json"},
		{name: "reset: too large", method: "POST", target: "reset", body: big + " ", status: 413, text: "the body must be at most 64 KiB"},
		{name: "grant: too large, length not declared", method: "POST", target: "grant", body: big + " ", unknownLength: true, status: 413, text: "the body must be at most 64 KiB"},
		{name: "reset: malformed", method: "POST", target: "reset", body: `{"limiter":"api","key":`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: empty body", method: "POST", target: "reset", body: ``, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: array", method: "POST", target: "reset", body: `["api","` + key + `"]`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: two objects", method: "POST", target: "reset", body: `{"limiter":"api","key":"` + key + `"}{}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: unknown field", method: "POST", target: "reset", body: `{"limiter":"api","key":"` + key + `","` + secret + `":1}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: amount", method: "POST", target: "reset", body: `{"limiter":"api","key":"` + key + `","amount":1}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: null", method: "POST", target: "reset", body: `null`, status: 400, text: "limiter is required"},
		{name: "reset: no key", method: "POST", target: "reset", body: `{"limiter":"api"}`, status: 400, text: "key is required"},
		{name: "reset: empty key", method: "POST", target: "reset", body: `{"limiter":"api","key":""}`, status: 400, text: "key is required"},
		{name: "reset: key not a string", method: "POST", target: "reset", body: `{"limiter":"api","key":42}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "reset: long reason", method: "POST", target: "reset", body: `{"limiter":"api","key":"` + key + `","reason":"` + strings.Repeat("x", 501) + `"}`, status: 400, text: "reason must be at most 500 bytes"},
		{name: "reset: unknown limiter", method: "POST", target: "reset", body: `{"limiter":"` + secret + `","key":"` + key + `"}`, status: 404, text: "no such limiter"},
		{name: "reset: limiter in the query only", method: "POST", target: "reset?limiter=api&key=" + key, body: `{}`, status: 400, text: "limiter is required"},
		{name: "reset: plan failed", method: "POST", target: "reset", body: `{"limiter":"plan","key":"` + key + `"}`, status: 500, text: "the limiter's plan for the key could not be found"},
		{name: "reset: plan has no key", method: "POST", target: "reset", body: `{"limiter":"keyless","key":"` + key + `"}`, status: 400, text: "the key names no client the limiter can limit"},
		{name: "reset: store failed", method: "POST", target: "reset", body: `{"limiter":"down","key":"` + key + `"}`, status: 503, text: "the limiter's store failed; try again"},

		{name: "grant: no amount", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `"}`, status: 400, text: "amount must be at least 1 and within the limit's capacity"},
		{name: "grant: amount 0", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":0}`, status: 400, text: "amount must be at least 1 and within the limit's capacity"},
		{name: "grant: negative amount", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":-3}`, status: 400, text: "amount must be at least 1 and within the limit's capacity"},
		{name: "grant: over capacity", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":6}`, status: 400, text: "amount must be at least 1 and within the limit's capacity"},
		{name: "grant: fractional amount", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":1.5}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "grant: amount as text", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":"2"}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "grant: huge amount", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":1e30}`, status: 400, text: "the body must be one JSON object of the route's fields only"},
		{name: "grant: no key", method: "POST", target: "grant", body: `{"limiter":"api","amount":1}`, status: 400, text: "key is required"},
		{name: "grant: long reason", method: "POST", target: "grant", body: `{"limiter":"api","key":"` + key + `","amount":1,"reason":"` + strings.Repeat("x", 501) + `"}`, status: 400, text: "reason must be at most 500 bytes"},
		{name: "grant: unknown limiter", method: "POST", target: "grant", body: `{"limiter":"` + secret + `","key":"` + key + `","amount":1}`, status: 404, text: "no such limiter"},
		{name: "grant: plan failed", method: "POST", target: "grant", body: `{"limiter":"plan","key":"` + key + `","amount":1}`, status: 500, text: "the limiter's plan for the key could not be found"},
		{name: "grant: plan has no key", method: "POST", target: "grant", body: `{"limiter":"keyless","key":"` + key + `","amount":1}`, status: 400, text: "the key names no client the limiter can limit"},
		{name: "grant: store failed", method: "POST", target: "grant", body: `{"limiter":"down","key":"` + key + `","amount":1}`, status: 503, text: "the limiter's store failed; try again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			r := httptest.NewRequest(tc.method, base+tc.target, strings.NewReader(tc.body))
			switch tc.ctype {
			case "":
				r.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				r.Header.Set("Content-Type", tc.ctype)
			}
			if tc.unknownLength {
				r.ContentLength = -1
			}
			w := serve(t, f.h, r)
			assert.Equal(t, tc.status, w.Code)
			assert.JSONEq(t, `{"error":"`+tc.text+`"}`, w.Body.String())
			if tc.status == http.StatusServiceUnavailable {
				assert.Equal(t, "1", w.Header().Get("Retry-After"))
			} else {
				assert.Empty(t, w.Header().Get("Retry-After"))
			}
			assert.Empty(t, w.Header().Get("Allow"))

			logs := f.logs.String()
			if tc.status < 500 {
				assert.Empty(t, logs, "a client's error is not logged")
				return
			}
			assert.Equal(t, 1, strings.Count(logs, "\n"), "one line per failed request: %s", logs)
			assert.Contains(t, logs, "level=WARN")
			assert.Contains(t, logs, "key_hash="+core.KeyHash(key))
			assert.Contains(t, logs, "limiter=")
			assert.NotContains(t, logs, key, "the log names the key by its hash")
			if tc.status == http.StatusInternalServerError {
				assert.Contains(t, logs, "accounts database unreachable", "the cause is logged")
			} else {
				assert.Contains(t, logs, errDown.Error(), "the cause is logged")
			}
		})
	}
}

// Requests at the edge of what is allowed are served.
func TestLimitsOfRequests(t *testing.T) {
	f := newFixture(t)
	key := secret + "client"
	body := `{"limiter":"api","key":"` + key + `"}`
	full := body + strings.Repeat(" ", 64<<10-len(body))
	require.Len(t, full, 64<<10)
	decode[resetBody](t, f.post(t, "reset", full))

	r := httptest.NewRequest(http.MethodPost, base+"reset", strings.NewReader(full))
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = -1
	decode[resetBody](t, serve(t, f.h, r))

	reason := strings.Repeat("x", 500)
	decode[resetBody](t, f.post(t, "reset", `{"limiter":"api","key":"`+key+`","reason":"`+reason+`"}`))
	decode[grantBody](t, f.post(t, "grant", `{"limiter":"api","key":"`+key+`","amount":1,"reason":"`+reason+`"}`))

	r = httptest.NewRequest(http.MethodPost, base+"reset", strings.NewReader(body))
	r.Header.Set("Content-Type", "Application/JSON; charset=utf-8")
	decode[resetBody](t, serve(t, f.h, r))

	// The query of a POST is not read: the body names the limiter.
	f.take(t, key, 1)
	r = httptest.NewRequest(http.MethodPost, base+"reset?limiter=down&key=other", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	assert.Equal(t, resetBody{Limiter: "api", KeyHash: core.KeyHash(key), Found: true}, decode[resetBody](t, serve(t, f.h, r)))
}

// Many clients take on one key while operators grant, reset and look:
// nothing races, and the counts add up exactly.
func TestConcurrentOperations(t *testing.T) {
	const (
		capacity = 20
		takers   = 8
		takes    = 100 // per taker: far more than capacity and grants together
		granters = 4
		grants   = 20 // per granter
	)
	clock := storetest.NewClock(storetest.Epoch) // stands still: no window passes
	lim := core.Must(core.NewLimiter(core.Limit{Name: "busy", Algorithm: core.FixedWindow, Rate: core.PerMinute(capacity)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(quiet)))
	h, err := admin.New(map[string]*core.Limiter{"busy": lim}, admin.WithLogger(quiet))
	require.NoError(t, err)
	key := secret + "busy"
	call := func(method, target, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, base+target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if strings.Contains(w.Body.String(), secret) {
			t.Errorf("%s %s: the body holds the key", method, target)
		}
		return w
	}
	drain := func() int {
		n := 0
		for range 10 * capacity * (grants*granters + 1) {
			d, err := lim.Take(context.Background(), key, 1)
			if err != nil || !d.Allowed {
				return n
			}
			n++
		}
		t.Fatal("the key never ran out")
		return n
	}

	run := func(resetters int) (admitted, granted, resets int64) {
		var a, g, rs atomic.Int64
		var wg sync.WaitGroup
		for range takers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range takes {
					d, err := lim.Take(context.Background(), key, 1)
					if err != nil {
						t.Error(err)
					}
					if d.Allowed {
						a.Add(1)
					}
				}
			}()
		}
		for range granters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range grants {
					switch w := call(http.MethodPost, "grant", `{"limiter":"busy","key":"`+key+`","amount":1}`); w.Code {
					case http.StatusOK:
						g.Add(1)
					case http.StatusBadRequest: // the grant outstanding is at capacity
					default:
						t.Errorf("grant: %d %s", w.Code, w.Body)
					}
					if w := call(http.MethodGet, "state?limiter=busy&key="+key, ""); w.Code != http.StatusOK {
						t.Errorf("state: %d %s", w.Code, w.Body)
					}
				}
			}()
		}
		for range resetters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					if w := call(http.MethodPost, "reset", `{"limiter":"busy","key":"`+key+`"}`); w.Code != http.StatusOK {
						t.Errorf("reset: %d %s", w.Code, w.Body)
					}
					rs.Add(1)
				}
			}()
		}
		wg.Wait()
		return a.Load(), g.Load(), rs.Load()
	}
	state := func() stateBody {
		return decode[stateBody](t, call(http.MethodGet, "state?limiter=busy&key="+key, ""))
	}

	// Grants only: every request admitted was counted by the window or
	// paid from a grant, so once the key is drained, the admitted are
	// exactly the capacity and the grants.
	admitted, granted, _ := run(0)
	admitted += int64(drain())
	assert.Equal(t, capacity+granted, admitted, "admitted with %d granted", granted)
	assert.Positive(t, granted)
	st := state()
	assert.False(t, st.Decision.Allowed)
	assert.Zero(t, st.Limits[0].Grant.Amount)

	// Resets too: each gives at most one budget back.
	assert.True(t, decode[resetBody](t, call(http.MethodPost, "reset", `{"limiter":"busy","key":"`+key+`"}`)).Found)
	admitted, granted, resets := run(2)
	assert.LessOrEqual(t, admitted, capacity*(1+resets)+granted)
	// Once the dust settles, the state tells exactly what is left.
	st = state()
	left := 0
	if st.Decision.Allowed {
		left = st.Decision.Remaining + 1 // the next request, and what is left after it
	}
	assert.Equal(t, left, drain(), "state %+v", st)
	assert.True(t, decode[resetBody](t, call(http.MethodPost, "reset", `{"limiter":"busy","key":"`+key+`"}`)).Found)
	st = state()
	assert.False(t, st.Tracked)
	assert.Equal(t, capacity-1, st.Decision.Remaining)
	assert.Equal(t, capacity, drain())
}

// A grant that was given answers 200 even when the state after it cannot
// be read: an operator told it failed would grant again, and grants add up.
func TestGrantGivenStateLost(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	store := blindStore{&core.MemoryStore{Clock: clock.Now}}
	lim := core.Must(core.NewLimiter(core.Limit{Name: "blind", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)},
		core.WithStore(store), core.WithLogger(quiet)))
	logs := &bytes.Buffer{}
	h, err := admin.New(map[string]*core.Limiter{"blind": lim}, admin.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	key := secret + "client"

	r := httptest.NewRequest(http.MethodPost, base+"grant", strings.NewReader(`{"limiter":"blind","key":"`+key+`","amount":2}`))
	r.Header.Set("Content-Type", "application/json")
	g := decode[grantBody](t, serve(t, h, r))
	assert.Equal(t, grantBody{Limiter: "blind", KeyHash: core.KeyHash(key), Amount: 2}, g)
	assert.Contains(t, logs.String(), "key_hash="+core.KeyHash(key))
	assert.Equal(t, 1, strings.Count(logs.String(), "\n"))

	admitted := 0
	for range 10 {
		if d, _ := lim.Take(context.Background(), key, 1); d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 5+2, admitted, "the grant was given")
}

// blindStore is a memory store whose counters cannot inspect.
type blindStore struct{ s *core.MemoryStore }

func (b blindStore) Bind(limits []core.Limit) (core.Counter, error) {
	c, err := b.s.Bind(limits)
	return blindCounter{c}, err
}

type blindCounter struct{ core.Counter }

func (blindCounter) Inspect(context.Context, string, []core.Decision, []core.Grant) (bool, error) {
	return false, errDown
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

func (failingCounter) Reset(context.Context, string) (bool, error) { return false, errDown }

func (failingCounter) Grant(context.Context, string, int, time.Duration) error { return errDown }
