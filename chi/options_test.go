package ratekitchi_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/answer"
	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
)

// decision answers with the decision that DecisionFrom finds, "none" when
// it finds none.
func decision(w http.ResponseWriter, r *http.Request) {
	d, ok := ratekitchi.DecisionFrom(r.Context())
	if !ok {
		fmt.Fprint(w, "none")
		return
	}
	fmt.Fprintf(w, "%s %d/%d", d.Name, d.Remaining, d.Quota)
}

// TestDecisionInContext: the handler reads the decision; with a global
// limiter and a group's, it reads the group's, the one taken last, whose
// header fields the response carries too.
func TestDecisionInContext(t *testing.T) {
	clock := storetest.NewClock(epoch)
	global := newLimiter(t, clock, core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)})
	login := newLimiter(t, clock, core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)})
	key := ratekitchi.Header("X-Client")

	r := chi.NewRouter()
	r.Use(ratekitchi.New(global, key, ratekitchi.WithDecisionInContext()))
	r.Get("/items", decision)
	r.With(ratekitchi.New(login, key, ratekitchi.WithDecisionInContext())).Post("/login", decision)
	r.With(ratekitchi.New(login, key)).Post("/login-quiet", decision)

	assert.Equal(t, "global 99/100", do(t, r, http.MethodGet, "/items", "alice").body)
	res := do(t, r, http.MethodPost, "/login", "alice")
	assert.Equal(t, "login 4/5", res.body)
	assert.Equal(t, "5", res.limit)
	assert.Equal(t, "global 97/100", do(t, r, http.MethodPost, "/login-quiet", "alice").body,
		"without the option, the group's middleware leaves the global decision in place")

	// Without the option anywhere, nothing.
	r = chi.NewRouter()
	r.Use(ratekitchi.New(global, key))
	r.Get("/items", decision)
	assert.Equal(t, "none", do(t, r, http.MethodGet, "/items", "alice").body)
}

func TestRulesDecisionInContext(t *testing.T) {
	e, _ := adaptertest.Engine(t, rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "route", Match: &rules.Match{Path: "/items/*"}, RateLimit: rate("minute", 3)},
	}})
	r := chi.NewRouter()
	r.With(ratekitchi.Rules(e, ratekitchi.WithDecisionInContext())).Get("/items/{id}", decision)
	r.With(ratekitchi.Rules(e, ratekitchi.WithDecisionInContext())).Get("/", decision)
	body := do(t, r, http.MethodGet, "/items/7", "").body
	assert.Equal(t, "api/route@/items/* 2/3", body)
	assert.Equal(t, "none", do(t, r, http.MethodGet, "/", "").body, "no rule, no decision")
}

func TestWithHeaders(t *testing.T) {
	for _, tt := range []struct {
		name          string
		style         answer.Style
		x, ietf       bool
		retry, xretry string
	}{
		{"x-ratelimit", answer.XRateLimit, true, false, "6", "6"},
		{"ietf", answer.IETF, false, true, "6", ""},
		{"both", answer.Both, true, true, "6", "6"},
		{"none", answer.NoHeaders, false, false, "6", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock(epoch)
			// A token every 10 s, a bucket of 2: full 20 s after it empties.
			lim := newLimiter(t, clock, core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2})
			r := chi.NewRouter()
			r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client"), ratekitchi.WithHeaders(tt.style)))
			r.Get("/", text("ok"))
			do(t, r, http.MethodGet, "/", "alice")
			do(t, r, http.MethodGet, "/", "alice")
			clock.Advance(4 * time.Second)
			res := do(t, r, http.MethodGet, "/", "alice")
			require.Equal(t, http.StatusTooManyRequests, res.status)
			assert.Equal(t, tt.retry, res.header.Get(answer.HeaderRetryAfter))
			assert.Equal(t, tt.xretry, res.header.Get(answer.HeaderXRetryAfter))
			assert.Equal(t, tt.x, res.limit == "2", "X-Ratelimit-Limit %q", res.limit)
			if tt.ietf {
				assert.Equal(t, `"api";q=2;w=20`, res.header.Get(answer.HeaderRateLimitPolicy))
				assert.Equal(t, `"api";r=0;t=6`, res.header.Get(answer.HeaderRateLimit), "t is Retry-After on a 429")
			} else {
				assert.Empty(t, res.header.Values(answer.HeaderRateLimit))
			}
		})
	}
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
	if b.buf.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n")
}

// TestWithLogger: a key function failing a hundred times is one log line,
// and the next request decided another, with the count.
func TestWithLogger(t *testing.T) {
	var buf syncBuffer
	lim := newLimiter(t, storetest.NewClock(epoch), core.Limit{Rate: core.PerHour(1000)})
	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.Header("X-Client"), ratekitchi.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))))
	r.Get("/", text("ok"))
	for range 100 {
		require.Equal(t, http.StatusBadRequest, do(t, r, http.MethodGet, "/", "").status)
	}
	require.Len(t, buf.lines(), 1, "%q", buf.lines())
	assert.Contains(t, buf.lines()[0], "X-Client")
	require.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	require.Equal(t, http.StatusOK, do(t, r, http.MethodGet, "/", "alice").status)
	require.Len(t, buf.lines(), 2, "%q", buf.lines())
	assert.Contains(t, buf.lines()[1], "failed_requests=100")
}
