package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/ratekit/ratekit/core"
)

// A Report is what a replay found. Its JSON form is what
// "ratekit replay -json" prints: one object.
type Report struct {
	Inputs     []string  `json:"inputs"`
	Format     string    `json:"format"`
	Key        string    `json:"key,omitempty"`         // of Options.Limits
	Rules      string    `json:"rules,omitempty"`       // the Source of Options.Rules
	Lines      int64     `json:"lines"`                 // lines read, blank lines aside
	BadLines   int64     `json:"bad_lines"`             // lines that did not parse (or too long, or whose time jumps: Options.MaxJump), skipped
	BadSamples []BadLine `json:"bad_samples,omitempty"` // the first few
	OutOfOrder int64     `json:"out_of_order"`          // lines earlier than one before them, replayed at the latest time seen
	Unkeyed    int64     `json:"unkeyed"`               // lines without a key (no header, no user, no address), not replayed
	Untracked  int64     `json:"untracked"`             // lines of clients first seen after the client cap was reached (Options.MaxClients), not replayed
	ClientCap  *CapHit   `json:"client_cap,omitempty"`  // where the client cap was reached; nil if it was not
	Logged429  int64     `json:"logged_429"`            // lines the server logged with status 429
	Start      time.Time `json:"start"`                 // the first line's time (of the lines replayed)
	End        time.Time `json:"end"`                   // the latest time seen

	// Requests counts the lines replayed; with Rules, Admitted and
	// Rejected are the decisions on them by all the rules together.
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted,omitempty"`
	Rejected int64 `json:"rejected,omitempty"`

	PeakPerSecond Peak `json:"peak_requests_per_second"`

	// Limits has one entry per limit replayed (per algorithm, per rule).
	Limits []LimitReport `json:"limits"`

	// CounterVsLog compares the sliding window counter with the exact
	// sliding window log replayed on the same traffic, when the counter
	// was replayed.
	CounterVsLog *Comparison `json:"counter_vs_log,omitempty"`

	// Suggestions are the limits that meet Options.TargetReject and
	// TargetLimited, and those of Options.Headroom, per algorithm, each
	// verified by replaying it.
	Suggestions []Suggestion `json:"suggestions,omitempty"`

	// Normal tells the normal clients from the outliers, when
	// suggestions were asked for.
	Normal *NormalClients `json:"normal,omitempty"`

	// Series counts requests sent and admitted over time, for charts.
	Series Series `json:"series"`
}

// A CapHit says where the client cap (Options.MaxClients) was reached:
// the line of the first request not replayed because its client was new.
type CapHit struct {
	Clients int    `json:"clients"` // the cap
	Input   string `json:"input"`
	Line    int    `json:"line"`
}

// A BadLine is a line that did not parse.
type BadLine struct {
	Input  string `json:"input"`
	Line   int    `json:"line"`
	Reason string `json:"reason"`
	Text   string `json:"text"` // its first 80 bytes
}

// A Peak is the busiest second.
type Peak struct {
	Count int64     `json:"count"`
	At    time.Time `json:"at"`
}

// A LimitReport is what one limit decided.
type LimitReport struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int    `json:"limit"`
	Period    string `json:"period"`
	Burst     int    `json:"burst,omitempty"`  // buckets
	Shadow    bool   `json:"shadow,omitempty"` // a rule in shadow mode: its rejections would have been

	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Rejected int64 `json:"rejected"`
	// NotDecided, with Rules, counts the requests this rule matched but
	// did not decide: another rule rejected them before it was asked, or
	// after it admitted them, so that it gave its count back (shadow
	// rules are asked only when the others admit). Requests is
	// Admitted + Rejected + NotDecided.
	NotDecided     int64   `json:"not_decided"`
	RejectedShare  float64 `json:"rejected_share"`
	Clients        int     `json:"clients"`
	ClientsLimited int     `json:"clients_limited"` // clients with a request rejected
	LimitedShare   float64 `json:"limited_share"`

	TopLimited []ClientReport `json:"top_limited"`

	PeakAdmitted Peak `json:"peak_admitted_per_second"`
	PeakRejected Peak `json:"peak_rejected_per_second"`

	// MaxAdmittedInPeriod is the most requests one client got admitted
	// in any interval one period long: beyond Limit at a fixed window's
	// boundary (up to twice), or by a bucket's burst.
	// Saturated says a client got more than 65536 admitted in one
	// period: MaxAdmittedInPeriod is then at least 65536, not exact.
	MaxAdmittedInPeriod int       `json:"max_admitted_in_period"`
	Saturated           bool      `json:"saturated,omitempty"`
	MaxAdmittedClient   string    `json:"max_admitted_client,omitempty"`
	MaxAdmittedAt       time.Time `json:"max_admitted_at"`

	// Distribution is that of the clients' sending rates under this
	// limit's key and period.
	Distribution Distribution `json:"distribution"`
}

