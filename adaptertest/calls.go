package adaptertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// The service of a CallMount's server: two unary methods, in gRPC's form
// of full method names, whose handler replies Body(DecisionFrom(...)) (a
// text message).
const (
	CallService = "adaptertest.Calls"
	MethodEcho  = "/" + CallService + "/Echo"
	MethodOther = "/" + CallService + "/Other"
)

// The metadata that the calls of RunCalls carry, in lower case, as gRPC
// sends metadata keys: the key of the call (CallScenario.Key and the port's
// metadata key function), and the values of CallScenario.Skip and
// CallScenario.Cost.
const (
	KeyMetadata  = "x-client"
	SkipMetadata = "x-skip"
	CostMetadata = "x-cost"
)

// The loopback addresses that the calls of RunCalls come from: the peer
// that a Caller's connection for a call dials from (DialFrom). Most calls
// come from ClientPeer; the scenarios of several peers, which need
// ProxyPeer and OtherPeer to be local addresses (they are on Linux, where
// all of 127.0.0.0/8 is), are skipped where they are not.
const (
	ClientPeer = "127.0.0.1"
	ProxyPeer  = "127.0.0.2"
	OtherPeer  = "127.0.0.3"
)

// The codes of an Answer, named as gRPC names them (codes.Code's String).
// A port whose framework spells them otherwise, such as Connect's
// "resource_exhausted", converts them.
const (
	CodeOK                = "OK"
	CodeResourceExhausted = "ResourceExhausted"
	CodeUnavailable       = "Unavailable"
	CodeInvalidArgument   = "InvalidArgument"
	CodeInternal          = "Internal"
)

// A Call is one unary call of RunCalls, framework-neutrally: its full
// method, the IP address it comes from, and the metadata it sends. RunCalls
// always fills Method and Peer.
type Call struct {
	Method   string              // "/pkg.Service/Method": MethodEcho or MethodOther
	Peer     string              // the IP address the call's connection dials from: ClientPeer, ProxyPeer or OtherPeer
	Metadata map[string][]string // lower-case keys, every value of each sent
}

// A Violation is one violation of a google.rpc.QuotaFailure.
type Violation struct{ Subject, Description string }

// An Answer is how a call ended, as its client saw it, framework-neutrally.
type Answer struct {
	// Code is the status code's name (CodeOK, CodeResourceExhausted, ...),
	// and Message the status message, "" for OK.
	Code    string
	Message string

	// Reply is the text the handler replied, for OK.
	Reply string

	// Header is the header metadata the client received, keys in lower
	// case, every value of each. A port that sees response headers and
	// trailers apart gives those of the headers.
	Header map[string][]string

	// RetryInfo says whether the status carries a google.rpc.RetryInfo,
	// and RetryDelay is its delay.
	RetryInfo  bool
	RetryDelay time.Duration

	// QuotaFailure holds the violations of the status's
	// google.rpc.QuotaFailure; nil when it has none (empty, not nil, for a
	// QuotaFailure without violations).
	QuotaFailure []Violation
}

// A CallScenario is what a CallMount builds, framework-neutrally: the
// server interceptor (or the framework's equivalent), its key function and
// its options. A field left zero leaves its option out.
type CallScenario struct {
	// Limiter is the limiter of the interceptor: the port's
	// UnaryServerInterceptor(Limiter, key, opts...), or its equivalent,
	// where key is as By says.
	Limiter *core.Limiter

	// Rules, when set, makes the interceptor the port's UnaryRules(Engine,
	// opts...) instead, and By is unused.
	Rules  bool
	Engine *rules.Engine

	// By names the key function: ByKey (the zero value), Key applied to
	// the first value of the metadata KeyMetadata ("" when the call has
	// none), a nil Key given as a nil key function; ByPeerIP, the port's
	// PeerIP; ByIP, the port's IP(IPOptions...); ByHeader, the port's key
	// of the metadata KeyMetadata (Metadata(KeyMetadata)). RunCalls uses
	// no other KeyBy.
	By        KeyBy
	Key       func(value string) (string, error)
	IPOptions []keyfuncs.IPOption

	// The options. Skip and Cost are given the first value of the metadata
	// SkipMetadata or CostMetadata ("" when the call has none).
	Skip func(value string) bool // WithSkipper
	Cost func(value string) int  // WithCost
	// Methods, when not nil (even empty), is given to the port's
	// WithMethods(Methods...): the calls of every other method are skipped.
	Methods           []string
	Headers           answer.Style // WithHeaders, always given
	Logger            *slog.Logger // WithLogger, always given
	DecisionInContext bool         // WithDecisionInContext
}

// A CallMount builds the port under test as s says, with the port's own
// public functions and options, and returns how to call through it: a
// server of the framework, on a TCP listener of 127.0.0.1, that serves
// CallService with the interceptor under test in front of its methods,
// each of which replies Body(DecisionFrom(ctx)) ("ok" when the call
// carries no decision). The interceptor is built before the mount returns,
// and before the server starts: RunCalls checks that a nil Limiter, a nil
// Key under ByKey and a nil Engine under Rules make the port's
// constructors panic.
type CallMount func(t *testing.T, s CallScenario) Caller

// A Caller makes one call through the server of a CallMount, over a real
// connection whose local address is c.Peer (see DialFrom), and returns
// how it ended. It reports a call that failed other than with a status,
// or whose status it cannot read, on the test of its mount.
type Caller func(c Call) Answer

