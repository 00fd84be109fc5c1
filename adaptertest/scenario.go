package adaptertest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// The header fields that the scenarios' requests carry, besides
// KeyHeader, and the key under which the app's middleware of a
// ScenarioMount stores the value of UserHeader.
const (
	SkipHeader = "X-Skip" // read by Scenario.Skip
	CostHeader = "X-Cost" // read by Scenario.Cost
	UserHeader = "X-User" // stored under UserKey
	UserKey    = "user"
)

// GroupPrefix is the prefix of the route group of Scenario.Group, whose
// one route is GET GroupPrefix + "/items".
const GroupPrefix = "/group"

// A Route is a route of a ScenarioMount's router.
type Route struct{ Method, Path string }

// Routes are the routes of a ScenarioMount's router besides the group's:
// those of Run's and RunRules' requests, and POST / for the queue.
var Routes = []Route{
	{http.MethodGet, "/"}, {http.MethodPost, "/"},
	{http.MethodPost, "/login"}, {http.MethodGet, "/api/items"},
}

// KeyBy names the key function of a ScenarioMount's middleware: Key, or
// one of the adapter's own.
type KeyBy int

// The key functions of a Scenario.
const (
	ByKey    KeyBy = iota // Scenario.Key of the value of KeyHeader
	ByPeerIP              // the adapter's PeerIP
	ByIP                  // the adapter's IP(Scenario.IPOptions...)
	ByHeader              // the adapter's Header(KeyHeader)
	ByUser                // the adapter's key of the value stored under UserKey (User, ContextValue)
)

// A Scenario is what a ScenarioMount builds, framework-neutrally: the
// middleware, its key function and its options. A field left zero leaves
// its option out.
type Scenario struct {
	// Limiter is the limiter of the middleware: the adapter's New(Limiter,
	// key, opts...), where key is as By says.
	Limiter *core.Limiter

	// Rules, when set, makes the middleware the adapter's Rules(Engine,
	// opts...) instead of New.
	Rules  bool
	Engine *rules.Engine

	// By names the key function; the zero value, ByKey, is Key applied to
	// the value of the request header KeyHeader ("" when the request has
	// none), as Setup.Key. A nil Key is given as a nil key function.
	By        KeyBy
	Key       func(value string) (string, error)
	IPOptions []keyfuncs.IPOption // of ByIP

	// Group, when set, is the limiter of a second middleware, New(Group,
	// key, opts...), on the route group GroupPrefix.
	Group *core.Limiter

	// The options. Skip and Cost are given the value of the request header
	// SkipHeader or CostHeader; Denied and OnError return the status and
	// the body (text) that the adapter's handler writes.
	Skip    func(value string) bool                         // WithSkipper
	Cost    func(value string) int                          // WithCost
	Denied  func(d core.Decision) (status int, body string) // WithDeniedHandler
	OnError func(err error) (status int, body string)       // WithErrorHandler
	Queue   *queue.Offer                                    // WithQueue
	// NilOptions gives WithSkipper(nil), WithCost(nil),
	// WithDeniedHandler(nil) and WithErrorHandler(nil), which must leave
	// the defaults in place.
	NilOptions        bool
	Headers           answer.Style // WithHeaders, always given
	Logger            *slog.Logger // WithLogger, always given
	DecisionInContext bool         // WithDecisionInContext

	// Context, when set, replaces the context of each request that the
	// middleware reads (the request's; Fiber's user context) with
	// Context(that context), in the app's middleware.
	Context func(context.Context) context.Context
}

// A ScenarioMount builds the adapter under test as s says, with the
// adapter's own public functions and options, and returns how to serve
// requests through it: a router of the framework with, in order,
//
//   - the app's own middleware, which stores the value of the request
//     header UserHeader, when there is one, under the key UserKey where
//     the framework keeps a request's values (Gin's and Echo's c.Set,
//     Fiber's c.Locals, a net/http request's context), and applies
//     s.Context when it is set;
//   - the middleware under test, on every route, built before the mount
//     returns (the suite checks that New and Rules panic on nil
//     arguments);
//   - a handler on each of Routes, and, when s.Group is set, the route
//     group GroupPrefix with the group's middleware and the route GET
//     GroupPrefix+"/items" to the same handler, which answers 200 with the
//     body Body(DecisionFrom(...)), as in Mount.
//
// The Serve hands the framework the request's RemoteAddr as the TCP peer,
// every line of a header field sent more than once, and the body.
type ScenarioMount func(t *testing.T, s Scenario) Serve