// A ClientReport is one client under one limit.
type ClientReport struct {
	Key      string `json:"key"` // core.KeyHash of the key, unless Options.ShowKeys
	Requests int64  `json:"requests"`
	Rejected int64  `json:"rejected"`
	Peak     int    `json:"peak"` // the most requests it sent in one period
}

// A Distribution describes the clients' peaks: the most requests each
// sent in any interval one period long.
type Distribution struct {
	Period    string `json:"period"`
	Clients   int    `json:"clients"`
	P50       int    `json:"p50"`
	P95       int    `json:"p95"`
	P99       int    `json:"p99"`
	Max       int    `json:"max"`
	Saturated bool   `json:"saturated,omitempty"` // a client sent more than 65536 in one period: its peak reads 65536
	Histogram []Bin  `json:"histogram"`
}

// A Bin counts the clients whose peak is between Low and High, inclusive.
type Bin struct {
	Low     int `json:"low"`
	High    int `json:"high"`
	Clients int `json:"clients"`
}

// A Comparison sets the sliding window counter's decisions beside the
// exact sliding window log's, on the same traffic and limit.
type Comparison struct {
	Limit       int     `json:"limit"`
	Period      string  `json:"period"`
	Requests    int64   `json:"requests"`
	Differ      int64   `json:"differ"` // decisions that differ
	DifferShare float64 `json:"differ_share"`
	CounterOnly int64   `json:"counter_admitted_log_rejected"`
	LogOnly     int64   `json:"log_admitted_counter_rejected"`
	// The most one client got admitted in one period by each: the log
	// never exceeds Limit, the counter's estimate can.
	CounterMaxAdmitted int `json:"counter_max_admitted_in_period"`
	LogMaxAdmitted     int `json:"log_max_admitted_in_period"`
}

// A Suggestion is a limit suggested for one algorithm, and what it
// decided when replayed. For Target "reject" or "limited", it is the
// smallest limit found that met the target (Met is false when none did:
// see Note); for Target "headroom", the busiest normal client's peak,
// BusiestNormal, times Headroom, rounded up.
type Suggestion struct {
	Algorithm      string  `json:"algorithm"`
	Target         string  `json:"target"`             // "reject" (share of requests rejected), "limited" (share of clients) or "headroom"
	Share          float64 `json:"share"`              // the target, for "reject" and "limited"
	Headroom       float64 `json:"headroom,omitempty"` // Options.Headroom, for "headroom"
	Limit          int     `json:"limit"`
	Burst          int     `json:"burst,omitempty"`
	Period         string  `json:"period"`
	Met            bool    `json:"met"`
	Requests       int64   `json:"requests"`
	Rejected       int64   `json:"rejected"`
	RejectedShare  float64 `json:"rejected_share"`
	Clients        int     `json:"clients"`
	ClientsLimited int     `json:"clients_limited"`
	LimitedShare   float64 `json:"limited_share"`
	// Below is the largest limit replayed below Limit, which missed the
	// target (0: none was tried); Limit is the smallest when it is
	// Limit-1.
	Below int    `json:"below"`
	Note  string `json:"note,omitempty"`

	// BusiestNormal is the busiest normal client's peak, and
	// NormalClients how many normal clients there are (Report.Normal);
	// NormalLimited counts those this limit limited (the others of
	// ClientsLimited are outliers).
	BusiestNormal int `json:"busiest_normal_peak"`
	NormalClients int `json:"normal_clients"`
	NormalLimited int `json:"normal_clients_limited"`
	// OutliersRejected counts the outliers' requests this limit
	// rejected, of Report.Normal.OutlierRequests; Outliers details what
	// it did to the busiest of them (at most 5).
	OutliersRejected int64     `json:"outliers_rejected"`
	Outliers         []Outlier `json:"outliers,omitempty"`
}

