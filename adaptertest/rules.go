package adaptertest

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/stdhttp"
)

// RulesMount builds the adapter under test for a rules engine: a router
// of the framework with three routes, GET /, POST /login and GET
// /api/items, whose handlers answer 200 with the body "ok", and the
// adapter's Rules middleware for e, with no options, in front of each
// (on the router, as the framework's Use mounts it, or on every route).
type RulesMount func(t *testing.T, e *rules.Engine) Serve

// Engine returns an engine, with opts, whose counters are in a memory
// store on a clock stopped at storetest.Epoch (the start of a minute),
// and which has cfg loaded: the engine of an adapter's own rules tests.
// The clock moves only when told to.
func Engine(t testing.TB, cfg rules.Config, opts ...rules.Option) (*rules.Engine, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	store := &core.MemoryStore{Clock: clock.Now}
	e, err := rules.NewEngine(append([]rules.Option{rules.WithStore(store)}, opts...)...)
	if err != nil {
		t.Fatalf("adaptertest: engine: %v", err)
	}
	if err := e.Load(cfg); err != nil {
		t.Fatalf("adaptertest: load: %v", err)
	}
	return e, clock
}

// rulesFields are the header fields compared on every response of
// RunRules.
var rulesFields = Fields

// A step of a rules scenario: a request, or a Load into both engines.
type step struct {
	method, target string
	client         string              // the value of KeyHeader; "" sends none
	status         int                 // the status the request must get
	header         map[string]string   // fields it must have ("" absent)
	load           func() rules.Config // instead of a request: load this
	loadFails      bool                // the load must fail, both engines keep their rules
}

type rulesCase struct {
	name  string
	cfg   rules.Config
	opts  []rules.Option
	steps []step
}

// req is a request step; header lists field names and the values they
// must have, in pairs.
func req(method, target string, status int, header ...string) step {
	s := step{method: method, target: target, status: status, header: map[string]string{}}
	for i := 0; i+1 < len(header); i += 2 {
		s.header[header[i]] = header[i+1]
	}
	return s
}

// as sets the client of a request step.
func (s step) as(client string) step { s.client = client; return s }

// steps is n steps, the ith of f(i).
func steps(n int, f func(i int) step) []step {
	s := make([]step, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

func seq(parts ...[]step) []step {
	var all []step
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func limit(unit string, n int) *rules.RateLimit {
	return &rules.RateLimit{Unit: unit, RequestsPerUnit: n}
}

// login is the login example: limit login attempts per minute per client
// address, on POST /login only.
func login(limit int) func() rules.Config {
	return loginUnit("minute", limit)
}

func loginUnit(unit string, n int) func() rules.Config {
	return func() rules.Config {
		return rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{{
			Key:       "remote_address",
			Match:     &rules.Match{Methods: []string{http.MethodPost}, Path: "/login"},
			RateLimit: limit(unit, n),
		}}}
	}
}

var errPlan = errors.New("adaptertest: plan service down")

func rulesCases() []rulesCase {
	const (
		get, post = http.MethodGet, http.MethodPost
		lim, rem  = answer.HeaderLimit, answer.HeaderRemaining
		retry     = answer.HeaderRetryAfter
		soft      = answer.HeaderSoft
	)
	itoa := strconv.Itoa
	loginOK := func(remaining int) step { return req(post, "/login", 200, lim, "5", rem, itoa(remaining), retry, "") }
	shadow := login(5)()
	shadow.Descriptors[0].ShadowMode = true
	return []rulesCase{
		{name: "login", cfg: login(5)(), steps: seq(
			steps(5, func(i int) step { return loginOK(4 - i) }),
			[]step{
				req(post, "/login", 429, lim, "5", rem, "0", retry, "60"),
				req(get, "/", 200, lim, "", rem, "", retry, ""),
				req(post, "/login", 429, lim, "5", rem, "0", retry, "60"),
			})},
		{name: "reload-keeps-counts", cfg: login(5)(), steps: seq(
			steps(3, func(i int) step { return loginOK(4 - i) }),
			[]step{
				{load: login(6)},
				req(post, "/login", 200, lim, "6", rem, "2"), // 3 of 5 used, then 6: this is the 4th
				req(post, "/login", 200, lim, "6", rem, "1"),
				req(post, "/login", 200, lim, "6", rem, "0"),
				req(post, "/login", 429, lim, "6", rem, "0", retry, "60"),
			})},
		{name: "invalid-load-keeps-rules", cfg: login(5)(), steps: seq(
			steps(2, func(i int) step { return loginOK(4 - i) }),
			[]step{
				{load: loginUnit("fortnight", 6), loadFails: true},
				loginOK(2), loginOK(1), loginOK(0),
				req(post, "/login", 429, lim, "5", rem, "0", retry, "60"),
			})},
		{name: "shadow-mode", cfg: shadow, steps: seq(
			steps(8, func(i int) step { return req(post, "/login", 200, lim, "5", rem, itoa(max(4-i, 0)), retry, "") }),
			[]step{req(get, "/", 200, lim, "")})},
		{name: "soft-throttling", cfg: rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
			{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 10, SoftPercent: 20}},
		}}, steps: steps(13, func(i int) step {
			switch {
			case i < 10:
				return req(get, "/", 200, lim, "10", soft, "")
			case i < 12:
				return req(get, "/", 200, lim, "10", soft, "true")
			default:
				return req(get, "/", 429, lim, "10", soft, "")
			}
		})},
		{name: "several-rules", cfg: rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Value: "global", RateLimit: limit("minute", 100)},
			{Key: "remote_address", Match: &rules.Match{Path: "/api/*"}, RateLimit: limit("minute", 4)},
		}}, steps: seq(
			steps(4, func(i int) step { return req(get, "/api/items", 200, lim, "4", rem, itoa(3-i)) }),
			[]step{
				req(get, "/api/items", 429, lim, "4", rem, "0", retry, "60"),
				// 4 admitted API requests and this one; the rejected one
				// is not counted.
				req(get, "/", 200, lim, "100", rem, "95", retry, ""),
			})},
		{name: "block", cfg: rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
			{Key: "generic_key", Value: "blocked", Match: &rules.Match{Path: "/api/*"}, RateLimit: limit("minute", 0)},
		}}, steps: []step{
			req(get, "/api/items", 429, lim, "", rem, "", retry, "60"),
			req(get, "/api/items", 429, lim, "", rem, "", retry, "60"),
			req(get, "/", 200, lim, "", retry, ""),
		}},
		{name: "header-key", cfg: rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
			{Key: "header:" + KeyHeader, RateLimit: limit("minute", 1)},
		}}, steps: []step{
			req(get, "/", 200, lim, "1", rem, "0").as("alice"),
			req(get, "/", 429, lim, "1", rem, "0").as("alice"),
			req(get, "/", 200, lim, "1", rem, "0").as("bob"),
			req(get, "/", 200, lim, "", rem, ""), // no header, no rule
		}},
		{name: "key-error", cfg: rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
			{Key: "plan", RateLimit: limit("minute", 100)},
		}}, opts: []rules.Option{rules.WithKey("plan", func(r rules.Request) (string, error) {
			if p := r.Query("plan"); p != "broken" {
				return p, nil
			}
			return "", errPlan
		})}, steps: []step{
			req(get, "/?plan=free", 200, lim, "100", rem, "99"),
			req(get, "/?plan=broken", 500, lim, "", rem, ""),
			req(get, "/?plan=free", 200, lim, "100", rem, "98"),
			req(get, "/", 200, lim, ""), // no plan, no rule
		}},
	}
}

