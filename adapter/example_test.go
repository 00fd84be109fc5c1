package adapter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// The examples build an adapter to net/http itself, the smallest there is:
// its request type, its port, one option, and its middleware. An adapter
// to another framework has the same parts in that framework's types.

// call is the adapter's request type C: a request through the
// middleware, passed by value. A framework with a context type of its own
// uses that instead (*gin.Context, echo.Context, *fiber.Ctx).
type call struct {
	w    http.ResponseWriter
	r    *http.Request
	next http.Handler
}

// port is the adapter's adapter.Port. It has no state, so a value of it
// converts to the interface without an allocation, and its methods take
// and return values: a request that passes allocates nothing in the kit.
type port struct{}

func (port) Context(c call) context.Context { return c.r.Context() }

// Request is the view of the request that a rules.Engine matches;
// rules.HTTPRequest converts an *http.Request for free.
func (port) Request(c call) rules.Request { return rules.HTTPRequest(c.r) }

// Header sets a field; the kit gives canonical names and values that are
// shared between responses, assigned without a copy. A nil value removes
// the field (a queued request's reply has no Retry-After).
func (port) Header(c call, name string, value []string) {
	if value == nil {
		delete(c.w.Header(), name)
		return
	}
	c.w.Header()[name] = value
}

func (port) Next(c call) error {
	c.next.ServeHTTP(c.w, c.r)
	return nil
}

// Keep stores the decision for the handler, where the adapter's
// DecisionFrom reads it; the kit calls it only when Config.DecisionInContext
// is set.
func (port) Keep(c call, d core.Decision) call {
	c.r = c.r.WithContext(context.WithValue(c.r.Context(), decisionKey{}, d))
	return c
}

// Stop has nothing to do in net/http: a handler that does not call the
// next one ends the chain, and nobody listens for the error of a client
// gone during a shaping hold.
func (port) Stop(call, error) error { return nil }

func (port) Write(c call, status int, body []byte) error {
	c.w.WriteHeader(status)
	_, err := c.w.Write(body)
	return err
}

func (port) Offer(c call, o *queue.Offer, d core.Decision) queue.Reply { return o.ReplyTo(c.r, d) }

type decisionKey struct{}

// decisionFrom is the adapter's DecisionFrom.
func decisionFrom(ctx context.Context) (core.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(core.Decision)
	return d, ok
}

// Option is the adapter's option: the kit's, for its request type.
type Option = adapter.Option[call]

// withDecisionInContext is one of the adapter's options, which fill an
// adapter.Config in the adapter's own types.
func withDecisionInContext() Option {
	return func(c *adapter.Config[call]) { c.DecisionInContext = true }
}

// middleware turns a flow of the kit into net/http middleware.
func middleware(flow func(call) error) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = flow(call{w, r, next})
		})
	}
}

// peerIP is the example's key function: the client's address.
func peerIP(c call) (string, error) { return keyfuncs.PeerIP(c.r) }

// get serves a request from the example's client (httptest's 192.0.2.1).
func get(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

// New and Limit: an adapter's rate-limit middleware is the kit's Limit
// flow on the adapter's port.
func ExampleNew() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(2)}))
	limit := middleware(adapter.New(port{}, withDecisionInContext()).Limit(lim, peerIP))

	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := decisionFrom(r.Context())
		fmt.Fprintf(w, "hello; %d left", d.Remaining)
	}))
	for range 3 {
		w := get(h, http.MethodGet, "/")
		fmt.Println(w.Code, w.Header().Get(answer.HeaderRemaining), w.Header().Get(answer.HeaderRetryAfter), w.Body)
	}
	// Output:
	// 200 1  hello; 1 left
	// 200 0  hello; 0 left
	// 429 0 30 {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 30 s","limit":"api","retry_after":30}
}

// Rules: the middleware of a rules engine; a request that no rule matches
// passes without rate-limit header fields.
func ExampleMiddleware_Rules() {
	e, err := rules.NewEngine()
	if err != nil {
		panic(err)
	}
	err = e.Load(rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{{
		Key:       "remote_address",
		Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
		RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 1, Name: "logins"},
	}}})
	if err != nil {
		panic(err)
	}
	limit := middleware(adapter.New[call](port{}).Rules(e))

	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	for _, target := range []string{"POST /login", "POST /login", "GET /"} {
		method, path, _ := strings.Cut(target, " ")
		w := get(h, method, path)
		fmt.Printf("%s: %d limit %q remaining %q\n", target, w.Code, w.Header().Get(answer.HeaderLimit), w.Header().Get(answer.HeaderRemaining))
	}
	// Output:
	// POST /login: 200 limit "1" remaining "0"
	// POST /login: 429 limit "1" remaining "0"
	// GET /: 200 limit "" remaining ""
}

// Concurrency: at most one report per client at a time. The handler, while
// it runs, serves a second request of the same client, which is refused;
// once it returns, the slot is free again.
func ExampleMiddleware_Concurrency() {
	lim, err := concurrency.NewLimiter(1, concurrency.WithName("reports"))
	if err != nil {
		panic(err)
	}
	limit := middleware(adapter.New[call](port{}).Concurrency(lim, peerIP))

	var h http.Handler
	h = limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/report" {
			second := get(h, http.MethodGet, "/again") // the same client, while this one runs
			fmt.Println("second:", second.Code, "Retry-After", second.Header().Get(answer.HeaderRetryAfter))
		}
		fmt.Fprint(w, "report")
	}))
	w := get(h, http.MethodGet, "/report")
	fmt.Println("first:", w.Code, w.Body)
	fmt.Println("in flight:", lim.InFlight())
	fmt.Println("third:", get(h, http.MethodGet, "/again").Code)
	// Output:
	// second: 429 Retry-After 1
	// first: 200 report
	// in flight: 0
	// third: 200
}