// RunScenarios runs through mount the conformance table of Run, the rules
// scenarios of RunRules, and the scenarios below, which check the
// adapter's options and key functions by what the client gets, with
// expectations computed by hand on a stopped clock:
//
//   - skipper: skipped requests pass without a key, fields or counting;
//   - cost: a cost from the request, 0 reports without counting, a cost
//     out of range is 500 (logged once per episode) and not counted, and
//     a request without a key is 400 before the cost function is asked;
//   - denied handler: it writes the answer, with the fields and
//     Retry-After set, the handlers after the middleware not run, given
//     the limit's decision, or a fail-closed store's (Quota 0);
//   - error handler: it answers a failing key function, a missing key and
//     a cost out of range, given the error, which is logged too;
//   - nil options: a nil skipper, cost, denied or error handler leaves the
//     default (the problem bodies of 429 and 400);
//   - shaping: a shaping leaky bucket's requests are held for their
//     delay; one whose context is canceled, or past its deadline, while
//     it is held is not passed on;
//   - route groups: a stricter limit on a group, keeping its own counters;
//     the group's fields win; a request the outer limit rejects is not
//     counted by the group's;
//   - queue: rejected requests queued (202, with the item's ID), 413 for
//     a body over the bound, the rejection when the client's share of the
//     queue or the queue is full, and the item as sent, under the key;
//   - keys: PeerIP (forwarding headers ignored, IPv6 by /64, IPv4-mapped
//     addresses as IPv4), IP behind trusted proxies (X-Forwarded-For read
//     across all its lines), Header, and the value the app's middleware
//     stored;
//   - rules: the options under Rules, the decision in the context of a
//     request that rules matched and none for one they did not, key user
//     from the framework's values and else from the request context;
//   - panics: New with a nil limiter or key function, Rules with a nil
//     engine.
func RunScenarios(t *testing.T, mount ScenarioMount) {
	t.Run("conformance", func(t *testing.T) {
		Run(t, func(t *testing.T, s Setup) Serve {
			return mount(t, Scenario{Limiter: s.Limiter, Key: s.Key, Headers: s.Headers, Logger: s.Logger, DecisionInContext: s.DecisionInContext})
		})
	})
	t.Run("rules-conformance", func(t *testing.T) {
		RunRules(t, func(t *testing.T, e *rules.Engine) Serve {
			return mount(t, Scenario{Rules: true, Engine: e, Logger: NewLogger(io.Discard)})
		})
	})
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(&rig{T: t, mount: mount, clock: storetest.NewClock(epoch)})
		})
	}
}

type scenario struct {
	name string
	run  func(x *rig)
}

// A rig runs one scenario: the mount, a stopped clock for the limiters,
// and the log of the middleware.
type rig struct {
	*testing.T
	mount ScenarioMount
	clock *storetest.Clock
	log   SyncBuffer
}

var quiet = core.WithLogger(slog.New(slog.DiscardHandler))

// limiter returns a limiter of l on a memory store on the rig's clock.
func (x *rig) limiter(l core.Limit, opts ...core.Option) *core.Limiter {
	x.Helper()
	return Limiter(x.T, x.clock, l, append([]core.Option{quiet}, opts...)...)
}

// fixed is a fixed window of n requests a minute.
func fixed(name string, n int) core.Limit {
	return core.Limit{Name: name, Algorithm: core.FixedWindow, Rate: core.PerMinute(n)}
}

// keyLimiter returns a plan limiter whose plan, a fixed window of 10 a
// minute, is the same for every key, and the keys it was asked for.
func (x *rig) keyLimiter() (*core.Limiter, *last[string]) {
	x.Helper()
	keys := &last[string]{}
	lim, err := core.NewPlanLimiter(func(_ context.Context, key string) (core.Limit, error) {
		keys.set(key)
		return fixed("api", 10), nil
	}, core.WithStore(&core.MemoryStore{Clock: x.clock.Now}), quiet)
	if err != nil {
		x.Fatal(err)
	}
	return lim, keys
}

// engine returns an engine with cfg loaded (see Engine).
func (x *rig) engine(cfg rules.Config, opts ...rules.Option) *rules.Engine {
	x.Helper()
	e, _ := Engine(x.T, cfg, opts...)
	return e
}

// serve mounts s, logging to the rig's log unless s has a logger.
func (x *rig) serve(s Scenario) Serve {
	x.Helper()
	if s.Logger == nil {
		s.Logger = NewLogger(&x.log)
	}
	return x.mount(x.T, s)
}

// send serves r through serve and reads the response.
func (x *rig) send(serve Serve, r *http.Request) response {
	x.Helper()
	return read(x.T, serve(r))
}

// anyBody, as the body expect wants, checks no body.
const anyBody = "\x00any"

// expect fails the test unless res has status, body (unless anyBody),
// and the header fields given in name, value pairs ("" for absent).
func (x *rig) expect(what string, res response, status int, body string, fields ...string) {
	x.Helper()
	if res.status != status || body != anyBody && res.body != body {
		if body == anyBody {
			body = "(any body)"
		}
		x.Fatalf("%s: got %d %q, want %d %q", what, res.status, res.body, status, body)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if got := res.header.Get(fields[i]); got != fields[i+1] {
			x.Errorf("%s: %s %q, want %q", what, fields[i], got, fields[i+1])
		}
	}
}

// contains fails the test unless s contains sub.
func (x *rig) contains(what, s, sub string) {
	x.Helper()
	if !strings.Contains(s, sub) {
		x.Errorf("%s: %q lacks %q", what, s, sub)
	}
}

// call is a request from 192.0.2.10:4711 with the header fields given in
// name, value pairs.
func call(method, target, body string, fields ...string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = "192.0.2.10:4711"
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

// home is GET / with the header fields given in pairs.
func home(fields ...string) *http.Request { return call(http.MethodGet, "/", "", fields...) }

// from sets the peer of r.
func from(peer string, r *http.Request) *http.Request {
	r.RemoteAddr = peer
	return r
}

// last keeps what the adapter's handlers report: the last value and how
// many, safe for frameworks that serve on goroutines of their own.
type last[T any] struct {
	mu sync.Mutex
	v  T
	n  int
}

func (l *last[T]) set(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.v, l.n = v, l.n+1
}

func (l *last[T]) get() (T, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v, l.n
}

// panics reports whether f panics.
func panics(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}
