package rlscases

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/benchmarks/rlscases/rlsproc"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// response builds an answer of a service.
func response(overall Code, statuses ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: statuses}
}

// status builds one descriptor status of an answer; reset 0 leaves
// duration_until_reset out.
func descStatus(code Code, limit *rlsv3.RateLimitResponse_RateLimit, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: limit, LimitRemaining: remaining}
	if reset != 0 {
		s.DurationUntilReset = durationpb.New(reset)
	}
	return s
}

func TestCompare(t *testing.T) {
	perMinute := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 20, Unit: Minute}
	want := answer(OK, ok(lim(20, Minute), 19), none())
	tests := []struct {
		name   string
		want   Answer
		resp   *rlsv3.RateLimitResponse
		err    error
		fields []string // substrings, one per expected difference
	}{
		{
			name: "equal",
			want: want,
			resp: response(OK, descStatus(OK, perMinute, 19, 30*time.Second), descStatus(OK, nil, 0, 0)),
		},
		{
			name:   "remaining",
			want:   want,
			resp:   response(OK, descStatus(OK, perMinute, 18, 30*time.Second), descStatus(OK, nil, 0, 0)),
			fields: []string{"statuses[0].limit_remaining: got 18, want 19"},
		},
		{
			name:   "overall and code",
			want:   want,
			resp:   response(OverLimit, descStatus(OverLimit, perMinute, 19, 30*time.Second), descStatus(OK, nil, 0, 0)),
			fields: []string{"overall_code", "statuses[0].code"},
		},
		{
			name:   "reset beyond the unit",
			want:   want,
			resp:   response(OK, descStatus(OK, perMinute, 19, 61*time.Second), descStatus(OK, nil, 0, 0)),
			fields: []string{"statuses[0].duration_until_reset: got 1m1s"},
		},
		{
			name:   "reset missing",
			want:   want,
			resp:   response(OK, descStatus(OK, perMinute, 19, 0), descStatus(OK, nil, 0, 0)),
			fields: []string{"statuses[0].duration_until_reset: got none"},
		},
		{
			name:   "limit where none applies",
			want:   want,
			resp:   response(OK, descStatus(OK, perMinute, 19, 30*time.Second), descStatus(OK, perMinute, 0, 30*time.Second)),
			fields: []string{"statuses[1].current_limit: got 20/MINUTE, want none", "statuses[1].duration_until_reset"},
		},
		{
			name:   "other limit",
			want:   want,
			resp:   response(OK, descStatus(OK, &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 20, Unit: Hour}, 19, 30*time.Second), descStatus(OK, nil, 0, 0)),
			fields: []string{"statuses[0].current_limit: got 20/HOUR, want 20/MINUTE"},
		},
		{
			name:   "name",
			want:   answer(OK, ok(named(1, Minute, "base_limit"), 0)),
			resp:   response(OK, descStatus(OK, perMinute1(), 0, time.Second)),
			fields: []string{`statuses[0].current_limit.name: got "", want "base_limit"`},
		},
		{
			name:   "statuses",
			want:   want,
			resp:   response(OK, descStatus(OK, perMinute, 19, 30*time.Second)),
			fields: []string{"statuses: got 1, want 2"},
		},
		{
			name: "error expected",
			want: Answer{Error: codes.Unknown},
			err:  status.Error(codes.Unknown, "rate limit descriptor list must not be empty"),
		},
		{
			name: "error and message expected",
			want: Answer{Error: codes.InvalidArgument, Message: msgNoDomain},
			err:  status.Error(codes.InvalidArgument, "rate limit domain must not be empty"),
		},
		{
			name:   "other message",
			want:   Answer{Error: codes.InvalidArgument, Message: msgNoDomain},
			err:    status.Error(codes.InvalidArgument, "no domain"),
			fields: []string{`error message: got "no domain", want "rate limit domain must not be empty"`},
		},
		{
			name:   "other code and message",
			want:   Answer{Error: codes.Unknown, Message: msgNoDomain},
			err:    status.Error(codes.InvalidArgument, "no domain"),
			fields: []string{"got gRPC code InvalidArgument, want Unknown", "error message"},
		},
		{
			name:   "other error",
			want:   Answer{Error: codes.Unknown},
			err:    status.Error(codes.InvalidArgument, "no descriptors"),
			fields: []string{"got gRPC code InvalidArgument, want Unknown"},
		},
		{
			name:   "answer instead of error",
			want:   Answer{Error: codes.Unknown},
			resp:   response(OK),
			fields: []string{"got an answer"},
		},
		{
			name:   "error instead of answer",
			want:   want,
			err:    errors.New("connection refused"),
			fields: []string{"call failed with gRPC code Unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(tt.want, tt.resp, tt.err)
			if len(got) != len(tt.fields) {
				t.Fatalf("Compare = %q, want %d differences like %q", got, len(tt.fields), tt.fields)
			}
			for i, f := range tt.fields {
				if !strings.Contains(got[i], f) {
					t.Errorf("difference %d = %q, want it to contain %q", i, got[i], f)
				}
			}
		})
	}
}

