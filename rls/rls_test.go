package rls_test

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// start is 20.3 s into a minute and 800.3 s into an hour: a minute
// window resets in 39.7 s (40 in whole seconds), an hour window in
// 2,799.7 s (2,800), a second window in 0.7 s (1).
var start = time.Unix(1_700_000_000, 300_000_000)

// The configs of the tests: Envoy's integration test's domains, in our
// words, and a few of ratekit's.
const (
	basicYAML = `
domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
`
	anotherYAML = `
domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token-bucket}
  - key: soft
    rate_limit: {unit: minute, requests_per_unit: 2, soft_percent: 50}
  - key: general
    rate_limit: {name: general, unit: minute, requests_per_unit: 1}
  - key: special
    rate_limit: {name: special, unit: minute, requests_per_unit: 3, replaces: [{name: general}]}
`
)

// env is a Service on a real gRPC server, over engines whose memory store
// runs on a stopped clock.
type env struct {
	clock  *storetest.Clock
	store  *core.MemoryStore
	client rlspb.RateLimitServiceClient
	svc    *rls.Service
}

func newEnv(t *testing.T, opts ...rls.Option) *env {
	t.Helper()
	clock := storetest.NewClock(start)
	store := &core.MemoryStore{Clock: clock.Now}
	var engines []*rules.Engine
	for _, y := range []string{basicYAML, anotherYAML} {
		cfg, err := rulesfile.Parse("test.yaml", []byte(y))
		require.NoError(t, err)
		e, err := rules.NewEngine(rules.WithStore(store), rules.WithAnyKey())
		require.NoError(t, err)
		require.NoError(t, e.Load(cfg))
		engines = append(engines, e)
	}
	svc, err := rls.New(engines, opts...)
	require.NoError(t, err)
	return &env{clock: clock, store: store, client: serve(t, svc), svc: svc}
}

func serve(t *testing.T, svc *rls.Service) rlspb.RateLimitServiceClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	svc.Register(srv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// req builds a request of one or more descriptors, each given as
// key, value pairs.
func req(domain string, hits uint32, descs ...[]string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, kv := range descs {
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

func (e *env) call(t *testing.T, r *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), r)
	require.NoError(t, err)
	return resp
}

// status builds a descriptor status with a limit.
func st(code rlspb.RateLimitResponse_Code, rpu uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, remaining uint32, reset int64) *rlspb.RateLimitResponse_DescriptorStatus {
	return &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(time.Duration(reset) * time.Second),
	}
}

const (
	ok     = rlspb.RateLimitResponse_OK
	over   = rlspb.RateLimitResponse_OVER_LIMIT
	second = rlspb.RateLimitResponse_RateLimit_SECOND
	minute = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour   = rlspb.RateLimitResponse_RateLimit_HOUR
)

func equal(t *testing.T, want, got *rlspb.RateLimitResponse, msg ...any) {
	t.Helper()
	if !proto.Equal(want, got) {
		t.Fatalf("%v\nwant %v\n got %v", msg, want, got)
	}
}