// DialFrom opens a TCP connection to address from the IP address peer
// ("" for ClientPeer): the dialer of a Caller's connections, one for each
// peer, such as grpc.WithContextDialer's function or an
// http.Transport's DialContext.
func DialFrom(ctx context.Context, peer, address string) (net.Conn, error) {
	if peer == "" {
		peer = ClientPeer
	}
	ip := net.ParseIP(peer)
	if ip == nil {
		return nil, fmt.Errorf("adaptertest: peer %q is not an IP address", peer)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
	return d.DialContext(ctx, "tcp", address)
}

// RunCalls runs through mount the call table: the scenarios of an RPC
// port (grpc-go's interceptors, Connect's), each call made over a real
// connection, with expectations computed by hand on a stopped clock:
//
//   - retry delays: for each algorithm, a rejection's RetryInfo holds the
//     exact time until a call is admitted again: a call that waits 1 ns
//     less is rejected (with a delay of 1 ns), one that waits the delay
//     is admitted;
//   - rejections: ResourceExhausted with a fixed message, RetryInfo, a
//     QuotaFailure whose one violation names the limit, and the rate-limit
//     fields as header metadata; a limit of zero calls is a rejection too;
//   - all or nothing: of two limits, or of two rules that match a call, a
//     call rejected by one is counted by neither, as the remaining fields
//     of later calls show;
//   - keys: the peer IP, never forwarding metadata; the client behind a
//     trusted proxy only (x-forwarded-for, or forwarded when configured),
//     forwarding metadata from any other peer ignored; a metadata key;
//   - a missing key (InvalidArgument), a failing key function (Internal,
//     its error logged once per episode and never sent);
//   - a store failing open (calls pass) and failing closed (Unavailable,
//     RetryInfo, no QuotaFailure);
//   - cost: a cost from metadata, 0 reports without counting, a cost out
//     of range is Internal and not counted;
//   - skipper and WithMethods: skipped calls pass, without a key, header
//     metadata or counting;
//   - the decision in the handler's context (WithDecisionInContext);
//   - HTTP parity: every case of Run made as a call, keyed by the case's
//     key function of the metadata KeyMetadata, and as a request through
//     stdhttp's middleware, on two limiters of one clock: the answer's
//     code is CodeOf the response's status, its header metadata is the
//     response's fields of Fields in lower case (Cache-Control, a problem
//     body's, left out), an OK answer's reply is the body, a rejection's
//     RetryInfo rounds up to Retry-After and its QuotaFailure names the
//     limit of the problem body, and the two logs are the same;
//   - panics: a nil limiter, key function or engine.
//
// Every answer is checked besides: its message is fixed (the same for
// every answer of its code) and, like its details and header metadata,
// never holds the call's key or a key function's error; an OK answer has
// no details; a rejection's retry-after field, when sent, is its
// RetryInfo's delay in whole seconds rounded up; no answer has a
// cache-control field.
func RunCalls(t *testing.T, mount CallMount) {
	for _, sc := range callScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			if sc.peers {
				if err := extraPeers(); err != nil {
					t.Skipf("needs %s and %s as local addresses: %v", ProxyPeer, OtherPeer, err)
				}
			}
			sc.run(newCallRig(t, mount))
		})
	}
	t.Run("http-parity", func(t *testing.T) {
		for _, tc := range cases() {
			t.Run(tc.name, func(t *testing.T) { sameAsHTTP(newCallRig(t, mount), tc) })
		}
	})
}

type callScenario struct {
	name  string
	peers bool // needs ProxyPeer and OtherPeer
	run   func(x *callRig)
}

func callScenarios() []callScenario {
	return []callScenario{
		// 2 calls at 0 fill the window of the first minute.
		{"retry-delay/fixed-window", false, retryDelay(fixed("api", 2), 2,
			[]time.Duration{0, 0}, 15500*time.Millisecond, 44500*time.Millisecond, "45", 1)},
		// 3 calls at 10 s fill the first window. In the next, the 3 weigh
		// 3 x (60-e)/60 of the minute, which must leave room for one call:
		// 3 x (60-e)/60 <= 2, e >= 20 s, at 80 s, 30 s after 50 s.
		{"retry-delay/sliding-window-counter", false, retryDelay(core.Limit{Name: "api", Algorithm: core.SlidingWindowCounter, Rate: core.PerMinute(3)}, 3,
			[]time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second}, 50*time.Second, 30*time.Second, "30", 0)},
		// The call at 0 counts while now < 60 s.
		{"retry-delay/sliding-window-log", false, retryDelay(core.Limit{Name: "api", Algorithm: core.SlidingWindowLog, Rate: core.PerMinute(2)}, 2,
			[]time.Duration{0, 10 * time.Second}, 25*time.Second, 35*time.Second, "35", 0)},
		// A token every 10 s, 2 at most: the bucket emptied at 0 has its
		// next token at 10 s.
		{"retry-delay/token-bucket", false, retryDelay(core.Limit{Name: "api", Algorithm: core.TokenBucket, Rate: core.PerMinute(6), Burst: 2}, 2,
			[]time.Duration{0, 0}, 3*time.Second, 7*time.Second, "7", 0)},
		// A queue of 1 draining every 250 ms.
		{"retry-delay/leaky-bucket", false, retryDelay(core.Limit{Name: "api", Algorithm: core.LeakyBucket, Rate: core.PerSecond(4), Burst: 1}, 1,
			[]time.Duration{0}, 100*time.Millisecond, 150*time.Millisecond, "1", 0)},
		{"rejection", false, callRejection},
		{"block-limit", false, callBlock},
		{"all-or-nothing/two-limits", false, callTwoLimits},
		{"all-or-nothing/rules", false, callRulesAllOrNothing},
		{"keys/peer-ip", false, callKeysPeerIP},
		{"keys/peer-ip/peers", true, callKeysPeerIPPeers},
		{"keys/ip/untrusted-peer", false, callKeysIPUntrusted},
		{"keys/ip/trusted-peer", false, callKeysIPTrusted},
		{"keys/ip/forwarded", false, callKeysIPForwarded},
		{"keys/ip/peers", true, callKeysIPPeers},
		{"keys/metadata", false, callKeysMetadata},
		{"missing-key", false, callMissingKey},
		{"key-error", false, callKeyError},
		{"store-failure/fail-open", false, callFailOpen},
		{"store-failure/fail-closed", false, callFailClosed},
		{"cost", false, callCost},
		{"skipper", false, callSkipper},
		{"methods", false, callMethods},
		{"decision-in-context", false, callDecision},
		{"panics-on-nil", false, callPanics},
	}
}

