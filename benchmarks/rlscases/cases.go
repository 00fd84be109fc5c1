package rlscases

import (
	"math"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
)

// RunToken, inside an entry's value, is replaced by a value fresh for every
// attempt of a case, so that the case finds no counters of earlier runs.
const RunToken = "{run}"

// Code is the code of an answer or of one descriptor's status.
type Code = rlsv3.RateLimitResponse_Code

// Unit is the time unit of a limit.
type Unit = rlsv3.RateLimitResponse_RateLimit_Unit

// The codes and units the cases use.
const (
	OK        = rlsv3.RateLimitResponse_OK
	OverLimit = rlsv3.RateLimitResponse_OVER_LIMIT

	Second = rlsv3.RateLimitResponse_RateLimit_SECOND
	Minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	Hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	Day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

// Unlimited is the limit_remaining of a descriptor whose rule is
// unlimited: the largest uint32.
const Unlimited = math.MaxUint32

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is one descriptor of a request.
type Descriptor struct {
	Entries []Entry
	// HitsAddend, if not nil, is the descriptor's own hits_addend, which
	// takes the place of the request's; zero checks without counting.
	HitsAddend *uint64
	// Override, if not nil, is sent as the descriptor's limit override
	// (its Name is not sent).
	Override *Limit
}

// Request is one ShouldRateLimit call.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// HitsAddend is the request's hits_addend; zero means one.
	HitsAddend uint32
}

// Limit is a current limit in an answer, or a limit override in a
// request.
type Limit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Name            string
}

// Status is the expected status of one descriptor.
type Status struct {
	Code Code
	// Limit is the expected current_limit; nil when no rule applies (then
	// duration_until_reset must be absent too).
	Limit     *Limit
	Remaining uint32
}

// Answer is the expected outcome of one call.
type Answer struct {
	// Error, if not codes.OK, is the gRPC status code the call fails
	// with; the other fields but Message are then not used.
	Error codes.Code
	// Message, if not empty, is the message the call fails with.
	Message  string
	Overall  Code
	Statuses []Status
}

// Step is a request sent len(Want) times in a row.
type Step struct {
	Request Request
	// Want holds the reference's answer to each repetition.
	Want []Answer
	// Ratekit, if not nil, holds ratekit's documented answers, one per
	// repetition, where they differ from Want.
	Ratekit []Answer
}

// Case is a named list of steps, played in order on fresh counters.
type Case struct {
	Name string
	// From tells where the case comes from: a test of the reference, or
	// ratekit's own list.
	From  string
	Steps []Step
	// Reason explains a listed difference: why ratekit's answers (the
	// steps' Ratekit fields) are not the reference's.
	Reason string
}

// Listed reports whether the case has ratekit answers that differ from the
// reference's.
func (c Case) Listed() bool {
	for _, s := range c.Steps {
		if s.Ratekit != nil {
			return true
		}
	}
	return false
}

// fromReference marks the cases taken from the reference's integration
// tests.
const fromReference = "reference test/integration testBasicBaseConfig"

// fromRatekit marks ratekit's own cases.
const fromRatekit = "ratekit"

// allOrNothing is the reason of the listed differences that come from
// ratekit not counting a request that is over the limit.
const allOrNothing = "all-or-nothing: ratekit counts a request that is over the limit on one descriptor on none of them; " +
	"the reference counts every hit, the rejected ones too"

// invalidArgument is the reason of the listed differences on requests
// without a domain or without descriptors.
const invalidArgument = "error code: ratekit fails a request without a domain or without descriptors with INVALID_ARGUMENT, " +
	"the reference with UNKNOWN, both with the reference's message; Envoy never sends such a request, " +
	"and INVALID_ARGUMENT is the gRPC code of a malformed request"

// The reference's messages for a request without a domain or without
// descriptors.
const (
	msgNoDomain      = "rate limit domain must not be empty"
	msgNoDescriptors = "rate limit descriptor list must not be empty"
)

