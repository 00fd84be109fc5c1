package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

func scenarios() []scenario {
	return []scenario{
		{"skipper", skipper},
		{"cost", cost},
		{"denied-handler", deniedHandler},
		{"error-handler", errorHandler},
		{"nil-options", nilOptions},
		{"shaping/held", shapingHeld},
		{"shaping/context-ends", shapingContextEnds},
		{"route-groups", routeGroups},
		{"queue", queueOffer},
		{"keys/peer-ip", keysPeerIP},
		{"keys/ip", keysIP},
		{"keys/header", keysHeader},
		{"keys/user", keysUser},
		{"rules/options", rulesOptions},
		{"rules/decision-in-context", rulesDecision},
		{"rules/user", rulesUser},
		{"panics-on-nil", panicsOnNil},
	}
}

const (
	limitField     = answer.HeaderLimit
	remainingField = answer.HeaderRemaining
	retryField     = answer.HeaderRetryAfter
)

var itoa = strconv.Itoa

// present is the skipper of the scenarios: skip a request with the
// header.
func present(value string) bool { return value != "" }

// costOf is the cost function of the scenarios: the header's number, 1
// without one.
func costOf(value string) int {
	if value == "" {
		return 1
	}
	n, _ := strconv.Atoi(value)
	return n
}

// deniedBy returns a denied handler that answers 418 with the decision,
// and what it was given.
func deniedBy() (func(core.Decision) (int, string), *last[core.Decision]) {
	got := &last[core.Decision]{}
	return func(d core.Decision) (int, string) {
		got.set(d)
		return http.StatusTeapot, "denied: " + Body(d, true)
	}, got
}

func skipper(x *rig) {
	serve := x.serve(Scenario{Limiter: x.limiter(fixed("api", 1)), Key: defaultKey, Skip: present})
	for i := range 3 {
		x.expect(fmt.Sprintf("skipped request %d, without a key", i), x.send(serve, home(SkipHeader, "health")), 200, "ok", limitField, "")
	}
	x.expect("alice: the skipped requests did not count", x.send(serve, home(KeyHeader, "alice")), 200, "ok", limitField, "1", remainingField, "0")
	x.expect("alice again", x.send(serve, home(KeyHeader, "alice")), 429, anyBody, retryField, "60")
}

func cost(x *rig) {
	var calls atomic.Int32
	serve := x.serve(Scenario{Limiter: x.limiter(fixed("api", 5)), Key: defaultKey,
		Cost: func(v string) int { calls.Add(1); return costOf(v) }})
	as := func(cost string) *http.Request { return home(KeyHeader, "alice", CostHeader, cost) }
	x.expect("cost 3 of 5", x.send(serve, as("3")), 200, "ok", remainingField, "2")
	x.expect("cost 3 of the 2 left", x.send(serve, as("3")), 429, anyBody)
	x.expect("cost 0: the state, not counted", x.send(serve, as("0")), 200, "ok", remainingField, "2")
	res := x.send(serve, as("6"))
	x.expect("cost 6, beyond the capacity: a programming error", res, 500, anyBody, limitField, "")
	x.contains("cost 6", res.body, "rate limit misconfigured")
	x.expect("cost -1", x.send(serve, as("-1")), 500, anyBody)
	x.expect("cost 2: the errors were not counted", x.send(serve, as("2")), 200, "ok", remainingField, "0")
	before := calls.Load()
	x.expect("no key", x.send(serve, home(CostHeader, "1")), 400, anyBody)
	if calls.Load() != before {
		x.Errorf("the cost function was asked for a request without a key")
	}
	log := x.log.String()
	x.contains("the log", log, `msg="ratekit: request cost out of range (answered 500)"`)
	x.contains("the log", log, "failed_requests=2")
}