var (
	peersOnce sync.Once
	peersErr  error
)

// extraPeers reports whether ProxyPeer and OtherPeer are local addresses,
// which a connection can dial from.
func extraPeers() error {
	peersOnce.Do(func() {
		for _, p := range []string{ProxyPeer, OtherPeer} {
			l, err := net.Listen("tcp", net.JoinHostPort(p, "0"))
			if err != nil {
				peersErr = err
				return
			}
			_ = l.Close()
		}
	})
	return peersErr
}

// A callRig runs one scenario of the call table: the mount, a stopped
// clock for the limiters, the log of the interceptor, and what the
// answers so far said that must stay the same.
type callRig struct {
	*testing.T
	mount CallMount
	clock *storetest.Clock
	log   SyncBuffer

	messages    map[string]string // the message of each code
	description string            // of the QuotaFailure violations
}

func newCallRig(t *testing.T, mount CallMount) *callRig {
	return &callRig{T: t, mount: mount, clock: storetest.NewClock(epoch), messages: map[string]string{}}
}

// limiter returns a limiter of l on a memory store on the rig's clock.
func (x *callRig) limiter(l core.Limit, opts ...core.Option) *core.Limiter {
	x.Helper()
	return Limiter(x.T, x.clock, l, append([]core.Option{quiet}, opts...)...)
}

// engine returns an engine on a memory store on the rig's clock, with cfg
// loaded.
func (x *callRig) engine(cfg rules.Config) *rules.Engine {
	x.Helper()
	e, err := rules.NewEngine(rules.WithStore(&core.MemoryStore{Clock: x.clock.Now}))
	if err == nil {
		err = e.Load(cfg)
	}
	if err != nil {
		x.Fatalf("adaptertest: engine: %v", err)
	}
	return e
}