func TestEnvoyBasicCases(t *testing.T) {
	e := newEnv(t)

	// A domain that no config has: OK, no limit.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}}},
		e.call(t, req("foo", 1, []string{"hello", "world"})))

	// 50 per second: 49 remain, the second ends in 0.7 s: 1.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 50, second, 49, 1)}},
		e.call(t, req("basic", 1, []string{"key1", "foo"})))

	// 20 per minute, 25 requests: the 21st on are over.
	for i := range 25 {
		want := st(ok, 20, minute, uint32(20-(i+1)), 40)
		code := ok
		if i >= 20 {
			want, code = st(over, 20, minute, 0, 40), over
		}
		equal(t, &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{want}},
			e.call(t, req("another", 1, []string{"key2", "7"})), "request", i)
	}

	// Two descriptors, 20/minute and 10/hour: from the 11th, the hour is
	// over, and the minute, counted by none of the rejected requests,
	// stays at 10 remaining (the Envoy service, counting every
	// descriptor, goes on to 5).
	for i := range 15 {
		s1, s2, code := st(ok, 20, minute, uint32(20-(i+1)), 40), st(ok, 10, hour, uint32(10-(i+1)), 2800), ok
		if i >= 10 {
			s1, s2, code = st(ok, 20, minute, 10, 40), st(over, 10, hour, 0, 2800), over
		}
		equal(t, &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{s1, s2}},
			e.call(t, req("another", 1, []string{"key2", "8"}, []string{"key3", "8"})), "request", i)
	}

	// The reset counts down with the clock, in whole seconds.
	e.clock.Advance(2 * time.Second)
	assert.Equal(t, int64(38), e.call(t, req("another", 1, []string{"key2", "9"})).Statuses[0].DurationUntilReset.GetSeconds())
}

func TestUnlimitedUnmatchedShadowReplaces(t *testing.T) {
	e := newEnv(t)
	resp := e.call(t, req("another", 1, []string{"free", "x"}, []string{"nothing", "x"}))
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
		{Code: ok, LimitRemaining: math.MaxUint32}, {Code: ok},
	}}, resp)

	// shadow_mode: 1 per minute; the second request would be over, and
	// passes: OK, 0 remaining.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 1, minute, 0, 40)}},
		e.call(t, req("another", 1, []string{"watched", "a"})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 1, minute, 0, 40)}},
		e.call(t, req("another", 1, []string{"watched", "a"})))

	// special replaces general: with both, general (1 per minute) is not
	// counted; 3 requests pass special's 3.
	for i := range 3 {
		sp := st(ok, 3, minute, uint32(2-i), 40)
		sp.CurrentLimit.Name = "special"
		equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}, sp}},
			e.call(t, req("another", 1, []string{"general", "g"}, []string{"special", "g"})), "request", i)
	}
	gen := st(ok, 1, minute, 0, 40)
	gen.CurrentLimit.Name = "general"
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{gen}},
		e.call(t, req("another", 1, []string{"general", "g"})), "general alone counts, and was not counted before")
}

func TestHitsAddend(t *testing.T) {
	e := newEnv(t)
	// 5 per minute. Cost 3: 2 remain; cost 3 again: over (3 > 2), and
	// nothing counted; cost 2: 0 remain.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 5, minute, 2, 40)}},
		e.call(t, req("another", 3, []string{"small", "s"})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(over, 5, minute, 0, 40)}},
		e.call(t, req("another", 3, []string{"small", "s"})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 5, minute, 0, 40)}},
		e.call(t, req("another", 2, []string{"small", "s"})))

	// A cost above the limit is over it, without asking the store; the
	// other descriptor is reported as it stands, not counted. Keys with
	// no count have nothing to reset: 0 s.
	equal(t, &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
		st(over, 5, minute, 0, 0), st(ok, 20, minute, 20, 0),
	}}, e.call(t, req("another", 6, []string{"small", "t"}, []string{"key2", "t"})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
		st(over, 5, minute, 0, 40),
	}}, e.call(t, req("another", 6, []string{"small", "s"})), "a key with a count: its window's end")

	// A descriptor's own hits_addend: 0 checks without counting.
	r := req("another", 1, []string{"small", "u"}, []string{"key2", "u"})
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(4)
	r.Descriptors[1].HitsAddend = wrapperspb.UInt64(0)
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
		st(ok, 5, minute, 1, 40), st(ok, 20, minute, 20, 0),
	}}, e.call(t, r))
}