func deniedHandler(x *rig) {
	denied, got := deniedBy()
	serve := x.serve(Scenario{Limiter: x.limiter(fixed("api", 1)), Key: defaultKey, Denied: denied})
	x.expect("alice", x.send(serve, home(KeyHeader, "alice")), 200, "ok")
	res := x.send(serve, home(KeyHeader, "alice"))
	d, n := got.get()
	if n != 1 || d.Allowed || d.Name != "api" || d.Quota != 1 || d.Remaining != 0 || d.RetryAfter != time.Minute {
		x.Fatalf("the denied handler ran %d times, last with %+v; want once, with the rejection by api", n, d)
	}
	// The body is the denied handler's alone: the handler after the
	// middleware did not run.
	x.expect("alice, rejected", res, http.StatusTeapot, "denied: "+Body(d, true), remainingField, "0", retryField, "60")

	// A store failing closed rejects with a decision of Quota 0.
	down, err := core.NewLimiter(fixed("api", 1), core.WithStore(failing{}), core.WithFailClosed(), quiet)
	if err != nil {
		x.Fatal(err)
	}
	serve = x.serve(Scenario{Limiter: down, Key: defaultKey, Denied: denied})
	res = x.send(serve, home(KeyHeader, "alice"))
	if d, n = got.get(); n != 2 || d.Allowed || d.Quota != 0 {
		x.Fatalf("store down: the denied handler ran %d times, last with %+v; want twice, with quota 0", n, d)
	}
	x.expect("store down, fail closed", res, http.StatusTeapot, "denied: "+Body(d, true))
}

func errorHandler(x *rig) {
	got := &last[error]{}
	serve := x.serve(Scenario{Limiter: x.limiter(fixed("api", 5)), Key: secretKey, Cost: costOf,
		OnError: func(err error) (int, string) { got.set(err); return http.StatusServiceUnavailable, "try later" }})
	for _, c := range []struct {
		what string
		r    *http.Request
		err  error
	}{
		{"a failing key function", home(KeyHeader, "db-down"), errSecret},
		{"no key", home(), keyfuncs.ErrMissing},
		{"a cost out of range", home(KeyHeader, "alice", CostHeader, "6"), core.ErrCostExceedsLimit},
	} {
		x.expect(c.what, x.send(serve, c.r), http.StatusServiceUnavailable, "try later", limitField, "")
		if err, _ := got.get(); !errors.Is(err, c.err) {
			x.Errorf("%s: the error handler got %v, want %v", c.what, err, c.err)
		}
	}
	x.expect("alice", x.send(serve, home(KeyHeader, "alice")), 200, "ok", remainingField, "4")
	if _, n := got.get(); n != 3 {
		x.Errorf("the error handler ran %d times, want 3", n)
	}
	x.contains("the log", x.log.String(), secret) // logged, never shown
}

func nilOptions(x *rig) {
	serve := x.serve(Scenario{Limiter: x.limiter(fixed("api", 1)), Key: defaultKey, NilOptions: true})
	x.expect("alice, neither skipped nor of cost 3", x.send(serve, home(KeyHeader, "alice", SkipHeader, "y", CostHeader, "3")), 200, "ok",
		limitField, "1", remainingField, "0")
	for _, c := range []struct {
		what   string
		r      *http.Request
		status int
		retry  string
	}{
		{"alice again", home(KeyHeader, "alice"), 429, "60"},
		{"no key", home(), 400, ""},
	} {
		res := x.send(serve, c.r)
		x.expect(c.what+": the problem body", res, c.status, anyBody, "Content-Type", answer.ProblemContentType,
			"Cache-Control", answer.ProblemCacheControl, retryField, c.retry)
		x.contains(c.what, res.body, `"status":`+itoa(c.status))
	}
}