// keyLimiter is keyLimiter of the HTTP scenarios: a fixed window of 10 a
// minute for every key, and the keys it was asked for.
func (x *callRig) keyLimiter() (*core.Limiter, *last[string]) {
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

// serve mounts s, logging to the rig's log unless s has a logger.
func (x *callRig) serve(s CallScenario) Caller {
	x.Helper()
	if s.Logger == nil {
		s.Logger = NewLogger(&x.log)
	}
	return x.mount(x.T, s)
}

// at sets the rig's clock to epoch + d.
func (x *callRig) at(d time.Duration) { x.clock.Set(epoch.Add(d)) }

// call makes c through caller, with MethodEcho and ClientPeer unless c
// says otherwise, and checks what every answer must be (see RunCalls).
func (x *callRig) call(caller Caller, c Call) Answer {
	x.Helper()
	if c.Method == "" {
		c.Method = MethodEcho
	}
	if c.Peer == "" {
		c.Peer = ClientPeer
	}
	a := caller(c)
	what := fmt.Sprintf("%s from %s with %v", c.Method, c.Peer, c.Metadata)
	hidden := []string{secret, "hunter2", "connection refused", errDown.Error()}
	for _, v := range c.Metadata[KeyMetadata] {
		if len(v) >= 3 {
			hidden = append(hidden, v)
		}
	}
	shown := []string{a.Message}
	for _, v := range a.QuotaFailure {
		shown = append(shown, v.Subject, v.Description)
	}
	for k, vs := range a.Header {
		shown = append(shown, k+": "+strings.Join(vs, ", "))
	}
	for _, s := range shown {
		for _, h := range hidden {
			if strings.Contains(s, h) {
				x.Errorf("%s: the answer (%s) shows %q in %q", what, a.Code, h, s)
			}
		}
	}
	if v, ok := a.Header["cache-control"]; ok {
		x.Errorf("%s: cache-control %q, a problem body's field", what, v)
	}
	if a.Code == CodeOK {
		if a.Message != "" || a.RetryInfo || a.QuotaFailure != nil {
			x.Errorf("%s: OK with message %q, RetryInfo %t, QuotaFailure %v", what, a.Message, a.RetryInfo, a.QuotaFailure)
		}
		return a
	}
	if a.Message == "" {
		x.Errorf("%s: %s without a message", what, a.Code)
	} else if m, ok := x.messages[a.Code]; !ok {
		x.messages[a.Code] = a.Message
	} else if m != a.Message {
		x.Errorf("%s: %s message %q, and %q before: not fixed", what, a.Code, a.Message, m)
	}
	for _, v := range a.QuotaFailure {
		if v.Description == "" {
			x.Errorf("%s: a violation of %q without a description", what, v.Subject)
		} else if x.description == "" {
			x.description = v.Description
		} else if v.Description != x.description {
			x.Errorf("%s: violation description %q, and %q before: not fixed", what, v.Description, x.description)
		}
	}
	if ra := a.Header["retry-after"]; a.RetryInfo && len(ra) > 0 {
		if want := itoa(int(ceilSeconds(a.RetryDelay))); len(ra) != 1 || ra[0] != want {
			x.Errorf("%s: retry-after %q, want the RetryInfo's %v in whole seconds, %s", what, ra, a.RetryDelay, want)
		}
	}
	return a
}

// ceilSeconds is the positive d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// An outcome is what a scenario expects of an answer.
type outcome struct {
	code    string
	reply   string        // OK: the reply ("ok" when "")
	retry   time.Duration // ResourceExhausted and Unavailable: RetryInfo's delay
	subject string        // ResourceExhausted: the one violation's subject
	fields  []string      // header metadata name, value pairs; "" absent
}

// passes is an OK answer replying "ok", with the fields given in pairs.
func passes(fields ...string) outcome { return outcome{code: CodeOK, fields: fields} }

// exhausted is a rejection by the limit named subject, retried after
// retry.
func exhausted(subject string, retry time.Duration, fields ...string) outcome {
	return outcome{code: CodeResourceExhausted, subject: subject, retry: retry, fields: fields}
}

// refused is the answer of code to a call the interceptor did not decide:
// no details.
func refused(code string, fields ...string) outcome { return outcome{code: code, fields: fields} }

// expect fails the test unless a is as o says.
func (x *callRig) expect(what string, a Answer, o outcome) {
	x.Helper()
	if a.Code != o.code {
		x.Fatalf("%s: %s %q, want %s", what, a.Code, a.Message, o.code)
	}
	switch o.code {
	case CodeOK:
		if want := cmp.Or(o.reply, "ok"); a.Reply != want {
			x.Errorf("%s: reply %q, want %q", what, a.Reply, want)
		}
	case CodeResourceExhausted, CodeUnavailable:
		if !a.RetryInfo || a.RetryDelay != o.retry {
			x.Errorf("%s: RetryInfo %t of %v, want one of %v", what, a.RetryInfo, a.RetryDelay, o.retry)
		}
		if o.code == CodeUnavailable {
			if a.QuotaFailure != nil {
				x.Errorf("%s: QuotaFailure %v, want none", what, a.QuotaFailure)
			}
		} else if len(a.QuotaFailure) != 1 || a.QuotaFailure[0].Subject != o.subject {
			x.Errorf("%s: QuotaFailure %v, want one violation of subject %q", what, a.QuotaFailure, o.subject)
		}
	default:
		if a.RetryInfo || a.QuotaFailure != nil {
			x.Errorf("%s: RetryInfo %t, QuotaFailure %v, want no details", what, a.RetryInfo, a.QuotaFailure)
		}
	}
	for i := 0; i+1 < len(o.fields); i += 2 {
		name, want := o.fields[i], o.fields[i+1]
		got := a.Header[name]
		if want == "" && len(got) > 0 || want != "" && (len(got) != 1 || got[0] != want) {
			x.Errorf("%s: %s %q, want %q", what, name, got, want)
		}
	}
}

// contains fails the test unless s contains sub.
func (x *callRig) contains(what, s, sub string) {
	x.Helper()
	if !strings.Contains(s, sub) {
		x.Errorf("%s: %q lacks %q", what, s, sub)
	}
}

// md is the metadata of name, value pairs, a name given more than once
// sending each value.
func md(pairs ...string) map[string][]string {
	m := map[string][]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = append(m[pairs[i]], pairs[i+1])
	}
	return m
}

// as is a call of MethodEcho by client (no key when ""), with the metadata
// of the pairs besides.
func as(client string, pairs ...string) Call {
	if client != "" {
		pairs = append([]string{KeyMetadata, client}, pairs...)
	}
	return Call{Metadata: md(pairs...)}
}

// Shorthands of the fields' metadata keys.
const (
	limitKey     = "x-ratelimit-limit"
	remainingKey = "x-ratelimit-remaining"
	retryKey     = "retry-after"
)

// retryDelay returns the scenario of a limiter of l, of the given
// capacity: alice's calls at the times of admitted pass, the last with 0
// remaining; her call at rejectedAt is rejected with RetryInfo's delay
// and retry-after retryAfter; a call 1 ns before the delay is up is
// rejected with a delay of 1 ns, and one when it is up passes with then
// remaining.
func retryDelay(l core.Limit, capacity int, admitted []time.Duration, rejectedAt, delay time.Duration, retryAfter string, then int) func(x *callRig) {
	return func(x *callRig) {
		quota := itoa(capacity)
		call := x.serve(CallScenario{Limiter: x.limiter(l), Key: defaultKey})
		for i, at := range admitted {
			x.at(at)
			x.expect(fmt.Sprintf("call %d at %v", i, at), x.call(call, as("alice")), passes(limitKey, quota, remainingKey, itoa(len(admitted)-1-i)))
		}
		x.at(rejectedAt)
		x.expect(fmt.Sprintf("the call at %v", rejectedAt), x.call(call, as("alice")),
			exhausted("api", delay, limitKey, quota, remainingKey, "0", retryKey, retryAfter))
		x.at(rejectedAt + delay - time.Nanosecond)
		x.expect("1 ns before the delay is up", x.call(call, as("alice")),
			exhausted("api", time.Nanosecond, limitKey, quota, remainingKey, "0", retryKey, "1"))
		x.at(rejectedAt + delay)
		x.expect("the delay is up", x.call(call, as("alice")), passes(limitKey, quota, remainingKey, itoa(then)))
	}
}