// Cases returns the cases, in the order Run should play them. Each call
// returns new values, which the caller may change.
func Cases() []Case {
	return []Case{
		{
			Name: "unknown-domain-foo",
			From: fromReference,
			Steps: []Step{{
				Request: req("foo", d("hello", "world")),
				Want:    []Answer{answer(OK, none())},
			}},
		},
		{
			Name: "basic-key1-per-second",
			From: fromReference,
			Steps: []Step{{
				Request: req("basic", d("key1", RunToken)),
				Want:    []Answer{answer(OK, ok(lim(50, Second), 49))},
			}},
		},
		{
			Name: "another-key2-25-of-20",
			From: fromReference,
			Steps: []Step{{
				Request: req("another", d("key2", RunToken)),
				Want: repeat(25, func(i int) Answer {
					if i >= 20 {
						return answer(OverLimit, over(lim(20, Minute)))
					}
					return answer(OK, ok(lim(20, Minute), uint32(20-(i+1))))
				}),
			}},
		},
		twoDescriptorLoop(),
		{
			Name: "another-key4-per-day",
			From: fromReference,
			Steps: []Step{{
				Request: req("another", d("key4", RunToken)),
				Want: []Answer{
					answer(OK, ok(lim(20, Day), 19)),
					answer(OK, ok(lim(20, Day), 18)),
				},
			}},
		},
		{
			Name: "unknown-domain-two-descriptors",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("no-such-domain", d("a", RunToken), d("b", "x")),
				Want:    []Answer{answer(OK, none(), none())},
			}},
		},
		{
			Name: "no-rule-matches",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("cases", d("nothing", RunToken)),
				Want:    []Answer{answer(OK, none())},
			}},
		},
		{
			Name: "unlimited",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("cases", d("free", RunToken)),
				Want:    repeat(3, func(int) Answer { return answer(OK, unlimited()) }),
			}},
		},
		{
			Name: "mixed-unlimited-unmatched-limited",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("cases", d("free", RunToken), d("nothing", "x"), d("cost", RunToken)),
				Want: []Answer{
					answer(OK, unlimited(), none(), ok(lim(10, Minute), 9)),
					answer(OK, unlimited(), none(), ok(lim(10, Minute), 8)),
				},
			}},
		},
		{
			Name: "shadow-mode",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("cases", d("shadow", RunToken)),
				Want: []Answer{
					answer(OK, ok(lim(2, Minute), 1)),
					answer(OK, ok(lim(2, Minute), 0)),
					// Over the limit, answered OK: the status keeps
					// the over-limit remaining of zero.
					answer(OK, ok(lim(2, Minute), 0)),
					answer(OK, ok(lim(2, Minute), 0)),
				},
			}},
		},
		{
			Name: "shadow-over-beside-counted",
			From: fromRatekit,
			Steps: []Step{
				{
					Request: req("cases", d("shadow", RunToken)),
					Want: []Answer{
						answer(OK, ok(lim(2, Minute), 1)),
						answer(OK, ok(lim(2, Minute), 0)),
					},
				},
				{
					// The shadow descriptor is over its limit, the
					// request is let through: the other descriptor
					// counts it.
					Request: req("cases", d("shadow", RunToken), d("cost", RunToken)),
					Want:    []Answer{answer(OK, ok(lim(2, Minute), 0), ok(lim(10, Minute), 9))},
				},
				{
					Request: req("cases", d("cost", RunToken)),
					Want:    []Answer{answer(OK, ok(lim(10, Minute), 8))},
				},
			},
		},
		{
			Name: "replaces",
			From: fromRatekit,
			Steps: []Step{
				{
					// base_limit is replaced by premium's limit: no
					// limit applies to the first descriptor, and it is
					// not counted.
					Request: req("cases", d("base", RunToken), d("premium", RunToken)),
					Want: repeat(3, func(i int) Answer {
						return answer(OK, none(), ok(lim(5, Minute), uint32(5-(i+1))))
					}),
				},
				{
					Request: req("cases", d("base", RunToken)),
					Want: []Answer{
						answer(OK, ok(named(1, Minute, "base_limit"), 0)),
						answer(OverLimit, over(named(1, Minute, "base_limit"))),
					},
				},
			},
		},
		{
			Name: "hits-addend-request",
			From: fromRatekit,
			Steps: []Step{
				{
					Request: withHits(req("cases", d("cost", RunToken)), 4),
					Want: []Answer{
						answer(OK, ok(lim(10, Minute), 6)),
						answer(OK, ok(lim(10, Minute), 2)),
						answer(OverLimit, over(lim(10, Minute))),
					},
				},
				{
					// The reference counted the rejected 4 hits: 12 of
					// 10 are used. Ratekit did not: 8 of 10.
					Request: req("cases", d("cost", RunToken)),
					Want: []Answer{
						answer(OverLimit, over(lim(10, Minute))),
						answer(OverLimit, over(lim(10, Minute))),
					},
					Ratekit: []Answer{
						answer(OK, ok(lim(10, Minute), 1)),
						answer(OK, ok(lim(10, Minute), 0)),
					},
				},
			},
			Reason: allOrNothing + " (here the rejected hits_addend of 4 leaves 8 of 10 used, not 12)",
		},
		{
			Name: "hits-addend-descriptor",
			From: fromRatekit,
			Steps: []Step{
				{
					// The descriptor's own hits_addend (3) wins over
					// the request's (2).
					Request: withHits(req("cases", dh(3, "cost", RunToken+"-a"), d("cost", RunToken+"-b")), 2),
					Want:    []Answer{answer(OK, ok(lim(10, Minute), 7), ok(lim(10, Minute), 8))},
				},
				{
					// hits_addend 0 on the descriptor: checked, not
					// counted.
					Request: req("cases", dh(0, "cost", RunToken+"-a")),
					Want:    repeat(2, func(int) Answer { return answer(OK, ok(lim(10, Minute), 7)) }),
				},
				{
					Request: req("cases", dh(8, "cost", RunToken+"-a")),
					Want:    []Answer{answer(OverLimit, over(lim(10, Minute)))},
				},
				{
					Request: req("cases", dh(0, "cost", RunToken+"-a")),
					Want:    []Answer{answer(OverLimit, over(lim(10, Minute)))},
					Ratekit: []Answer{answer(OK, ok(lim(10, Minute), 7))},
				},
			},
			Reason: allOrNothing + " (the rejected hits_addend of 8 leaves 3 of 10 used, not 11)",
		},
		{
			Name: "wildcard-value",
			From: fromRatekit,
			Steps: []Step{
				{
					Request: req("cases", d("path", "api/"+RunToken)),
					Want: []Answer{
						answer(OK, ok(lim(3, Minute), 2)),
						answer(OK, ok(lim(3, Minute), 1)),
						answer(OK, ok(lim(3, Minute), 0)),
						answer(OverLimit, over(lim(3, Minute))),
					},
				},
				{
					// Another value under the same wildcard has a
					// counter of its own.
					Request: req("cases", d("path", "api/"+RunToken+"/other")),
					Want:    []Answer{answer(OK, ok(lim(3, Minute), 2))},
				},
				{
					// Not under the prefix: the key-only rule.
					Request: req("cases", d("path", "web/"+RunToken)),
					Want: []Answer{
						answer(OK, ok(lim(1, Minute), 0)),
						answer(OverLimit, over(lim(1, Minute))),
					},
				},
			},
		},
		{
			Name: "nested-value-before-key",
			From: fromRatekit,
			Steps: []Step{
				{
					Request: req("cases", d("tenant", RunToken, "tier", "gold")),
					Want:    []Answer{answer(OK, ok(lim(3, Minute), 2))},
				},
				{
					Request: req("cases", d("tenant", RunToken, "tier", "bronze")),
					Want:    []Answer{answer(OK, ok(lim(1, Minute), 0))},
				},
				{
					// The first level alone has no rule.
					Request: req("cases", d("tenant", RunToken)),
					Want:    []Answer{answer(OK, none())},
				},
			},
		},
		{
			Name: "nested-limit-where-descriptor-ends",
			From: fromRatekit,
			Steps: []Step{
				{
					Request: req("cases", d("org", RunToken)),
					Want:    []Answer{answer(OK, ok(lim(2, Minute), 1))},
				},
				{
					Request: req("cases", d("org", RunToken, "user", "u1")),
					Want:    repeat(2, func(i int) Answer { return answer(OK, ok(lim(5, Minute), uint32(5-(i+1)))) }),
				},
				{
					// The second level did not count on the first.
					Request: req("cases", d("org", RunToken)),
					Want:    []Answer{answer(OK, ok(lim(2, Minute), 0))},
				},
				{
					// Deeper than the configuration: no rule.
					Request: req("cases", d("org", RunToken, "user", "u1", "extra", "x")),
					Want:    []Answer{answer(OK, none())},
				},
			},
		},
		{
			Name: "limit-override",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("cases", Descriptor{
					Entries:  []Entry{{"ovr", RunToken}},
					Override: lim(3, Minute),
				}),
				Want: []Answer{
					answer(OK, ok(lim(3, Minute), 2)),
					answer(OK, ok(lim(3, Minute), 1)),
					answer(OK, ok(lim(3, Minute), 0)),
					answer(OverLimit, over(lim(3, Minute))),
				},
			}},
		},
		{
			Name: "descriptor-without-entries",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("basic", Descriptor{}),
				Want:    []Answer{answer(OK, none())},
			}},
		},
		{
			Name: "empty-descriptor-list",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("basic"),
				Want:    []Answer{{Error: codes.Unknown, Message: msgNoDescriptors}},
				Ratekit: []Answer{{Error: codes.InvalidArgument, Message: msgNoDescriptors}},
			}},
			Reason: invalidArgument,
		},
		{
			Name: "empty-domain",
			From: fromRatekit,
			Steps: []Step{{
				Request: req("", d("key1", RunToken)),
				Want:    []Answer{{Error: codes.Unknown, Message: msgNoDomain}},
				Ratekit: []Answer{{Error: codes.InvalidArgument, Message: msgNoDomain}},
			}},
			Reason: invalidArgument,
		},
	}
}

