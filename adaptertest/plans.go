package adaptertest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// The plans of the plan cases: one limit name, so that a client keeps its
// counts when its plan changes.
var (
	freePlan = core.Limit{Name: "api", Rate: core.PerMinute(2)}
	paidPlan = core.Limit{Name: "api", Rate: core.PerMinute(5)}
)

// errPlanLookup is the error of the plan function for a "broken" client;
// it holds the secret, which must reach the log and never a response.
var errPlanLookup = errors.New("adaptertest: plan lookup in " + secret + ": connection refused")

// A book is the plan function of the plan cases (core.NewPlanLimiter):
// the plan of a client is the one the book sets for it, or else the one
// its key begins with: "free-", "paid-", "broken-" (the plan function
// fails) or "invalid-" (a limit of -1 requests per minute). A case
// changes the book between requests; the adapter's limiter and stdhttp's
// share it.
type book struct {
	algorithm core.Algorithm // of both plans; zero: the default

	mu sync.Mutex
	of map[string]string // client key → "free", "paid", "broken" or "invalid"
}

func newBook(algorithm core.Algorithm, of map[string]string) *book {
	if of == nil {
		of = map[string]string{}
	}
	return &book{algorithm: algorithm, of: of}
}

// set puts client on plan.
func (b *book) set(client, plan string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.of[client] = plan
}

func (b *book) plan(_ context.Context, client string) (core.Limit, error) {
	b.mu.Lock()
	plan, ok := b.of[client]
	b.mu.Unlock()
	if !ok {
		plan, _, _ = strings.Cut(client, "-")
	}
	var l core.Limit
	switch plan {
	case "free":
		l = freePlan
	case "paid":
		l = paidPlan
	case "invalid":
		l = core.Limit{Name: "api", Rate: core.Rate{Count: -1, Period: time.Minute}}
	default:
		return core.Limit{}, errPlanLookup
	}
	l.Algorithm = b.algorithm
	return l, nil
}

// want is what a plan case expects of one response: its status, and the
// X-Ratelimit-Limit and X-Ratelimit-Remaining fields ("" absent).
type want struct {
	status           int
	limit, remaining string
}

func passed(limit, remaining int) want {
	return want{http.StatusOK, strconv.Itoa(limit), strconv.Itoa(remaining)}
}

func rejected(limit int) want {
	return want{http.StatusTooManyRequests, strconv.Itoa(limit), "0"}
}

var failedPlan = want{status: http.StatusInternalServerError}

// expectEach returns a check that the ith response is as ws[i] says, with
// the problem-details body of a response that does not pass.
func expectEach(ws ...want) func(t *testing.T, i int, r response, log string) {
	return func(t *testing.T, i int, r response, _ string) {
		t.Helper()
		w := ws[i]
		if r.status != w.status {
			t.Fatalf("request %d: status %d, want %d", i, r.status, w.status)
		}
		if l, rem := r.header.Get(answer.HeaderLimit), r.header.Get(answer.HeaderRemaining); l != w.limit || rem != w.remaining {
			t.Errorf("request %d: %s %q, %s %q; want %q, %q", i, answer.HeaderLimit, l, answer.HeaderRemaining, rem, w.limit, w.remaining)
		}
		if r.status == http.StatusOK {
			return
		}
		if ct := r.header.Get("Content-Type"); ct != answer.ProblemContentType {
			t.Errorf("request %d: Content-Type %q, want %q", i, ct, answer.ProblemContentType)
		}
		if s := `"status":` + strconv.Itoa(r.status); !strings.Contains(r.body, s) {
			t.Errorf("request %d: body %q lacks %s", i, r.body, s)
		}
	}
}

// both returns a check that runs every one of checks.
func both(checks ...func(t *testing.T, i int, r response, log string)) func(t *testing.T, i int, r response, log string) {
	return func(t *testing.T, i int, r response, log string) {
		t.Helper()
		for _, c := range checks {
			c(t, i, r, log)
		}
	}
}

// planLog returns a check that the log, after each request, has
// lines[i] lines, of which the first is the plan function's failure.
func planLog(lines ...int) func(t *testing.T, i int, r response, log string) {
	return func(t *testing.T, i int, _ response, log string) {
		t.Helper()
		if n := strings.Count(log, "\n"); n != lines[i] {
			t.Fatalf("request %d: %d log lines, want %d:\n%s", i, n, lines[i], log)
		}
		if lines[i] > 0 && !strings.HasPrefix(log, `level=WARN msg="ratekit: plan function failing (answered 500)"`) {
			t.Errorf("request %d: the log does not begin with the plan function's failure:\n%s", i, log)
		}
	}
}