func callRejection(x *callRig) {
	call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 2)), By: ByHeader})
	for i := range 2 {
		x.expect(fmt.Sprintf("call %d", i), x.call(call, as("secret-key-1")), passes(limitKey, "2", remainingKey, itoa(1-i),
			"x-ratelimit-reset", "60", retryKey, ""))
	}
	x.at(15500 * time.Millisecond)
	// The exact delay, not whole seconds; the fields arrive with the status.
	x.expect("the third call", x.call(call, as("secret-key-1")), exhausted("api", 44500*time.Millisecond,
		limitKey, "2", remainingKey, "0", "x-ratelimit-reset", "45", retryKey, "45", "x-ratelimit-retry-after", "45"))
	x.expect("another client", x.call(call, as("secret-key-2")), passes(limitKey, "2", remainingKey, "1"))
}

func callBlock(x *callRig) {
	// A limit of zero calls: a rejection, though its quota is 0 like the
	// decision of a store failing closed; a quota of 0 has no rate-limit
	// fields, only retry-after.
	call := x.serve(CallScenario{Limiter: x.limiter(core.Limit{Name: "blocked", Rate: core.Rate{Count: 0, Period: time.Minute}}), Key: defaultKey,
		Headers: answer.Both})
	x.expect("alice", x.call(call, as("alice")), exhausted("blocked", time.Minute, limitKey, "", "ratelimit", "", retryKey, "60"))
}

func callTwoLimits(x *callRig) {
	// As two-limits/all-or-nothing of Run: the 6 calls the minute limit
	// rejects, 0.1 s before the minute ends, leave the second limit's 7
	// tokens alone, so that in the next minute the minute limit (2 left)
	// still decides, not the second limit (1 left had it counted them).
	lim := x.limiter(core.Limit{Name: "second", Algorithm: core.TokenBucket, Rate: core.PerSecond(10)},
		core.WithLimit(core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)}))
	call := x.serve(CallScenario{Limiter: lim, Key: defaultKey})
	x.at(59900 * time.Millisecond)
	for i := range 9 {
		o := passes(limitKey, "3", remainingKey, itoa(max(2-i, 0)))
		if i >= 3 {
			o = exhausted("minute", 100*time.Millisecond, limitKey, "3", remainingKey, "0", retryKey, "1")
		}
		x.expect(fmt.Sprintf("call %d", i), x.call(call, as("alice")), o)
	}
	x.at(time.Minute)
	x.expect("the next minute", x.call(call, as("alice")), passes(limitKey, "3", remainingKey, "2"))
}

func callRulesAllOrNothing(x *callRig) {
	const tenant, client = "api/header:x-tenant", "api/header:x-client"
	e := x.engine(rules.Config{Domain: "api", Descriptors: []rules.Descriptor{
		{Key: "header:x-tenant", RateLimit: limit("minute", 5)},
		{Key: "header:" + KeyMetadata, RateLimit: limit("minute", 2)},
	}})
	call := x.serve(CallScenario{Rules: true, Engine: e})
	of := func(who, org string) Call { return as(who, "x-tenant", org) }
	x.expect("alice 1", x.call(call, of("alice", "acme")), passes(limitKey, "2", remainingKey, "1"))
	x.expect("alice 2", x.call(call, of("alice", "acme")), passes(limitKey, "2", remainingKey, "0"))
	for i := range 3 {
		x.expect(fmt.Sprintf("alice, rejected %d", i), x.call(call, of("alice", "acme")), exhausted(client, time.Minute, limitKey, "2", remainingKey, "0"))
	}
	// acme has 3 left, had the rejections not been counted by it; 0 if
	// they had, and bob would be rejected.
	x.expect("bob 1", x.call(call, of("bob", "acme")), passes(limitKey, "2", remainingKey, "1"))
	x.expect("bob 2", x.call(call, of("bob", "acme")), passes(limitKey, "2", remainingKey, "0"))
	x.expect("carol 1: acme's last", x.call(call, of("carol", "acme")), passes(limitKey, "5", remainingKey, "0"))
	x.expect("carol 2: acme's limit", x.call(call, of("carol", "acme")), exhausted(tenant, time.Minute, limitKey, "5", remainingKey, "0"))
	// carol's own limit did not count the call acme's rejected: 1 left.
	x.expect("carol 3, of globex", x.call(call, of("carol", "globex")), passes(limitKey, "2", remainingKey, "0"))
	x.expect("carol 4, of globex", x.call(call, of("carol", "globex")), exhausted(client, time.Minute, limitKey, "2", remainingKey, "0"))
}

// A keyedCall is a call that must be keyed as key.
type keyedCall struct {
	peer string
	md   map[string][]string
	key  string
}

// spoofed is forwarding metadata that names 198.51.100.7.
var spoofed = md("x-forwarded-for", "198.51.100.7", "x-real-ip", "198.51.100.7", "forwarded", "for=198.51.100.7")