// twoDescriptorLoop is the reference test's loop on two descriptors of
// domain "another": key2 (20 a minute) and key3 (10 an hour), 15 times.
// From the 11th call key3 is over its limit; the reference still counts
// the call on key2, ratekit does not.
func twoDescriptorLoop() Case {
	want := make([]Answer, 15)
	alt := make([]Answer, 15)
	for i := range want {
		key2 := ok(lim(20, Minute), uint32(20-(i+1)))
		key3 := ok(lim(10, Hour), uint32(10-(i+1)))
		if i < 10 {
			want[i] = answer(OK, key2, key3)
			alt[i] = want[i]
			continue
		}
		want[i] = answer(OverLimit, key2, over(lim(10, Hour)))
		alt[i] = answer(OverLimit, ok(lim(20, Minute), 10), over(lim(10, Hour)))
	}
	return Case{
		Name: "another-key2-key3-15",
		From: fromReference,
		Steps: []Step{{
			Request: req("another", d("key2", RunToken), d("key3", RunToken)),
			Want:    want,
			Ratekit: alt,
		}},
		Reason: allOrNothing + " (the reference with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true answers as ratekit here)",
	}
}

// req returns a request of the domain with the descriptors.
func req(domain string, ds ...Descriptor) Request {
	return Request{Domain: domain, Descriptors: ds}
}