func shapingHeld(x *rig) {
	// A shaping leaky bucket of 1000 a second on a stopped clock gives
	// request i a delay of i ms, for which it is held.
	lim := x.limiter(core.Limit{Name: "api", Algorithm: core.LeakyBucket, Rate: core.PerSecond(1000), Burst: 10, Shaping: true})
	serve := x.serve(Scenario{Limiter: lim, Key: defaultKey, DecisionInContext: true})
	for i := range 3 {
		start := time.Now()
		res := x.send(serve, home(KeyHeader, "alice"))
		delay := time.Duration(i) * time.Millisecond
		x.expect(fmt.Sprintf("request %d", i), res, 200, anyBody)
		x.contains(fmt.Sprintf("request %d", i), res.body, " delay="+delay.String()+" ")
		if held := time.Since(start); held < delay {
			x.Errorf("request %d: answered after %v, before its delay of %v", i, held, delay)
		}
	}
}

func shapingContextEnds(x *rig) {
	// One request a second: the second is held a second for its slot, the
	// third two, unless their contexts end, which they do at once (were
	// they held, they would be passed on after their delays).
	lim := x.limiter(core.Limit{Name: "api", Algorithm: core.LeakyBucket, Rate: core.PerSecond(1), Burst: 10, Shaping: true})
	var end atomic.Pointer[func(context.Context) context.Context]
	serve := x.serve(Scenario{Limiter: lim, Key: defaultKey, Context: func(ctx context.Context) context.Context {
		if f := end.Load(); f != nil {
			return (*f)(ctx)
		}
		return ctx
	}})
	x.expect("the first request, without delay", x.send(serve, home(KeyHeader, "alice")), 200, "ok")
	canceled := func(ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx)
		cancel() // the client went away
		return ctx
	}
	expired := func(ctx context.Context) context.Context {
		ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		cancel() // past its deadline already: the error stays DeadlineExceeded
		return ctx
	}
	for what, f := range map[string]func(context.Context) context.Context{"canceled": canceled, "past its deadline": expired} {
		end.Store(&f)
		if res := x.send(serve, home(KeyHeader, "alice")); res.status == http.StatusOK && res.body == "ok" {
			x.Errorf("a request %s while held was passed on", what)
		}
	}
}

func routeGroups(x *rig) {
	global := x.limiter(core.Limit{Name: "global", Algorithm: core.TokenBucket, Rate: core.PerMinute(100)})
	login := x.limiter(fixed("login", 5))
	serve := x.serve(Scenario{Limiter: global, Key: defaultKey, Group: login})
	group := func(client string) *http.Request {
		return call(http.MethodGet, GroupPrefix+"/items", "", KeyHeader, client)
	}
	for i := range 5 { // the group's fields, whose middleware ran last
		x.expect(fmt.Sprintf("alice's group request %d", i), x.send(serve, group("alice")), 200, "ok", limitField, "5", remainingField, itoa(4-i))
	}
	res := x.send(serve, group("alice"))
	x.expect("alice's 6th group request", res, 429, anyBody, limitField, "5", retryField, "60")
	x.contains("alice's 6th group request", res.body, `"limit":"login"`)
	x.expect("alice on /: the global limit counted her 6 group requests", x.send(serve, home(KeyHeader, "alice")), 200, "ok",
		limitField, "100", remainingField, "93")

	for i := range 100 {
		x.expect(fmt.Sprintf("bob on /, %d", i), x.send(serve, home(KeyHeader, "bob")), 200, "ok")
	}
	res = x.send(serve, group("bob"))
	x.expect("bob's group request, over the global limit", res, 429, anyBody, limitField, "100")
	x.contains("bob's group request", res.body, `"limit":"global"`)
	// 6 s later, 10 tokens: bob's 5 group requests pass, and the 6th is
	// the group's rejection, the one the global limit rejected not counted.
	x.clock.Advance(6 * time.Second)
	for i := range 5 {
		x.expect(fmt.Sprintf("bob's group request %d", i), x.send(serve, group("bob")), 200, "ok", limitField, "5", remainingField, itoa(4-i))
	}
	res = x.send(serve, group("bob"))
	x.expect("bob's 6th group request", res, 429, anyBody, limitField, "5")
	x.contains("bob's 6th group request", res.body, `"limit":"login"`)
}