// expectKeys makes each call through s, keyed by a limiter that records
// its keys, and checks its key.
func (x *callRig) expectKeys(s CallScenario, calls ...keyedCall) {
	x.Helper()
	lim, keys := x.keyLimiter()
	s.Limiter = lim
	call := x.serve(s)
	for i, k := range calls {
		what := fmt.Sprintf("call %d from %s with %v", i, k.peer, k.md)
		x.expect(what, x.call(call, Call{Peer: k.peer, Metadata: k.md}), passes(limitKey, "10"))
		if key, n := keys.get(); key != k.key || n != i+1 {
			x.Errorf("%s: keyed %q (call %d keyed), want %q", what, key, n, k.key)
		}
	}
}

func callKeysPeerIP(x *callRig) {
	x.expectKeys(CallScenario{By: ByPeerIP},
		keyedCall{ClientPeer, spoofed, ClientPeer},
		keyedCall{ClientPeer, nil, ClientPeer})
}

func callKeysPeerIPPeers(x *callRig) {
	x.expectKeys(CallScenario{By: ByPeerIP},
		keyedCall{ClientPeer, spoofed, ClientPeer},
		keyedCall{OtherPeer, spoofed, OtherPeer},
		keyedCall{ProxyPeer, nil, ProxyPeer})
}

func callKeysIPUntrusted(x *callRig) {
	x.expectKeys(CallScenario{By: ByIP, IPOptions: []keyfuncs.IPOption{keyfuncs.TrustedProxies("192.0.2.0/24")}},
		keyedCall{ClientPeer, spoofed, ClientPeer},
		keyedCall{ClientPeer, md("x-forwarded-for", "203.0.113.9, 192.0.2.1"), ClientPeer})
}

func callKeysIPTrusted(x *callRig) {
	x.expectKeys(CallScenario{By: ByIP, IPOptions: []keyfuncs.IPOption{keyfuncs.TrustedProxies(ClientPeer + "/32")}},
		keyedCall{ClientPeer, md("x-forwarded-for", "203.0.113.9, 198.51.100.7"), "198.51.100.7"}, // the entry the proxy appended
		// Every value, as one list from the right, the proxy itself skipped.
		keyedCall{ClientPeer, md("x-forwarded-for", "1.1.1.1, 198.51.100.4", "x-forwarded-for", ClientPeer), "198.51.100.4"},
		keyedCall{ClientPeer, md("forwarded", "for=198.51.100.9"), ClientPeer}, // not the proxy header
		keyedCall{ClientPeer, nil, ClientPeer},                                 // no header: the proxy itself
		keyedCall{ClientPeer, md("x-forwarded-for", "2001:db8:1:2::77"), "2001:db8:1:2::/64"})
}

func callKeysIPForwarded(x *callRig) {
	x.expectKeys(CallScenario{By: ByIP, IPOptions: []keyfuncs.IPOption{keyfuncs.TrustedProxies(ClientPeer + "/32"), keyfuncs.ProxyHeader("Forwarded")}},
		keyedCall{ClientPeer, md("forwarded", "for=203.0.113.9, for=198.51.100.7"), "198.51.100.7"},
		keyedCall{ClientPeer, md("x-forwarded-for", "198.51.100.9"), ClientPeer})
}

func callKeysIPPeers(x *callRig) {
	xff := md("x-forwarded-for", "203.0.113.9, 198.51.100.7")
	x.expectKeys(CallScenario{By: ByIP, IPOptions: []keyfuncs.IPOption{keyfuncs.TrustedProxies(ProxyPeer + "/32")}},
		keyedCall{ClientPeer, xff, ClientPeer}, // not the proxy: its metadata is ignored
		keyedCall{OtherPeer, spoofed, OtherPeer},
		keyedCall{ProxyPeer, xff, "198.51.100.7"},
		keyedCall{ProxyPeer, nil, ProxyPeer})
}

func callKeysMetadata(x *callRig) {
	lim, keys := x.keyLimiter()
	call := x.serve(CallScenario{Limiter: lim, By: ByHeader})
	x.expect("secret", x.call(call, as("secret")), passes(limitKey, "10", remainingKey, "9"))
	x.expect("first and second", x.call(call, as("first", KeyMetadata, "second")), passes(limitKey, "10", remainingKey, "9"))
	if key, n := keys.get(); key != "first" || n != 2 {
		x.Errorf("two values: keyed %q (%d keyed), want the first", key, n)
	}
	x.expect("none", x.call(call, as("")), refused(CodeInvalidArgument, limitKey, ""))
	x.expect("empty", x.call(call, as("", KeyMetadata, "")), refused(CodeInvalidArgument, limitKey, ""))
	if _, n := keys.get(); n != 2 {
		x.Errorf("calls without a key were keyed: %d keyed, want 2", n)
	}
	x.expect("secret again", x.call(call, as("secret")), passes(limitKey, "10", remainingKey, "8"))
}

func callMissingKey(x *callRig) {
	call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 2)), Key: defaultKey})
	for i := range 3 {
		x.expect(fmt.Sprintf("no key %d", i), x.call(call, as("")), refused(CodeInvalidArgument, limitKey, "", retryKey, ""))
	}
	x.expect("alice", x.call(call, as("alice")), passes(limitKey, "2", remainingKey, "1"))
	log := x.log.String()
	x.contains("the log", log, "ratekit: requests without a rate-limit key")
	x.contains("the log", log, "failed_requests=3")
}