// perMinute1 is a limit of 1 a minute without a name.
func perMinute1() *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: Minute}
}

func TestRequestProto(t *testing.T) {
	r := withHits(req("cases",
		dh(0, "cost", RunToken+"-a"),
		Descriptor{Entries: []Entry{{"ovr", "x" + RunToken}, {"k", "plain"}}, Override: lim(3, Hour)},
	), 4)
	msg := r.proto("T")
	if msg.GetDomain() != "cases" || msg.GetHitsAddend() != 4 || len(msg.GetDescriptors()) != 2 {
		t.Fatalf("proto = %v", msg)
	}
	d0, d1 := msg.GetDescriptors()[0], msg.GetDescriptors()[1]
	if v := d0.GetEntries()[0].GetValue(); v != "T-a" {
		t.Errorf("value = %q, want T-a", v)
	}
	if d0.GetHitsAddend() == nil || d0.GetHitsAddend().GetValue() != 0 {
		t.Errorf("hits_addend = %v, want a present 0", d0.GetHitsAddend())
	}
	if d1.GetHitsAddend() != nil {
		t.Errorf("hits_addend of the second = %v, want none", d1.GetHitsAddend())
	}
	if v := d1.GetEntries()[0].GetValue() + "," + d1.GetEntries()[1].GetValue(); v != "xT,plain" {
		t.Errorf("values = %q, want xT,plain", v)
	}
	if o := d1.GetLimit(); o.GetRequestsPerUnit() != 3 || o.GetUnit().String() != "HOUR" {
		t.Errorf("override = %v, want 3/HOUR", o)
	}
}

func TestCasesWellFormed(t *testing.T) {
	configured := map[string]bool{}
	dir := t.TempDir()
	if err := WriteConfig(dir); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "domain: "); ok {
				configured[strings.TrimSpace(d)] = true
			}
		}
	}
	if len(files) != 3 || !configured["basic"] || !configured["another"] || !configured["cases"] || configured["reload"] {
		t.Fatalf("WriteConfig wrote %q with domains %v; want basic, another and cases, not reload", files, configured)
	}
	unknown := []string{"foo", "no-such-domain", ""}
	names := map[string]bool{}
	for _, c := range Cases() {
		if c.Name == "" || names[c.Name] {
			t.Errorf("case name %q empty or repeated", c.Name)
		}
		names[c.Name] = true
		if c.Listed() != (c.Reason != "") {
			t.Errorf("%s: listed %v but reason %q", c.Name, c.Listed(), c.Reason)
		}
		for i, s := range c.Steps {
			if len(s.Want) == 0 {
				t.Errorf("%s step %d: no answers", c.Name, i)
			}
			if s.Ratekit != nil && len(s.Ratekit) != len(s.Want) {
				t.Errorf("%s step %d: %d ratekit answers for %d repetitions", c.Name, i, len(s.Ratekit), len(s.Want))
			}
			if !configured[s.Request.Domain] && !slices.Contains(unknown, s.Request.Domain) {
				t.Errorf("%s step %d: domain %q is not configured", c.Name, i, s.Request.Domain)
			}
			for _, a := range s.Want {
				if a.Error == codes.OK && len(a.Statuses) != len(s.Request.Descriptors) {
					t.Errorf("%s step %d: %d statuses for %d descriptors", c.Name, i, len(a.Statuses), len(s.Request.Descriptors))
				}
				for _, st := range a.Statuses {
					if st.Limit != nil && UnitSeconds(st.Limit.Unit) == 0 {
						t.Errorf("%s step %d: unit %v", c.Name, i, st.Limit.Unit)
					}
				}
			}
		}
	}
}