// NormalClients tells the normal clients from the outliers, for
// suggestions. A client's peak is the most requests it sent in any
// interval one period long; an outlier is a client whose peak is more
// than Factor (Options.OutlierFactor) times the median client's peak,
// that is above OutlierAbove. The median stands for the typical client:
// the outliers do not move it however much they send, as long as they
// are fewer than half the clients; and the rule does not depend on how
// many clients the log holds, as a percentile would (with fewer than 100
// clients, the 99th percentile is the busiest client, an abuser
// included). A headroom suggestion is sized from the busiest normal
// client alone.
type NormalClients struct {
	Period       string  `json:"period"`
	MedianPeak   int     `json:"median_peak"`
	Factor       float64 `json:"outlier_factor"`
	OutlierAbove int     `json:"outlier_above"` // MedianPeak x Factor, rounded down: a peak above it is an outlier's
	Clients      int     `json:"clients"`       // the normal clients

	// BusiestPeak is the highest peak of a normal client, and
	// BusiestClient that client (the first seen of those at that peak;
	// its key hashed by core.KeyHash unless Options.ShowKeys).
	BusiestPeak   int    `json:"busiest_peak"`
	BusiestClient string `json:"busiest_client"`

	Outliers        int     `json:"outliers"`
	OutlierRequests int64   `json:"outlier_requests"` // sent by all the outliers
	OutlierShare    float64 `json:"outlier_share"`    // of all requests
}

// An Outlier is what a suggested limit did to one outlier.
type Outlier struct {
	Key      string  `json:"key"`      // core.KeyHash of the key, unless Options.ShowKeys
	Peak     int     `json:"peak"`     // the most requests it sent in one period
	Requests int64   `json:"requests"` // all it sent
	Share    float64 `json:"share"`    // of all requests
	Rejected int64   `json:"rejected"` // of its requests, by the suggested limit
}

// A Series counts requests over time in equal steps.
type Series struct {
	Start    time.Time    `json:"start"`
	Step     string       `json:"step"`
	Requests []int64      `json:"requests"` // sent
	Admitted []SeriesLine `json:"admitted"` // per limit
}

// A SeriesLine is one limit's admissions over time.
type SeriesLine struct {
	Name   string  `json:"name"`
	Counts []int64 `json:"counts"`
}