func callKeyError(x *callRig) {
	call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 10)), Key: secretKey})
	x.expect("alice", x.call(call, as("alice")), passes(limitKey, "10", remainingKey, "9"))
	for i := range 3 {
		x.expect(fmt.Sprintf("db-down %d", i), x.call(call, as("db-down")), refused(CodeInternal, limitKey, ""))
		if n := strings.Count(x.log.String(), "\n"); n != 1 {
			x.Fatalf("db-down %d: %d log lines, want 1 for the episode:\n%s", i, n, x.log.String())
		}
	}
	x.contains("the log", x.log.String(), "ratekit: rate-limit key function failing")
	x.contains("the log", x.log.String(), secret)
	x.expect("alice again", x.call(call, as("alice")), passes(limitKey, "10", remainingKey, "8"))
	x.contains("the log", x.log.String(), "failed_requests=3")
}

func callFailOpen(x *callRig) {
	lim, err := core.NewLimiter(fixed("api", 1), core.WithStore(failing{}), quiet)
	if err != nil {
		x.Fatal(err)
	}
	call := x.serve(CallScenario{Limiter: lim, Key: defaultKey})
	for i := range 3 { // beyond the limit of 1: nothing counts
		x.expect(fmt.Sprintf("call %d", i), x.call(call, as("alice")), passes(limitKey, "", remainingKey, "", retryKey, ""))
	}
}

func callFailClosed(x *callRig) {
	lim, err := core.NewLimiter(fixed("api", 1), core.WithStore(failing{}), core.WithFailClosed(), quiet)
	if err != nil {
		x.Fatal(err)
	}
	call := x.serve(CallScenario{Limiter: lim, Key: defaultKey, Headers: answer.Both})
	for i := range 2 {
		x.expect(fmt.Sprintf("call %d", i), x.call(call, as("alice")), outcome{code: CodeUnavailable, retry: time.Second,
			fields: []string{retryKey, "1", limitKey, "", "ratelimit", ""}})
	}
}

func callCost(x *callRig) {
	var asked atomic.Int32
	call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 5)), Key: defaultKey,
		Cost: func(v string) int { asked.Add(1); return costOf(v) }})
	costing := func(cost string) Call { return as("alice", CostMetadata, cost) }
	x.expect("cost 3 of 5", x.call(call, costing("3")), passes(remainingKey, "2"))
	x.expect("cost 3 of the 2 left", x.call(call, costing("3")), exhausted("api", time.Minute, remainingKey, "2"))
	x.expect("cost 0: the state, not counted", x.call(call, costing("0")), passes(remainingKey, "2"))
	x.expect("cost 6, beyond the capacity", x.call(call, costing("6")), refused(CodeInternal, limitKey, ""))
	x.expect("cost -1", x.call(call, costing("-1")), refused(CodeInternal, limitKey, ""))
	x.expect("cost 2: the errors were not counted", x.call(call, costing("2")), passes(remainingKey, "0"))
	before := asked.Load()
	x.expect("no key", x.call(call, as("", CostMetadata, "1")), refused(CodeInvalidArgument))
	if asked.Load() != before {
		x.Errorf("the cost function was asked for a call without a key")
	}
	log := x.log.String()
	x.contains("the log", log, "ratekit: request cost out of range")
	x.contains("the log", log, "failed_requests=2")
}

func callSkipper(x *callRig) {
	call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 1)), Key: defaultKey, Skip: present})
	for i := range 3 {
		x.expect(fmt.Sprintf("skipped call %d, without a key", i), x.call(call, as("", SkipMetadata, "health")), passes(limitKey, ""))
	}
	x.expect("alice: the skipped calls did not count", x.call(call, as("alice")), passes(limitKey, "1", remainingKey, "0"))
	x.expect("alice again", x.call(call, as("alice")), exhausted("api", time.Minute, retryKey, "60"))
}

func callMethods(x *callRig) {
	for _, c := range []struct {
		methods     []string
		echo, other bool // limited
	}{
		{[]string{MethodEcho}, true, false},
		{[]string{CallService + "/Other"}, false, true}, // without the leading slash
		{[]string{"/" + CallService + "/"}, true, true}, // a service
		{[]string{CallService}, true, true},
		{[]string{CallService + "/"}, true, true},
		{[]string{"/" + CallService}, true, true},
		{[]string{" " + CallService + "/Echo "}, true, false},
		{[]string{MethodEcho, CallService + "/Other"}, true, true},
		{[]string{"/other.Calls/"}, false, false},
		{[]string{MethodEcho[:len(MethodEcho)-1]}, false, false}, // a prefix of a method names none
		{[]string{"/" + CallService[:len(CallService)-1]}, false, false},
		{[]string{""}, false, false},
		{[]string{}, false, false},
	} {
		call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 1)), Key: defaultKey, Methods: c.methods})
		for _, m := range []struct {
			method  string
			limited bool
		}{{MethodEcho, c.echo}, {MethodOther, c.other}} {
			what := fmt.Sprintf("WithMethods(%q): %s", c.methods, m.method)
			first, second, anonymous := passes(limitKey, ""), passes(limitKey, ""), passes(limitKey, "")
			if m.limited {
				first = passes(limitKey, "1", remainingKey, "0")
				second = exhausted("api", time.Minute, limitKey, "1")
				anonymous = refused(CodeInvalidArgument)
			}
			client := "client-of-" + m.method // the methods' counts apart
			x.expect(what+", first call", x.call(call, Call{Method: m.method, Metadata: md(KeyMetadata, client)}), first)
			x.expect(what+", second call", x.call(call, Call{Method: m.method, Metadata: md(KeyMetadata, client)}), second)
			x.expect(what+", without a key", x.call(call, Call{Method: m.method}), anonymous)
		}
	}
}