func TestOtherAlgorithms(t *testing.T) {
	e := newEnv(t)
	// A token bucket of 2 per minute: two pass, the third is over; 30 s
	// later one token is back. Its reset is the time to refill.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 2, minute, 1, 30)}},
		e.call(t, req("another", 1, []string{"bucket", "b"})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 2, minute, 0, 60)}},
		e.call(t, req("another", 1, []string{"bucket", "b"})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(over, 2, minute, 0, 60)}},
		e.call(t, req("another", 1, []string{"bucket", "b"})))
	e.clock.Advance(30 * time.Second)
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 2, minute, 0, 60)}},
		e.call(t, req("another", 1, []string{"bucket", "b"})))
}

func TestGlobalShadowAndHeaders(t *testing.T) {
	e := newEnv(t, rls.WithShadow(), rls.WithResponseHeaders("", "", ""))
	for range 5 {
		e.call(t, req("another", 1, []string{"small", "h"}))
	}
	resp := e.call(t, req("another", 1, []string{"small", "h"}, []string{"key2", "h"}))
	assert.Equal(t, ok, resp.OverallCode, "shadow mode: never over overall")
	assert.Equal(t, over, resp.Statuses[0].Code, "the status still says over")
	var hs []string
	for _, h := range resp.ResponseHeadersToAdd {
		hs = append(hs, h.Key+": "+h.Value)
	}
	assert.Equal(t, []string{"RateLimit-Limit: 5", "RateLimit-Remaining: 0", "RateLimit-Reset: 40"}, hs, "of the descriptor over its limit")

	resp = e.call(t, req("another", 1, []string{"key2", "k"}, []string{"key3", "k"}))
	hs = hs[:0]
	for _, h := range resp.ResponseHeadersToAdd {
		hs = append(hs, h.Key+": "+h.Value)
	}
	assert.Equal(t, []string{"RateLimit-Limit: 10", "RateLimit-Remaining: 9", "RateLimit-Reset: 2800"}, hs, "of the descriptor closest to its limit")

	_, err := rls.New(nil, rls.WithResponseHeaders("X Bad", "", ""))
	assert.Error(t, err)
}

func TestLimitOverride(t *testing.T) {
	e := newEnv(t, rls.WithLimitOverrides(&core.MemoryStore{Clock: storetest.NewClock(start).Now}))
	r := req("another", 1, []string{"key2", "o"})
	r.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 2, hour, 1, 2800)}}, e.call(t, r))
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 2, hour, 0, 2800)}}, e.call(t, r))
	equal(t, &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(over, 2, hour, 0, 2800)}}, e.call(t, r))
	// Without the override, key2's own limit, uncounted so far.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 20, minute, 19, 40)}},
		e.call(t, req("another", 1, []string{"key2", "o"})))

	// Without WithLimitOverrides, the override is ignored.
	plain := newEnv(t)
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 20, minute, 19, 40)}}, plain.call(t, r))
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	_, err := e.client.ShouldRateLimit(context.Background(), req("", 1, []string{"key1", "x"}))
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = e.client.ShouldRateLimit(context.Background(), req("basic", 1))
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	// An empty value counts under a key of its own.
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 50, second, 49, 1)}},
		e.call(t, req("basic", 1, []string{"key1", ""})))
	equal(t, &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(ok, 50, second, 48, 1)}},
		e.call(t, req("basic", 1, []string{"key1", ""})))

	_, err = rls.New([]*rules.Engine{nil})
	assert.Error(t, err)
}

// TestSoftThrottling: 2 a minute and 50% more softly: the third request
// passes with X-Ratelimit-Soft, the fourth is over.
func TestSoftThrottling(t *testing.T) {
	e := newEnv(t)
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, ok, over} {
		resp := e.call(t, req("another", 1, []string{"soft", "s"}))
		assert.Equal(t, want, resp.OverallCode, "request %d", i+1)
		var soft bool
		for _, h := range resp.ResponseHeadersToAdd {
			soft = soft || h.Key == "X-Ratelimit-Soft" && h.Value == "true"
		}
		assert.Equal(t, i == 2, soft, "request %d", i+1)
	}
}