// Run replays the inputs, in order, as one log through the limits of o
// and reports what they decided. A line that does not parse is counted
// and skipped; a bad option, or an input that cannot be read, is an
// error.
func Run(ctx context.Context, o Options, inputs ...Input) (*Report, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	specs := slices.Clone(o.Limits)
	for i := range specs {
		if specs[i].Algorithm == 0 {
			specs[i].Algorithm = core.DefaultAlgorithm
		}
	}
	// The first sliding window counter is compared with the exact log of
	// the same rate, replayed beside it when not among the limits.
	if i := slices.IndexFunc(specs, func(l core.Limit) bool { return l.Algorithm == core.SlidingWindowCounter }); i >= 0 {
		c := specs[i]
		if !slices.ContainsFunc(specs, func(l core.Limit) bool { return l.Algorithm == core.SlidingWindowLog && l.Rate == c.Rate }) {
			specs = append(specs, core.Limit{Name: c.Name, Algorithm: core.SlidingWindowLog, Rate: c.Rate})
		}
	}
	r, err := newReplayer(ctx, &o, specs, true)
	if err != nil {
		return nil, err
	}
	r.visible = len(o.Limits)
	if err := r.pass(inputs); err != nil {
		return nil, err
	}
	rep := r.report(inputs)
	if len(o.Limits) > 0 && (o.TargetReject > 0 || o.TargetLimited > 0 || o.Headroom > 0) && rep.Requests > 0 {
		if rep.Suggestions, rep.Normal, err = suggest(ctx, &o, r, inputs); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// check validates the options that do not need a line to.
func (o *Options) check() error {
	if _, err := newParser(o.Format, o.Fields); err != nil {
		return err
	}
	switch {
	case o.Rules != nil && len(o.Limits) > 0:
		return errors.New("replay: Limits and Rules are exclusive")
	case o.Rules == nil && len(o.Limits) == 0:
		return errors.New("replay: no limits to replay (set Limits or Rules)")
	case o.TargetReject < 0 || o.TargetReject >= 1 || o.TargetLimited < 0 || o.TargetLimited >= 1:
		return fmt.Errorf("replay: targets %g and %g must be shares from 0 to below 1", o.TargetReject, o.TargetLimited)
	case o.Headroom != 0 && !(o.Headroom >= 1 && o.Headroom <= MaxHeadroom):
		return fmt.Errorf("replay: Headroom %g: must be from 1 to %d, such as 1.5 for 50%% over the busiest normal client (0: no headroom suggestion)", o.Headroom, MaxHeadroom)
	case o.OutlierFactor != 0 && !(o.OutlierFactor >= 1 && !math.IsInf(o.OutlierFactor, 1)):
		return fmt.Errorf("replay: OutlierFactor %g: must be at least 1 (0: the default, %d)", o.OutlierFactor, DefaultOutlierFactor)
	case o.MaxLineBytes > MaxLineBytesLimit:
		return fmt.Errorf("replay: MaxLineBytes %d: at most %d (1 MiB)", o.MaxLineBytes, MaxLineBytesLimit)
	case o.MaxJump < 0:
		return fmt.Errorf("replay: MaxJump %s: must not be negative (0: the default)", o.MaxJump)
	case o.JumpLines != 0 && (o.JumpLines < 2 || o.JumpLines > MaxJumpLines):
		return fmt.Errorf("replay: JumpLines %d: must be from 2 to %d (0: the default, %d)", o.JumpLines, MaxJumpLines, DefaultJumpLines)
	case o.MaxClients < 0:
		return fmt.Errorf("replay: MaxClients %d: must not be negative (0: the default, %d)", o.MaxClients, DefaultMaxClients)
	}
	for _, l := range o.Limits {
		if _, err := l.Params(time.Nanosecond); err != nil {
			return err
		}
		if l.Rate.Period != o.Limits[0].Rate.Period {
			return fmt.Errorf("replay: limits of periods %s and %s: replay one period at a time", o.Limits[0].Rate.Period, l.Rate.Period)
		}
		if l.Rate.Count == 0 {
			return errors.New("replay: a limit of 0 requests rejects everything: nothing to learn")
		}
	}
	if o.Rules != nil {
		e, err := newEngine(o, time.Now, nil, func(core.Event) {})
		if err != nil {
			return err
		}
		if err := e.Load(*o.Rules); err != nil {
			return err
		}
	}
	if _, err := newReplayer(context.Background(), o, nil, false); err != nil {
		return err
	}
	return nil
}

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func (r *replayer) keyName(t *tracker, id int32) string {
	if r.o.ShowKeys {
		return t.keys[id]
	}
	return core.KeyHash(t.keys[id])
}

func peakOf(p peak) Peak {
	if p.max == 0 {
		return Peak{}
	}
	return Peak{Count: p.max, At: time.Unix(p.at, 0).UTC()}
}

func (r *replayer) report(inputs []Input) *Report {
	rep := &Report{
		Format: r.o.Format, Lines: r.lines, BadLines: r.bad, BadSamples: r.badSamples,
		OutOfOrder: r.outOfOrder, Unkeyed: r.unkeyed, Untracked: r.untracked, Logged429: r.logged429,
		PeakPerSecond: peakOf(r.sentPeak), Limits: []LimitReport{},
	}
	if r.capName != "" {
		rep.ClientCap = &CapHit{Clients: r.maxClients, Input: r.capName, Line: r.capN}
	}
	if rep.Format == "" || rep.Format == "common" {
		rep.Format = "combined"
	}
	for _, in := range inputs {
		rep.Inputs = append(rep.Inputs, in.Name)
	}
	if r.o.Rules != nil {
		rep.Rules = r.o.Rules.Source
		rep.Requests, rep.Admitted, rep.Rejected = r.total, r.totalAdmitted, r.totalRejected
	} else {
		rep.Key = r.o.Key
		if rep.Key == "" {
			rep.Key = "ip"
		}
		rep.Requests = r.records - r.unkeyed - r.untracked
	}
	if r.started {
		rep.Start, rep.End = time.Unix(0, r.first).UTC(), time.Unix(0, r.now).UTC()
	}
	for _, ln := range r.lanes {
		if ln.hidden && r.o.Rules == nil {
			continue
		}
		rep.Limits = append(rep.Limits, r.laneReport(ln))
	}
	if r.counter >= 0 && r.log >= 0 {
		c, l := r.lanes[r.counter], r.lanes[r.log]
		rep.CounterVsLog = &Comparison{
			Limit: c.limit.Rate.Count, Period: c.limit.Rate.Period.String(), Requests: c.requests,
			Differ: r.counterOnly + r.logOnly, DifferShare: share(r.counterOnly+r.logOnly, c.requests),
			CounterOnly: r.counterOnly, LogOnly: r.logOnly,
			CounterMaxAdmitted: int(c.burst), LogMaxAdmitted: int(l.burst),
		}
	}
	if s := r.ser; s != nil {
		rep.Series = Series{Start: time.Unix(0, s.start).UTC(), Step: time.Duration(s.width).String(),
			Requests: slices.Clone(s.cols[0][:s.n])}
		if r.o.Rules != nil {
			rep.Series.Admitted = []SeriesLine{{Name: "all rules", Counts: slices.Clone(s.cols[1][:s.n])}}
		}
		for _, ln := range r.lanes {
			if !ln.hidden {
				rep.Series.Admitted = append(rep.Series.Admitted, SeriesLine{Name: ln.limit.Algorithm.String(), Counts: slices.Clone(s.cols[ln.col][:s.n])})
			}
		}
	}
	return rep
}

func (r *replayer) laneReport(ln *lane) LimitReport {
	t := ln.tr
	lr := LimitReport{
		Name: ln.limit.Name, Algorithm: ln.limit.Algorithm.String(), Limit: ln.limit.Rate.Count,
		Period: ln.limit.Rate.Period.String(), Shadow: ln.shadow,
		Requests: ln.requests, Admitted: ln.admitted, Rejected: ln.rejected, RejectedShare: share(ln.rejected, ln.requests),
		Clients: len(t.keys), ClientsLimited: ln.limited, LimitedShare: share(int64(ln.limited), int64(len(t.keys))),
		TopLimited:   []ClientReport{},
		PeakAdmitted: peakOf(ln.admPeak), PeakRejected: peakOf(ln.rejPeak),
		MaxAdmittedInPeriod: int(ln.burst), Saturated: ln.saturated,
		NotDecided:   ln.notDecided,
		Distribution: distribution(t),
	}
	if ln.limit.Algorithm == core.TokenBucket || ln.limit.Algorithm == core.LeakyBucket {
		lr.Burst = ln.limit.Burst
		if lr.Burst == 0 {
			lr.Burst = ln.limit.Rate.Count
		}
	}
	if ln.burst > 0 {
		lr.MaxAdmittedClient = r.keyName(t, ln.burstID)
		lr.MaxAdmittedAt = time.Unix(0, ln.burstAt).UTC()
	}
	var ids []int32
	for id, n := range ln.rej {
		if n > 0 {
			ids = append(ids, int32(id))
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if ln.rej[a] != ln.rej[b] {
			return int(ln.rej[b]) - int(ln.rej[a])
		}
		return strings.Compare(t.keys[a], t.keys[b])
	})
	top := r.o.Top
	if top <= 0 {
		top = 10
	}
	for _, id := range ids[:min(len(ids), top)] {
		c := &t.clients[id]
		lr.TopLimited = append(lr.TopLimited, ClientReport{Key: r.keyName(t, id), Requests: c.requests, Rejected: int64(ln.rej[id]), Peak: int(c.peak)})
	}
	return lr
}

// distribution summarizes the clients' peaks, with a histogram of up to
// 24 bins of equal width.
func distribution(t *tracker) Distribution {
	v := t.sorted(func(c *tclient) int32 { return c.peak })
	d := Distribution{Period: time.Duration(t.period).String(), Clients: len(v), Saturated: t.saturated, Histogram: []Bin{}}
	if len(v) == 0 {
		return d
	}
	d.P50, d.P95, d.P99, d.Max = int(quantile(v, 0.5)), int(quantile(v, 0.95)), int(quantile(v, 0.99)), int(v[len(v)-1])
	const bins = 24
	width := (d.Max + bins - 1) / bins
	width = max(width, 1)
	for lo := 1; lo <= d.Max; lo += width {
		d.Histogram = append(d.Histogram, Bin{Low: lo, High: lo + width - 1})
	}
	for _, p := range v {
		if p > 0 {
			d.Histogram[(int(p)-1)/width].Clients++
		}
	}
	return d
}

// WriteText writes the report as a readable summary.
func (rep *Report) WriteText(w io.Writer) error {
	b := &strings.Builder{}
	names := make([]string, len(rep.Inputs))
	for i, in := range rep.Inputs {
		names[i] = printable(in)
	}
	fmt.Fprintf(b, "replayed %s (%s): %d lines", strings.Join(names, ", "), rep.Format, rep.Lines)
	if !rep.Start.IsZero() {
		fmt.Fprintf(b, " from %s to %s (%s)", rep.Start.Format(time.RFC3339), rep.End.Format(time.RFC3339), rep.End.Sub(rep.Start))
	}
	fmt.Fprintf(b, "\n  %d requests replayed, %d bad lines, %d out of order (replayed at the latest time seen), %d without a key, %d logged as 429\n",
		rep.Requests, rep.BadLines, rep.OutOfOrder, rep.Unkeyed, rep.Logged429)
	if c := rep.ClientCap; c != nil {
		fmt.Fprintf(b, "  warning: the client cap (%d clients; -max-clients) was reached at %s:%d: from there on, %d requests of clients first seen after it were not replayed (counted only here); the clients tracked before it were replayed to the end\n",
			c.Clients, printable(c.Input), c.Line, rep.Untracked)
	}
	if sh := share(rep.OutOfOrder, rep.Lines-rep.BadLines); sh > outOfOrderWarning {
		fmt.Fprintf(b, "  warning: %s of the lines are earlier than a line before them: are the files given oldest first (access.log.2 before access.log.1)?\n", pct(sh))
	}
	for _, s := range rep.BadSamples {
		fmt.Fprintf(b, "  bad line %s:%d: %s: %q\n", printable(s.Input), s.Line, s.Reason, s.Text)
	}
	if rep.BadLines > int64(len(rep.BadSamples)) && len(rep.BadSamples) > 0 {
		fmt.Fprintf(b, "  (%d more bad lines)\n", rep.BadLines-int64(len(rep.BadSamples)))
	}
	if rep.PeakPerSecond.Count > 0 {
		fmt.Fprintf(b, "  peak: %d requests in one second, at %s\n", rep.PeakPerSecond.Count, rep.PeakPerSecond.At.Format(time.RFC3339))
	}
	if rep.Rules != "" {
		fmt.Fprintf(b, "  rules %s: %d admitted, %d rejected (%s)\n", rep.Rules, rep.Admitted, rep.Rejected, pct(share(rep.Rejected, rep.Requests)))
	}
	if len(rep.Limits) > 0 {
		d := rep.Limits[0].Distribution
		if rep.Rules == "" {
			fmt.Fprintf(b, "\nclients' peak requests in one %s (key %s): p50 %d, p95 %d, p99 %d, max %d, over %d clients\n",
				d.Period, rep.Key, d.P50, d.P95, d.P99, d.Max, d.Clients)
		}
		b.WriteString("\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "limit\talgorithm\trequests\tadmitted\trejected\t\tclients\tlimited\t\tmost admitted in a period\t")
		for _, l := range rep.Limits {
			name := l.describe()
			if rep.Rules != "" {
				name = l.Name
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t\n", name, l.Algorithm, l.Requests, l.Admitted, l.Rejected,
				pct(l.RejectedShare), l.Clients, l.ClientsLimited, pct(l.LimitedShare), l.maxAdmitted())
		}
		tw.Flush()
	}
	for _, l := range rep.Limits {
		fmt.Fprintf(b, "\n%s %s", l.Algorithm, l.describe())
		if rep.Rules != "" {
			fmt.Fprintf(b, " (rule %s; peaks p50 %d, p99 %d, max %d per %s)", l.Name, l.Distribution.P50, l.Distribution.P99, l.Distribution.Max, l.Period)
		}
		if l.Shadow {
			b.WriteString(" [shadow mode: rejections would have been]")
		}
		b.WriteString(":\n")
		if l.NotDecided > 0 {
			fmt.Fprintf(b, "  %d of its %d requests not decided by it: rejected by another rule\n", l.NotDecided, l.Requests)
		}
		if l.PeakRejected.Count > 0 {
			fmt.Fprintf(b, "  peak: %d admitted and %d rejected in one second\n", l.PeakAdmitted.Count, l.PeakRejected.Count)
		}
		if l.MaxAdmittedInPeriod > l.Limit {
			atLeast := ""
			if l.Saturated {
				atLeast = "at least "
			}
			fmt.Fprintf(b, "  client %s got %s%d admitted in one %s (%s%.2fx the limit), ending %s\n", printable(l.MaxAdmittedClient),
				atLeast, l.MaxAdmittedInPeriod, l.Period, atLeast, float64(l.MaxAdmittedInPeriod)/float64(l.Limit), l.MaxAdmittedAt.Format(time.RFC3339))
		}
		if len(l.TopLimited) == 0 {
			b.WriteString("  no client limited\n")
			continue
		}
		b.WriteString("  most limited clients:\n")
		for _, c := range l.TopLimited {
			fmt.Fprintf(b, "    %-20s %8d rejected of %8d (peak %d per %s)\n", printable(c.Key), c.Rejected, c.Requests, c.Peak, l.Period)
		}
	}
	if c := rep.CounterVsLog; c != nil {
		fmt.Fprintf(b, "\nsliding-window-counter vs sliding-window-log, %d per %s: %d of %d decisions differ (%s): %d admitted by the counter only, %d by the log only; most admitted to one client in one period: counter %d, log %d\n",
			c.Limit, c.Period, c.Differ, c.Requests, pct(c.DifferShare), c.CounterOnly, c.LogOnly, c.CounterMaxAdmitted, c.LogMaxAdmitted)
	}
	if len(rep.Suggestions) > 0 {
		rep.writeSuggestions(b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// outOfOrderWarning is the share of lines out of order beyond which the
// text report warns: files given in the wrong order, most likely.
const outOfOrderWarning = 0.01

// printable returns s as it is when it holds only printable characters,
// and quoted, as a Go string, otherwise: a key comes from the log, and
// must not reach a terminal with its escape sequences.
func printable(s string) string {
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// maxAdmitted is MaxAdmittedInPeriod, "at least" it when saturated.
func (l *LimitReport) maxAdmitted() string {
	if l.Saturated {
		return "at least " + strconv.Itoa(l.MaxAdmittedInPeriod)
	}
	return strconv.Itoa(l.MaxAdmittedInPeriod)
}

func (l *LimitReport) describe() string {
	s := fmt.Sprintf("%d/%s", l.Limit, l.Period)
	if l.Burst > 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

// writeSuggestions writes the suggestions, each followed by what it
// does to the outliers. The normal clients and the outliers are
// described first when there is a headroom suggestion or an outlier;
// and a note says why a target can let an outlier through.
func (rep *Report) writeSuggestions(b *strings.Builder) {
	b.WriteString("\nsuggested limits (each replayed):\n")
	n := rep.Normal
	headroom, target := false, false
	for _, s := range rep.Suggestions {
		if s.Target == "headroom" {
			headroom = true
		} else {
			target = true
		}
	}
	if n != nil && (headroom || n.Outliers > 0) {
		fmt.Fprintf(b, "  normal clients: %d of %d, those whose peak is at most %d per %s (%gx the median client's peak, %d); the busiest, %s, peaked at %d per %s\n",
			n.Clients, n.Clients+n.Outliers, n.OutlierAbove, n.Period, n.Factor, n.MedianPeak, printable(n.BusiestClient), n.BusiestPeak, n.Period)
		if n.Outliers == 0 {
			fmt.Fprintf(b, "  outliers: none (no client peaked above %d per %s)\n", n.OutlierAbove, n.Period)
		} else {
			fmt.Fprintf(b, "  outliers: %d %s, peaking above %d per %s, which sent %d of the %d requests (%s)\n",
				n.Outliers, plural(n.Outliers, "client", "clients"), n.OutlierAbove, n.Period, n.OutlierRequests, rep.Requests, pct(n.OutlierShare))
		}
	}
	for _, s := range rep.Suggestions {
		b.WriteString("  " + s.String() + "\n")
		if !s.Met || n == nil {
			continue
		}
		for _, x := range s.Outliers {
			fmt.Fprintf(b, "      outlier %s sent %d in its busiest %s and %d in all (%s of all requests); this limit would have refused %d of the %d (%s)\n",
				printable(x.Key), x.Peak, s.Period, x.Requests, pct(x.Share), x.Rejected, x.Requests, pct(share(x.Rejected, x.Requests)))
		}
		if more := n.Outliers - len(s.Outliers); more > 0 {
			fmt.Fprintf(b, "      and %d more %s; all %d outliers together: refused %d of their %d requests\n",
				more, plural(more, "outlier", "outliers"), n.Outliers, s.OutliersRejected, n.OutlierRequests)
		}
	}
	if n != nil && n.Outliers > 0 && target {
		fmt.Fprintf(b, "  note: a target counts the outliers like any client: what a limit refuses them counts against the share of requests rejected (they sent %s of all requests), and each of them it limits against the share of clients limited, so a target can leave the limit near an outlier's peak; a headroom suggestion sizes it from the busiest normal client instead\n",
			pct(n.OutlierShare))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// String describes the suggestion in one line.
func (s Suggestion) String() string {
	target := "rejects at most " + pct(s.Share) + " of requests"
	switch s.Target {
	case "limited":
		target = "limits at most " + pct(s.Share) + " of clients"
	case "headroom":
		target = fmt.Sprintf("headroom %gx over the busiest normal client's peak, %d per %s", s.Headroom, s.BusiestNormal, s.Period)
		if p := float64(s.BusiestNormal) * s.Headroom; math.Abs(p-float64(s.Limit)) > 1e-9 {
			target += fmt.Sprintf(" (%d x %g = %s, rounded up)", s.BusiestNormal, s.Headroom, strconv.FormatFloat(math.Round(p*1000)/1000, 'f', -1, 64))
		}
	}
	lim := fmt.Sprintf("%d/%s", s.Limit, s.Period)
	if s.Burst > 0 {
		lim += fmt.Sprintf(" burst %d", s.Burst)
	}
	if !s.Met {
		return fmt.Sprintf("%-22s %s: none found (%s)", s.Algorithm, target, s.Note)
	}
	if s.Target == "headroom" {
		return fmt.Sprintf("%-22s %s: %s (replayed: %s rejected, %d of %d clients limited; normal clients limited: %d of %d)",
			s.Algorithm, target, lim, pct(s.RejectedShare), s.ClientsLimited, s.Clients, s.NormalLimited, s.NormalClients)
	}
	missed := ""
	if s.Below > 0 {
		missed = fmt.Sprintf("; %d missed it", s.Below)
	}
	return fmt.Sprintf("%-22s %s: %s (replayed: %s rejected, %d of %d clients limited%s)",
		s.Algorithm, target, lim, pct(s.RejectedShare), s.ClientsLimited, s.Clients, missed)
}

func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.0001:
		return fmt.Sprintf("%.4f%%", f*100)
	case f < 0.01:
		return fmt.Sprintf("%.3f%%", f*100)
	}
	return fmt.Sprintf("%.1f%%", f*100)
}