func callDecision(x *callRig) {
	call := x.serve(CallScenario{Limiter: x.limiter(fixed("api", 3)), Key: defaultKey, DecisionInContext: true})
	x.at(20 * time.Second)
	for i := range 3 {
		o := passes(remainingKey, itoa(2-i))
		o.reply = "allowed=true name=api quota=3 remaining=" + itoa(2-i) +
			" window=1m0s reset=40s retry=0s delay=0s soft=false shadow=false granted=false elastic=false"
		x.expect(fmt.Sprintf("call %d", i), x.call(call, as("alice")), o)
	}
	x.expect("call 3", x.call(call, as("alice")), exhausted("api", 40*time.Second))

	// Without the option, none.
	call = x.serve(CallScenario{Limiter: x.limiter(fixed("api", 3)), Key: defaultKey})
	x.expect("without the option", x.call(call, as("alice")), passes(remainingKey, "2"))
}

func callPanics(x *callRig) {
	lim := x.limiter(fixed("api", 1))
	for _, c := range []struct {
		what string
		s    CallScenario
	}{
		{"a nil limiter", CallScenario{Key: defaultKey}},
		{"a nil key function", CallScenario{Limiter: lim}},
		{"Rules with a nil engine", CallScenario{Rules: true}},
	} {
		if !panics(func() { x.serve(c.s) }) {
			x.Errorf("%s did not panic", c.what)
		}
	}
}

// CodeOf returns the code of the answer to a call that an HTTP adapter
// answers with status: OK for 200, ResourceExhausted for 429 (a
// rejection), Unavailable for 503 (the store failed under a fail-closed
// limiter), InvalidArgument for 400 (no key), Internal for 500 (a failing
// key or plan function, a cost out of range), and "" for any other.
func CodeOf(status int) string {
	switch status {
	case http.StatusOK:
		return CodeOK
	case http.StatusTooManyRequests:
		return CodeResourceExhausted
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusInternalServerError:
		return CodeInternal
	}
	return ""
}

// sameAsHTTP runs the case tc of Run as calls through x's mount and as
// requests through stdhttp's middleware, and fails the test where the two
// disagree (see the HTTP parity of RunCalls).
func sameAsHTTP(x *callRig, tc testCase) {
	key := tc.key
	if key == nil {
		key = defaultKey
	}
	lims := []*core.Limiter{newLimiter(x.T, tc, x.clock), newLimiter(x.T, tc, x.clock)}
	var referenceLog SyncBuffer
	call := x.serve(CallScenario{Limiter: lims[0], Key: key, Headers: tc.headers, DecisionInContext: tc.decision})
	reference := stdhttpServe(Setup{Limiter: lims[1], Key: key, Headers: tc.headers, Logger: NewLogger(&referenceLog), DecisionInContext: tc.decision})
	for i, rq := range tc.requests {
		x.clock.Set(epoch.Add(rq.at))
		if do := tc.before[i]; do != nil {
			do(x.T, lims)
		}
		want := read(x.T, reference(newRequest(rq)))
		got := x.call(call, as(rq.client))
		what := fmt.Sprintf("call %d (client %q), as stdhttp's %d", i, rq.client, want.status)
		if code := CodeOf(want.status); got.Code != code {
			x.Fatalf("%s: %s %q, want %s", what, got.Code, got.Message, code)
		}
		if got.Code == CodeOK && got.Reply != want.body {
			x.Errorf("%s: reply %q, want the body %q", what, got.Reply, want.body)
		}
		for _, f := range Fields {
			if f == "Cache-Control" {
				continue
			}
			if w, g := want.header.Values(f), got.Header[strings.ToLower(f)]; !slices.Equal(w, g) {
				x.Errorf("%s: %s %q, want %q", what, strings.ToLower(f), g, w)
			}
		}
		rejected := want.status == http.StatusTooManyRequests || want.status == http.StatusServiceUnavailable
		if got.RetryInfo != rejected {
			x.Errorf("%s: RetryInfo %t, want %t", what, got.RetryInfo, rejected)
		}
		if ra := want.header.Get(answer.HeaderRetryAfter); rejected && ra != strconv.FormatInt(ceilSeconds(got.RetryDelay), 10) {
			x.Errorf("%s: RetryInfo's delay %v, want within the second before Retry-After %s", what, got.RetryDelay, ra)
		}
		if want.status == http.StatusTooManyRequests {
			var p struct{ Limit string }
			if err := json.Unmarshal([]byte(want.body), &p); err != nil {
				x.Fatalf("%s: stdhttp's body %q: %v", what, want.body, err)
			}
			if len(got.QuotaFailure) != 1 || got.QuotaFailure[0].Subject != p.Limit {
				x.Errorf("%s: QuotaFailure %v, want one violation of %q", what, got.QuotaFailure, p.Limit)
			}
		}
		if w, g := referenceLog.String(), x.log.String(); w != g {
			x.Fatalf("%s: logged\n%s\nwant (as stdhttp)\n%s", what, g, w)
		}
	}
}