// startService starts Redis and the service for a test, with the cases'
// configuration, and returns a connection to it and its configuration
// directory.
func startService(t *testing.T, kind, bin string) (*grpc.ClientConn, string) {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t)
	dir := t.TempDir()
	var s *rlsproc.Service
	var err error
	switch kind {
	case "reference":
		root := filepath.Join(dir, "runtime")
		if err := WriteConfig(rlsproc.ReferenceConfigDir(root)); err != nil {
			t.Fatal(err)
		}
		s, err = rlsproc.StartReference(ctx, rlsproc.ReferenceOptions{Bin: bin, Root: root, LogDir: dir, RedisAddr: srv.Addr()})
	default:
		cfg := filepath.Join(dir, "config")
		if err := WriteConfig(cfg); err != nil {
			t.Fatal(err)
		}
		s, err = rlsproc.StartRatekit(ctx, rlsproc.RatekitOptions{Bin: bin, ConfigDir: cfg, LogDir: dir, RedisAddr: srv.Addr()})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, s.ConfigDir
}

// TestReference plays the cases on the reference service, whose
// service_cmd binary RATEKIT_REFERENCE names; skipped without it. Build it
// with
//
//	GOBIN=DIR GOFLAGS= go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
func TestReference(t *testing.T) {
	bin := os.Getenv("RATEKIT_REFERENCE")
	if bin == "" {
		t.Skip("set RATEKIT_REFERENCE to the reference's service_cmd to play the cases on it")
	}
	conn, dir := startService(t, "reference", bin)
	ctx := context.Background()

	for _, d := range Run(ctx, conn, Cases()) {
		t.Errorf("reference: %s (got %s; want %s)", d, d.Got, d.Want)
	}
	for _, d := range RunReload(ctx, conn, dir, 15*time.Second) {
		t.Errorf("reference: %s", d)
	}

	// A wrong expectation is reported, once.
	c := Cases()[1] // basic-key1-per-second
	c.Steps[0].Want[0].Statuses[0].Remaining = 48
	if diffs := Run(ctx, conn, []Case{c}); len(diffs) != 1 || diffs[0].Listed || !strings.Contains(diffs[0].Detail, "limit_remaining: got 49, want 48") {
		t.Errorf("wrong expectation: diffs = %v, want one unlisted on limit_remaining", diffs)
	}
	// With its two lists of answers swapped, the two-descriptor loop
	// differs from the reference's answers in the listed way.
	loop := twoDescriptorLoop()
	loop.Steps[0].Want, loop.Steps[0].Ratekit = loop.Steps[0].Ratekit, loop.Steps[0].Want
	diffs := Run(ctx, conn, []Case{loop})
	if len(diffs) != 5 {
		t.Fatalf("swapped loop: %d diffs, want 5 (calls 11 to 15): %v", len(diffs), diffs)
	}
	for _, d := range diffs {
		if !d.Listed || d.Reason != loop.Reason || d.Rep < 10 {
			t.Errorf("swapped loop: %s, want a listed difference on calls 11 to 15", d)
		}
	}
}

// TestRatekitServe plays the cases and the reload check on ratekit
// serve, whose binary RATEKIT_SERVE names (go build -o DIR/ratekit
// ./cmd/ratekit); skipped without it (TestRatekitServeInProcess plays the
// cases without it). The listed differences are expected, and only
// they.
func TestRatekitServe(t *testing.T) {
	bin := os.Getenv("RATEKIT_SERVE")
	if bin == "" {
		t.Skip("set RATEKIT_SERVE to a ratekit binary to play the cases on ratekit serve")
	}
	conn, dir := startService(t, "ratekit", bin)
	ctx := context.Background()
	checkRatekit(t, Cases(), Run(ctx, conn, Cases()))
	for _, d := range RunReload(ctx, conn, dir, 15*time.Second) {
		t.Errorf("ratekit: %s", d)
	}
}
