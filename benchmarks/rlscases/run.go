package rlscases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// callTimeout bounds one ShouldRateLimit call.
const callTimeout = 5 * time.Second

// Diff is one repetition of a step whose answer is not the expected one.
type Diff struct {
	Case string
	// Step and Rep number the step in the case and the repetition in the
	// step, from 0.
	Step, Rep int
	// Detail lists the fields that differ, with the answer and the
	// expected value of each.
	Detail string
	// Got and Want are the whole answer and the whole expected answer.
	Got, Want string
	// Listed is true when every answer of the case equals the case's
	// ratekit answers: a documented difference, explained by Reason.
	Listed bool
	Reason string
}

// String formats the difference on one line.
func (d Diff) String() string {
	s := fmt.Sprintf("%s step %d rep %d: %s", d.Case, d.Step, d.Rep, d.Detail)
	if d.Listed {
		s += " [listed: " + d.Reason + "]"
	}
	return s
}

// Run plays the cases on conn, a connection to a rate limit service
// loaded with the configuration of WriteConfig, and returns the
// differences from the reference's answers (Step.Want). When all of a
// case's answers equal its ratekit answers instead, the differences are
// returned with Listed set. A case that fails while one of its windows
// ended under it is played again once, with fresh values.
func Run(ctx context.Context, conn grpc.ClientConnInterface, cases []Case) []Diff {
	client := rlsv3.NewRateLimitServiceClient(conn)
	var out []Diff
	for _, c := range cases {
		if ctx.Err() != nil {
			out = append(out, Diff{Case: c.Name, Detail: "not run: " + ctx.Err().Error()})
			continue
		}
		diffs, crossed := runCase(ctx, client, c)
		if len(diffs) > 0 && crossed {
			diffs, _ = runCase(ctx, client, c)
		}
		out = append(out, diffs...)
	}
	return out
}

// outcome is the result of one call.
type outcome struct {
	resp *rlsv3.RateLimitResponse
	err  error
	at   time.Time // when the answer came
}

// runCase plays one case with a fresh run value. crossed reports whether a
// window of the shortest unit the case expects ended during the case.
func runCase(ctx context.Context, client rlsv3.RateLimitServiceClient, c Case) (diffs []Diff, crossed bool) {
	token := newToken()
	start := time.Now()
	got := make([][]outcome, len(c.Steps))
	for si, step := range c.Steps {
		msg := step.Request.proto(token)
		for range step.Want {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			resp, err := client.ShouldRateLimit(cctx, msg)
			cancel()
			got[si] = append(got[si], outcome{resp: resp, err: err, at: time.Now()})
		}
	}
	end := time.Now()
	if u := shortestUnit(c); u > 0 {
		crossed = start.Unix()/u != end.Unix()/u
	}

	ref := compareCase(c, got, false)
	if len(ref) == 0 || !c.Listed() {
		return ref, crossed
	}
	if alt := compareCase(c, got, true); len(alt) == 0 {
		for i := range ref {
			ref[i].Listed = true
			ref[i].Reason = c.Reason
		}
	}
	return ref, crossed
}

// compareCase compares the answers with the reference's (ratekit false)
// or with ratekit's (ratekit true).
func compareCase(c Case, got [][]outcome, ratekit bool) []Diff {
	var out []Diff
	for si, step := range c.Steps {
		want := step.Want
		if ratekit && step.Ratekit != nil {
			want = step.Ratekit
		}
		for ri, w := range want {
			g := got[si][ri]
			if fields := Compare(w, g.resp, g.err); len(fields) > 0 {
				out = append(out, Diff{
					Case:   c.Name,
					Step:   si,
					Rep:    ri,
					Detail: strings.Join(fields, "; "),
					Got:    FormatResponse(g.resp, g.err),
					Want:   w.String(),
				})
			}
		}
	}
	return out
}

// shortestUnit returns the length in seconds of the shortest unit of the
// limits the case expects, or 0 if it expects none.
func shortestUnit(c Case) int64 {
	var min int64
	for _, s := range c.Steps {
		for _, a := range s.Want {
			for _, st := range a.Statuses {
				if st.Limit == nil {
					continue
				}
				if n := UnitSeconds(st.Limit.Unit); n > 0 && (min == 0 || n < min) {
					min = n
				}
			}
		}
	}
	return min
}

// UnitSeconds returns the length of a unit in seconds as the reference
// counts it (a month is 30 days, a year 365), or 0 for an unknown unit.
func UnitSeconds(u Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}

// Compare returns the differences between an expected answer and a call's
// result (resp or err), one string per field that differs; none if they
// agree. An expected error is compared by its gRPC code, and by its
// message when the answer has one. duration_until_reset must be within
// (0, unit] when a limit is expected and absent otherwise.
func Compare(want Answer, resp *rlsv3.RateLimitResponse, err error) []string {
	if want.Error != codes.OK {
		if err == nil {
			return []string{fmt.Sprintf("error: got an answer (%s), want gRPC code %s", FormatResponse(resp, nil), want.Error)}
		}
		var out []string
		if got := status.Code(err); got != want.Error {
			out = append(out, fmt.Sprintf("error: got gRPC code %s, want %s", got, want.Error))
		}
		if msg := status.Convert(err).Message(); want.Message != "" && msg != want.Message {
			out = append(out, fmt.Sprintf("error message: got %q, want %q", msg, want.Message))
		}
		return out
	}
	if err != nil {
		return []string{fmt.Sprintf("error: call failed with gRPC code %s (%s)", status.Code(err), status.Convert(err).Message())}
	}
	var out []string
	if resp.GetOverallCode() != want.Overall {
		out = append(out, fmt.Sprintf("overall_code: got %s, want %s", resp.GetOverallCode(), want.Overall))
	}
	got := resp.GetStatuses()
	if len(got) != len(want.Statuses) {
		return append(out, fmt.Sprintf("statuses: got %d, want %d", len(got), len(want.Statuses)))
	}
	for i, w := range want.Statuses {
		out = append(out, compareStatus(i, w, got[i])...)
	}
	return out
}