// planCases are the cases of a plan limiter (core.NewPlanLimiter), whose
// limit is the plan of the request's key: free, 2 requests per minute, or
// paid, 5 per minute, both named "api".
func planCases() []testCase {
	quiet := core.WithLogger(slog.New(slog.DiscardHandler)) // the limiter's log of grants and resets
	var cs []testCase

	// The rate-limit fields, and the decision the handler reads, are
	// those of the client's plan: the free client is rejected on its
	// third request, the paid one on its sixth.
	free, paid := repeat("free-alice", 3), repeat("paid-bob", 6)
	cs = append(cs, testCase{name: "plans/free-vs-paid", plan: newBook(0, nil), headers: answer.Both, decision: true,
		requests: seqOf(free, paid),
		check: both(
			expectEach(passed(2, 1), passed(2, 0), rejected(2),
				passed(5, 4), passed(5, 3), passed(5, 2), passed(5, 1), passed(5, 0), rejected(5)),
			func(t *testing.T, i int, r response, _ string) {
				quota := map[bool]string{true: "2", false: "5"}[i < len(free)]
				if p, want := r.header.Get(answer.HeaderRateLimitPolicy), `"api";q=`+quota+`;w=60`; p != want {
					t.Errorf("request %d: %s %q, want %q", i, answer.HeaderRateLimitPolicy, p, want)
				}
				if r.status == http.StatusOK && !strings.HasPrefix(r.body, "allowed=true name=api quota="+quota+" ") {
					t.Errorf("request %d: the handler read %q, want the decision of quota %s", i, r.body, quota)
				}
			})})

	// A client upgraded from free to paid keeps its count: 2 used of 2,
	// then 3 left of 5. The rejected request is not counted.
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		b := newBook(alg, map[string]string{"carol": "free"})
		cs = append(cs, testCase{name: "plans/upgrade-keeps-count/" + alg.String(), plan: b,
			requests: repeat("carol", 7),
			before:   map[int]func(*testing.T, []*core.Limiter){3: func(*testing.T, []*core.Limiter) { b.set("carol", "paid") }},
			check:    expectEach(passed(2, 1), passed(2, 0), rejected(2), passed(5, 2), passed(5, 1), passed(5, 0), rejected(5))})
	}

	// A failing plan function is answered 500 with a problem body that
	// does not show its error, which is logged once per episode; the
	// failed requests are not counted.
	b := newBook(0, map[string]string{"carol": "broken"})
	cs = append(cs, testCase{name: "plans/plan-error", plan: b,
		requests: repeat("carol", 4),
		before:   map[int]func(*testing.T, []*core.Limiter){3: func(*testing.T, []*core.Limiter) { b.set("carol", "free") }},
		check: both(expectEach(failedPlan, failedPlan, failedPlan, passed(2, 1)), planLog(1, 1, 1, 2),
			func(t *testing.T, i int, r response, log string) {
				if strings.Contains(r.body, "hunter2") || strings.Contains(r.body, "connection refused") {
					t.Fatalf("request %d: body %q shows the plan error", i, r.body)
				}
				if !strings.Contains(log, secret) {
					t.Errorf("request %d: the log lacks the plan error:\n%s", i, log)
				}
				if i == 3 && !strings.Contains(log, "failed_requests=3") {
					t.Errorf("request %d: the log lacks the recovery with 3 failed requests:\n%s", i, log)
				}
			})})

	// A plan that is not a valid limit is a failing plan function too.
	cs = append(cs, testCase{name: "plans/invalid-limit", plan: newBook(0, nil),
		requests: seqOf(repeat("invalid-dave", 2), repeat("free-erin", 1)),
		check: both(expectEach(failedPlan, failedPlan, passed(2, 1)), planLog(1, 1, 2),
			func(t *testing.T, i int, _ response, log string) {
				if !strings.Contains(log, core.ErrInvalidLimit.Error()) {
					t.Errorf("request %d: the log lacks the invalid limit:\n%s", i, log)
				}
			})})

	// A key over its plan's limit and granted 2 requests passes exactly 2
	// more, paid from the grant.
	cs = append(cs, testCase{name: "plans/grant", plan: newBook(0, nil), opts: []core.Option{quiet}, decision: true,
		requests: repeat("free-alice", 6),
		before: map[int]func(*testing.T, []*core.Limiter){3: func(t *testing.T, lims []*core.Limiter) {
			for _, lim := range lims {
				if err := lim.Grant(context.Background(), "free-alice", 2, "support ticket"); err != nil {
					t.Fatalf("grant: %v", err)
				}
			}
		}},
		check: func(t *testing.T, i int, r response, _ string) {
			if want := []int{200, 200, 429, 200, 200, 429}[i]; r.status != want {
				t.Fatalf("request %d: status %d, want %d", i, r.status, want)
			}
			if l := r.header.Get(answer.HeaderLimit); l != "2" {
				t.Errorf("request %d: %s %q, want the free plan's 2", i, answer.HeaderLimit, l)
			}
			if granted := strings.Contains(r.body, " granted=true"); granted != (i == 3 || i == 4) {
				t.Errorf("request %d: the handler read %q: granted %t, want %t", i, r.body, granted, !granted)
			}
		}})

	// A key reset while over its plan's limit starts afresh.
	cs = append(cs, testCase{name: "plans/reset", plan: newBook(0, nil), opts: []core.Option{quiet},
		requests: repeat("free-alice", 6),
		before: map[int]func(*testing.T, []*core.Limiter){3: func(t *testing.T, lims []*core.Limiter) {
			for _, lim := range lims {
				if found, err := lim.Reset(context.Background(), "free-alice", "support ticket"); err != nil || !found {
					t.Fatalf("reset: %t, %v; want found", found, err)
				}
			}
		}},
		check: expectEach(passed(2, 1), passed(2, 0), rejected(2), passed(2, 1), passed(2, 0), rejected(2))})
	return cs
}