func queueOffer(x *rig) {
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 3, PerKey: 2})
	if err != nil {
		x.Fatal(err)
	}
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type"}, MaxBody: 16, Logger: NewLogger(&x.log)})
	if err != nil {
		x.Fatal(err)
	}
	serve := x.serve(Scenario{Limiter: x.limiter(fixed("orders", 1)), Key: defaultKey, Queue: offer})
	postAs := func(client, body string) response {
		return x.send(serve, call(http.MethodPost, "/?item=7", body,
			KeyHeader, client, "Content-Type", "application/json", "Authorization", "Bearer secret"))
	}
	post := func(body string) response { return postAs("alice", body) }
	x.expect("the first request", post(`{"n":1}`), 200, "ok")
	res := post(`{"n":2}`)
	x.expect("a rejected request, queued", res, http.StatusAccepted, anyBody, "Content-Type", "application/json", retryField, "")
	id := res.header.Get(queue.HeaderID)
	var reply struct{ ID, Status string }
	if err := json.Unmarshal([]byte(res.body), &reply); err != nil || !regexp.MustCompile("^[0-9a-f]{32}$").MatchString(id) ||
		reply.ID != id || reply.Status != "queued" {
		x.Fatalf("queued: %s %q and body %q (%v), want a 32-hex ID in both and status queued", queue.HeaderID, id, res.body, err)
	}
	x.expect("a body over the bound", post(strings.Repeat("x", 17)), http.StatusRequestEntityTooLarge, anyBody)
	x.expect("another, queued", post(`{"n":3}`), http.StatusAccepted, anyBody)
	res = post(`{"n":4}`)
	x.expect("alice's share of the queue full: the rejection", res, 429, anyBody, retryField, "60")
	x.contains("alice's share of the queue full", res.body, "quota-exceeded")
	x.expect("bob's first request", postAs("bob", `{"n":5}`), 200, "ok")
	x.expect("bob's second, queued in his own share", postAs("bob", `{"n":6}`), http.StatusAccepted, anyBody)
	x.expect("carol's first request", postAs("carol", `{"n":7}`), 200, "ok")
	x.expect("carol's second, the queue full: the rejection", postAs("carol", `{"n":8}`), 429, anyBody, retryField, "60")

	it, err := q.Receive(context.Background())
	if err != nil {
		x.Fatal(err)
	}
	if it.ID != id || it.Key != "alice" || it.Method != http.MethodPost || it.Target != "/?item=7" || string(it.Body) != `{"n":2}` ||
		len(it.Header) != 1 || it.Header.Get("Content-Type") != "application/json" {
		x.Errorf("queued item of %q: %s %s %v %q (ID %s), want alice's POST /?item=7, only Content-Type, body {\"n\":2} (ID %s)",
			it.Key, it.Method, it.Target, it.Header, it.Body, it.ID, id)
	}
}

// A keyed request is sent from peer with the forwarding headers xff (a
// line each, as X-Forwarded-For) and must be keyed as key.
type keyed struct {
	peer string
	xff  []string
	key  string
}

// expectKeys sends each request through s, keyed by a limiter that
// records its keys, and checks its key.
func (x *rig) expectKeys(s Scenario, reqs ...keyed) {
	x.Helper()
	lim, keys := x.keyLimiter()
	s.Limiter = lim
	serve := x.serve(s)
	for i, k := range reqs {
		r := from(k.peer, home())
		for _, v := range k.xff {
			r.Header.Add("X-Forwarded-For", v)
			r.Header.Add("X-Real-IP", v)
		}
		what := fmt.Sprintf("request %d from %s, X-Forwarded-For %q", i, k.peer, k.xff)
		x.expect(what, x.send(serve, r), 200, "ok")
		if key, n := keys.get(); key != k.key || n != i+1 {
			x.Errorf("%s: keyed %q (request %d keyed), want %q", what, key, n, k.key)
		}
	}
}