// compareStatus compares descriptor i's status.
func compareStatus(i int, w Status, g *rlsv3.RateLimitResponse_DescriptorStatus) []string {
	var out []string
	field := func(name string, got, want any) {
		out = append(out, fmt.Sprintf("statuses[%d].%s: got %v, want %v", i, name, got, want))
	}
	if g.GetCode() != w.Code {
		field("code", g.GetCode(), w.Code)
	}
	if g.GetLimitRemaining() != w.Remaining {
		field("limit_remaining", g.GetLimitRemaining(), w.Remaining)
	}
	gl := g.GetCurrentLimit()
	reset := g.GetDurationUntilReset()
	if w.Limit == nil {
		if gl != nil {
			field("current_limit", formatLimit(gl), "none")
		}
		if reset != nil && reset.AsDuration() != 0 {
			field("duration_until_reset", reset.AsDuration(), "none")
		}
		return out
	}
	if gl == nil {
		field("current_limit", "none", w.Limit)
		return out
	}
	if gl.GetRequestsPerUnit() != w.Limit.RequestsPerUnit || gl.GetUnit() != w.Limit.Unit {
		field("current_limit", formatLimit(gl), w.Limit)
	}
	if gl.GetName() != w.Limit.Name {
		field("current_limit.name", fmt.Sprintf("%q", gl.GetName()), fmt.Sprintf("%q", w.Limit.Name))
	}
	unit := time.Duration(UnitSeconds(w.Limit.Unit)) * time.Second
	switch {
	case reset == nil:
		field("duration_until_reset", "none", fmt.Sprintf("within (0, %s]", unit))
	case reset.AsDuration() <= 0 || reset.AsDuration() > unit:
		field("duration_until_reset", reset.AsDuration(), fmt.Sprintf("within (0, %s]", unit))
	}
	return out
}

// String formats a limit as "N/UNIT", with its name if it has one.
func (l *Limit) String() string {
	if l == nil {
		return "none"
	}
	s := fmt.Sprintf("%d/%s", l.RequestsPerUnit, l.Unit)
	if l.Name != "" {
		s += fmt.Sprintf(" %q", l.Name)
	}
	return s
}

// formatLimit formats a limit of an answer as Limit.String does.
func formatLimit(l *rlsv3.RateLimitResponse_RateLimit) string {
	return (&Limit{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: l.GetUnit(), Name: l.GetName()}).String()
}

// String formats an expected answer on one line, an error with its code
// and the message expected, if any.
func (a Answer) String() string {
	if a.Error != codes.OK {
		if a.Message != "" {
			return fmt.Sprintf("error %s %q", a.Error, a.Message)
		}
		return "error " + a.Error.String()
	}
	parts := make([]string, len(a.Statuses))
	for i, s := range a.Statuses {
		parts[i] = fmt.Sprintf("%s %s rem %d", s.Code, s.Limit, s.Remaining)
	}
	return fmt.Sprintf("%s [%s]", a.Overall, strings.Join(parts, "; "))
}

// FormatResponse formats a call's result on one line, as Answer.String
// does, with each status's duration_until_reset, or the error's code and
// message.
func FormatResponse(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return fmt.Sprintf("error %s %q", status.Code(err), status.Convert(err).Message())
	}
	parts := make([]string, len(resp.GetStatuses()))
	for i, s := range resp.GetStatuses() {
		l := "none"
		if s.GetCurrentLimit() != nil {
			l = formatLimit(s.GetCurrentLimit())
		}
		parts[i] = fmt.Sprintf("%s %s rem %d", s.GetCode(), l, s.GetLimitRemaining())
		if r := s.GetDurationUntilReset(); r != nil {
			parts[i] += " reset " + r.AsDuration().String()
		}
	}
	return fmt.Sprintf("%s [%s]", resp.GetOverallCode(), strings.Join(parts, "; "))
}

// proto returns the request as a message, with RunToken replaced by
// token.
func (r Request) proto(token string) *rlsv3.RateLimitRequest {
	msg := &rlsv3.RateLimitRequest{Domain: r.Domain, HitsAddend: r.HitsAddend}
	for _, d := range r.Descriptors {
		pd := &commonv3.RateLimitDescriptor{}
		for _, e := range d.Entries {
			pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{
				Key:   e.Key,
				Value: strings.ReplaceAll(e.Value, RunToken, token),
			})
		}
		if d.HitsAddend != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
		}
		if d.Override != nil {
			pd.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: d.Override.RequestsPerUnit,
				// The two enums share their numbers.
				Unit: typev3.RateLimitUnit(d.Override.Unit),
			}
		}
		msg.Descriptors = append(msg.Descriptors, pd)
	}
	return msg
}

// newToken returns a fresh value for RunToken.
func newToken() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on the supported systems; a clock
		// value keeps runs apart all the same.
		return fmt.Sprintf("r%x", time.Now().UnixNano())
	}
	return "r" + hex.EncodeToString(b[:])
}
