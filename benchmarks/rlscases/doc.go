// Package rlscases holds behaviour cases for servers of Envoy's rate limit
// service (envoy.service.ratelimit.v3.RateLimitService) and plays them
// against any such server over gRPC.
//
// A Case is data: a list of Steps, each a Request (domain, descriptors
// made of key/value entries, optional hits_addend per request and per
// descriptor) sent len(Want) times, with the Answer expected for every
// repetition: a gRPC error code and message, or the overall code and,
// per descriptor, the code, the current limit (requests per unit, unit,
// name) and the limit remaining. duration_until_reset is checked to be within the unit
// (0 < d <= unit) when a limit is expected, and absent otherwise.
//
// Want is what the reference service, envoyproxy/ratelimit, answers (the
// cases were checked against it). Where ratekit's documented semantics
// differ, a step also holds the Ratekit answers and the case a Reason: a
// listed difference. Ratekit counts a request that is over the limit on
// one descriptor on none of them (all-or-nothing); the reference counts
// every hit, also the rejected ones. And ratekit fails a request without
// a domain or without descriptors with INVALID_ARGUMENT, the reference
// with UNKNOWN, both with the same message.
//
// The cases need the configuration in testdata (WriteConfig writes it into
// a service's configuration directory): domains "basic" and "another"
// carry the descriptors and limits of the reference's integration tests
// (test/integration, testBasicBaseConfig), domain "cases" those of
// ratekit's own cases, and "reload" the file the reload check adds
// (RunReload). Values in requests may hold the token RunToken, replaced by
// a fresh value on every attempt, so that a case always starts with empty
// counters.
//
// Run plays cases on a connection and returns the differences; package
// rlsproc starts the services and Redis for it, and the command
// benchmarks/cmd/rlscompare runs the cases, a load comparison and a burst
// test on the services side by side. The package's tests play every case
// on package rls wired as ratekit serve wires it, in process, on a real
// redis-server, and fail on any difference that is not listed or a listed
// one that went away; with RATEKIT_REFERENCE or RATEKIT_SERVE naming a
// binary they play the cases and the reload check on it too.
package rlscases