// withHits returns r with the request's hits_addend set.
func withHits(r Request, hits uint32) Request {
	r.HitsAddend = hits
	return r
}

// d returns a descriptor of key/value pairs.
func d(kv ...string) Descriptor {
	var e []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		e = append(e, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return Descriptor{Entries: e}
}

// dh returns a descriptor of key/value pairs with its own hits_addend.
func dh(hits uint64, kv ...string) Descriptor {
	desc := d(kv...)
	desc.HitsAddend = &hits
	return desc
}

// lim returns a limit without a name.
func lim(n uint32, u Unit) *Limit {
	return &Limit{RequestsPerUnit: n, Unit: u}
}

// named returns a limit with a name.
func named(n uint32, u Unit, name string) *Limit {
	return &Limit{RequestsPerUnit: n, Unit: u, Name: name}
}

// ok is a descriptor under its limit with remaining left.
func ok(l *Limit, remaining uint32) Status {
	return Status{Code: OK, Limit: l, Remaining: remaining}
}

// over is a descriptor over its limit.
func over(l *Limit) Status {
	return Status{Code: OverLimit, Limit: l}
}

// none is a descriptor no rule applies to.
func none() Status {
	return Status{Code: OK}
}

// unlimited is a descriptor whose rule is unlimited.
func unlimited() Status {
	return Status{Code: OK, Remaining: Unlimited}
}

// answer is a successful call's answer.
func answer(overall Code, statuses ...Status) Answer {
	return Answer{Overall: overall, Statuses: statuses}
}

// repeat returns n answers made by f.
func repeat(n int, f func(i int) Answer) []Answer {
	out := make([]Answer, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}