func keysPeerIP(x *rig) {
	x.expectKeys(Scenario{By: ByPeerIP},
		keyed{"203.0.113.7:4711", []string{"1.1.1.1"}, "203.0.113.7"}, // a header never changes it
		keyed{"[2001:db8:1:2:3:4:5:6]:4711", nil, "2001:db8:1:2::/64"},
		keyed{"[::ffff:192.0.2.9]:4711", nil, "192.0.2.9"},
	)
}

func keysIP(x *rig) {
	x.expectKeys(Scenario{By: ByIP, IPOptions: []keyfuncs.IPOption{keyfuncs.TrustedProxies("10.0.0.0/8")}},
		keyed{"203.0.113.7:4711", []string{"1.1.1.1"}, "203.0.113.7"},             // not a proxy: its header is ignored
		keyed{"10.0.0.2:4711", []string{"1.1.1.1, 198.51.100.4"}, "198.51.100.4"}, // the entry the proxy appended
		// Across lines, proxies skipped: the client on the last line, which
		// the first line alone would miss (1.1.1.1), and then on the first,
		// which the last alone would miss (every entry a proxy: 10.0.0.9).
		keyed{"10.0.0.2:4711", []string{"1.1.1.1, 10.0.0.9", "198.51.100.4, 10.0.0.3"}, "198.51.100.4"},
		keyed{"10.0.0.2:4711", []string{"1.1.1.1, 198.51.100.5", "10.0.0.9, 10.0.0.3"}, "198.51.100.5"},
		keyed{"10.0.0.2:4711", nil, "10.0.0.2"}, // no header: the proxy itself
		keyed{"10.0.0.2:4711", []string{"2001:db8:1:2::77"}, "2001:db8:1:2::/64"},
	)
}

// expectValueKeys sends requests with the header field name set to each
// value (none for ""), through s keyed by a limiter that records its keys,
// and checks their keys: want[i], or 400 where it is "".
func (x *rig) expectValueKeys(s Scenario, name string, values, want []string) {
	x.Helper()
	lim, keys := x.keyLimiter()
	s.Limiter = lim
	serve := x.serve(s)
	n := 0
	for i, v := range values {
		r := home()
		if v != "" {
			r.Header[name] = strings.Split(v, "|")
		}
		what := fmt.Sprintf("%s %q", name, r.Header[name])
		if want[i] == "" {
			x.expect(what, x.send(serve, r), 400, anyBody)
			continue
		}
		n++
		x.expect(what, x.send(serve, r), 200, "ok")
		if key, got := keys.get(); key != want[i] || got != n {
			x.Errorf("%s: keyed %q (%d keyed), want %q", what, key, got, want[i])
		}
	}
}

func keysHeader(x *rig) {
	x.expectValueKeys(Scenario{By: ByHeader}, KeyHeader,
		[]string{"  secret ", "first|second", "", " \t "},
		[]string{"secret", "first", "", ""})
}

func keysUser(x *rig) {
	x.expectValueKeys(Scenario{By: ByUser}, UserHeader,
		[]string{"alice", "", "bob"},
		[]string{"alice", "", "bob"})
}