// RunRules runs every scenario through the adapter that mount builds and
// through stdhttp.Rules, each on an engine of its own with the same rules,
// and fails the test where any response differs in status, body, or the
// header fields of Fields and X-Ratelimit-Soft (and Content-Type on
// responses that do not pass), or has not the status and fields the
// scenario expects. The scenarios: the login example (5 POST /login per
// minute per client address), a reload that keeps the counts, a failed
// Load that keeps the rules in force, shadow mode, soft throttling,
// several rules at once, a block entry (requests_per_unit 0), a header
// key, and a failing descriptor key.
func RunRules(t *testing.T, mount RulesMount) {
	for _, tc := range rulesCases() {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := Engine(t, tc.cfg, tc.opts...)
			ref, _ := Engine(t, tc.cfg, tc.opts...)
			adapter := mount(t, e)
			reference := Handler(stdhttp.Rules(ref, stdhttp.WithLogger(slog.New(slog.DiscardHandler)))(ok))
			for i, st := range tc.steps {
				if st.load != nil {
					load(t, i, e, ref, st)
					continue
				}
				what := fmt.Sprintf("step %d: %s %s", i, st.method, st.target)
				if st.client != "" {
					what += fmt.Sprintf(" (client %q)", st.client)
				}
				want := read(t, reference(st.request()))
				got := read(t, adapter(st.request()))
				same(t, what, want, got, rulesFields)
				expect(t, what, st, got)
			}
		})
	}
}

// load loads the config of st into both engines.
func load(t *testing.T, i int, e, ref *rules.Engine, st step) {
	t.Helper()
	for _, eng := range []*rules.Engine{e, ref} {
		before := eng.Config()
		err := eng.Load(st.load())
		var re *rules.Error
		switch {
		case !st.loadFails && err != nil:
			t.Fatalf("step %d: load: %v", i, err)
		case st.loadFails && !errors.As(err, &re):
			t.Fatalf("step %d: load of an invalid config: got %v, want a *rules.Error", i, err)
		case st.loadFails && !reflect.DeepEqual(eng.Config(), before):
			t.Fatalf("step %d: a failed load changed the config in force", i)
		}
	}
}

func (st step) request() *http.Request {
	r := httptest.NewRequest(st.method, st.target, nil)
	r.RemoteAddr = "192.0.2.10:4711"
	if st.client != "" {
		r.Header.Set(KeyHeader, st.client)
	}
	return r
}

// expect checks what the scenario says of a response, beyond agreeing
// with stdhttp: its status and fields; the body "ok" of a response that
// passes, and the problem-details body of one that does not.
func expect(t *testing.T, what string, st step, got response) {
	t.Helper()
	if got.status != st.status {
		t.Fatalf("%s: status %d, want %d", what, got.status, st.status)
	}
	for f, v := range st.header {
		if g := got.header.Get(f); g != v {
			t.Errorf("%s: header %s = %q, want %q", what, f, g, v)
		}
	}
	if got.status == http.StatusOK {
		if got.body != "ok" {
			t.Errorf("%s: body %q, want \"ok\"", what, got.body)
		}
		return
	}
	if ct := got.header.Get("Content-Type"); ct != answer.ProblemContentType {
		t.Errorf("%s: Content-Type %q, want %q", what, ct, answer.ProblemContentType)
	}
	if s := `"status":` + strconv.Itoa(got.status); !strings.Contains(got.body, s) {
		t.Errorf("%s: body %q lacks %s", what, got.body, s)
	}
}