func rulesOptions(x *rig) {
	errBackend := errors.New("adaptertest: plan backend down")
	e := x.engine(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", RateLimit: limit("minute", 3)},
		{Key: "plan", RateLimit: limit("minute", 100)},
	}}, rules.WithKey("plan", func(r rules.Request) (string, error) {
		if v := r.Values(KeyHeader); len(v) > 0 && v[0] == "broken" {
			return "", errBackend
		}
		return "", nil // no plan: the rule does not apply
	}))
	denied, gotDecision := deniedBy()
	gotErr := &last[error]{}
	serve := x.serve(Scenario{Rules: true, Engine: e, Skip: present, Cost: costOf, Denied: denied,
		OnError: func(err error) (int, string) { gotErr.set(err); return http.StatusServiceUnavailable, "try later" }})
	for i := range 3 {
		x.expect(fmt.Sprintf("skipped request %d", i), x.send(serve, home(SkipHeader, "health")), 200, "ok", limitField, "")
	}
	x.expect("cost 2 of 3: the skipped requests did not count", x.send(serve, home(CostHeader, "2")), 200, "ok", remainingField, "1")
	res := x.send(serve, home(CostHeader, "2"))
	d, _ := gotDecision.get()
	x.expect("cost 2 of the 1 left", res, http.StatusTeapot, "denied: "+Body(d, true), retryField, "60")
	if d.Allowed || d.Quota != 3 {
		x.Errorf("the denied handler got %+v, want the rejection of quota 3", d)
	}
	x.expect("a failing descriptor key", x.send(serve, home(KeyHeader, "broken", CostHeader, "0")), http.StatusServiceUnavailable, "try later")
	if err, _ := gotErr.get(); !errors.Is(err, errBackend) {
		x.Errorf("the error handler got %v, want %v", err, errBackend)
	}
}

func rulesDecision(x *rig) {
	e := x.engine(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "generic_key", Value: "api", Match: &rules.Match{Methods: []string{http.MethodPost}}, RateLimit: limit("minute", 3)},
	}})
	serve := x.serve(Scenario{Rules: true, Engine: e, DecisionInContext: true})
	res := x.send(serve, call(http.MethodPost, "/", ""))
	x.expect("POST, which the rule matches", res, 200, anyBody, remainingField, "2")
	if !strings.HasPrefix(res.body, "allowed=true ") || !strings.Contains(res.body, " quota=3 remaining=2 ") {
		x.Errorf("POST: the handler read %q, want the decision of the rule", res.body)
	}
	x.expect("GET, which no rule matches: no decision", x.send(serve, home()), 200, "ok", limitField, "")
}

func rulesUser(x *rig) {
	cfg := rules.Config{Domain: "api", Descriptors: []rules.Descriptor{{Key: "user", RateLimit: limit("minute", 2)}}}
	serve := x.serve(Scenario{Rules: true, Engine: x.engine(cfg, rules.WithUserKey(UserKey))})
	for i, status := range []int{200, 200, 429} {
		x.expect(fmt.Sprintf("alice %d", i), x.send(serve, home(UserHeader, "alice")), status, anyBody, limitField, "2")
	}
	x.expect("bob", x.send(serve, home(UserHeader, "bob")), 200, "ok", remainingField, "1")
	x.expect("anonymous: no user, no rule", x.send(serve, home()), 200, "ok", limitField, "")

	// A key that the framework's values lack is read from the context.
	type ctxKey struct{}
	var user atomic.Int32
	serve = x.serve(Scenario{Rules: true, Engine: x.engine(cfg, rules.WithUserKey(ctxKey{})),
		Context: func(ctx context.Context) context.Context { return context.WithValue(ctx, ctxKey{}, int(user.Load())) }})
	user.Store(42)
	for i, status := range []int{200, 200, 429} {
		x.expect(fmt.Sprintf("user 42, %d", i), x.send(serve, home()), status, anyBody, remainingField, itoa(max(1-i, 0)))
	}
	user.Store(43)
	x.expect("user 43", x.send(serve, home()), 200, "ok", remainingField, "1")
}

func panicsOnNil(x *rig) {
	lim := x.limiter(fixed("api", 1))
	for _, c := range []struct {
		what string
		s    Scenario
	}{
		{"New with a nil limiter", Scenario{Key: defaultKey}},
		{"New with a nil key function", Scenario{Limiter: lim}},
		{"Rules with a nil engine", Scenario{Rules: true}},
	} {
		if !panics(func() { x.serve(c.s) }) {
			x.Errorf("%s did not panic", c.what)
		}
	}
}
