package replay

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteHTML writes the report as one self-contained HTML page: inline
// SVG charts of requests and admissions over time, of the clients' peak
// rates with the limit marked, and of the algorithms side by side, and
// the report's tables. It fetches nothing and runs no script.
func (rep *Report) WriteHTML(w io.Writer) error {
	return page.Execute(w, rep.view())
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"}

// chart geometry, in SVG user units.
const (
	chartW, chartH = 960.0, 300.0
	padL, padR     = 70.0, 20.0
	padT, padB     = 20.0, 40.0
)

type htmlView struct {
	R         *Report
	Title     string
	Time      *lineChart
	Dist      *barChart
	Compare   *compareChart
	Text      string
	Generated string
}

type tick struct {
	X, Y  float64
	Label string
}

type line struct {
	Name, Color, Points string
	Dash                bool
}

type lineChart struct {
	W, H, Left, Right, Top, Bottom float64
	XTicks, YTicks                 []tick
	Lines                          []line
	YLabel                         string
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

type marker struct {
	X, Y1, Y2 float64
	Label     string
	Color     string
	LabelY    float64
}

type barChart struct {
	W, H, Left, Right, Top, Bottom float64
	XTicks, YTicks                 []tick
	Bars                           []bar
	Markers                        []marker
	XLabel                         string
}

type hbar struct {
	Label     string
	Y         float64
	Rejected  float64 // width
	Limited   float64
	RejText   string
	LimText   string
	Burst     float64
	BurstText string
	Color     string
}

type compareChart struct {
	W, H, Mid, Scale float64
	Rows             []hbar
}

// niceStep returns a round step that cuts max into about n parts.
func niceStep(max float64, n int) float64 {
	if max <= 0 {
		return 1
	}
	raw := max / float64(n)
	mag := 1.0
	for mag*10 <= raw {
		mag *= 10
	}
	for mag > raw {
		mag /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func fnum(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

func (rep *Report) view() htmlView {
	v := htmlView{R: rep, Title: "ratekit replay: " + strings.Join(rep.Inputs, ", ")}
	var sb strings.Builder
	_ = rep.WriteText(&sb)
	v.Text = sb.String()
	v.Time = rep.timeChart()
	v.Dist = rep.distChart()
	if len(rep.Limits) > 1 {
		v.Compare = rep.compareChart()
	}
	return v
}

func (rep *Report) timeChart() *lineChart {
	s := rep.Series
	n := len(s.Requests)
	if n == 0 {
		return nil
	}
	step, _ := time.ParseDuration(s.Step)
	c := &lineChart{W: chartW, H: chartH, Left: padL, Right: chartW - padR, Top: padT, Bottom: chartH - padB,
		YLabel: "requests per " + s.Step}
	var top int64 = 1
	for _, x := range s.Requests {
		top = max(top, x)
	}
	ys := niceStep(float64(top), 5)
	ymax := ys * float64(int(float64(top)/ys)+1)
	x := func(i int) float64 { return c.Left + (c.Right-c.Left)*float64(i)/float64(max(n, 1)) }
	y := func(val int64) float64 { return c.Bottom - (c.Bottom-c.Top)*float64(val)/ymax }
	for t := 0.0; t <= ymax; t += ys {
		c.YTicks = append(c.YTicks, tick{X: c.Left - 6, Y: y(int64(t)), Label: strconv.FormatInt(int64(t), 10)})
	}
	span := time.Duration(n) * step
	xs := niceDuration(span / 6)
	for d := time.Duration(0); d < span; d += xs {
		c.XTicks = append(c.XTicks, tick{X: c.Left + (c.Right-c.Left)*float64(d)/float64(span), Y: c.Bottom + 18,
			Label: s.Start.Add(d).Format("15:04:05")})
	}
	pts := func(vals []int64) string {
		var b strings.Builder
		for i, val := range vals {
			// A step: flat across the bucket.
			fmt.Fprintf(&b, "%s,%s %s,%s ", fnum(x(i)), fnum(y(val)), fnum(x(i+1)), fnum(y(val)))
		}
		return b.String()
	}
	c.Lines = append(c.Lines, line{Name: "sent", Color: "#555", Points: pts(s.Requests), Dash: true})
	for i, a := range s.Admitted {
		c.Lines = append(c.Lines, line{Name: "admitted: " + a.Name, Color: palette[i%len(palette)], Points: pts(a.Counts)})
	}
	return c
}

func niceDuration(d time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
		5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour} {
		if s >= d {
			return s
		}
	}
	return 24 * time.Hour * time.Duration(int64(d/(24*time.Hour))+1)
}

func (rep *Report) distChart() *barChart {
	if len(rep.Limits) == 0 || len(rep.Limits[0].Distribution.Histogram) == 0 {
		return nil
	}
	d := rep.Limits[0].Distribution
	c := &barChart{W: chartW, H: chartH, Left: padL, Right: chartW - padR, Top: padT, Bottom: chartH - padB,
		XLabel: "peak requests sent in one " + d.Period + " (per client)"}
	limit := rep.Limits[0].Limit
	xmax := float64(max(d.Max, limit) + 1)
	for _, s := range rep.Suggestions {
		if s.Met {
			xmax = max(xmax, float64(s.Limit+1))
		}
	}
	xmax *= 1.05
	x := func(v float64) float64 { return c.Left + (c.Right-c.Left)*v/xmax }
	top := 1
	for _, b := range d.Histogram {
		top = max(top, b.Clients)
	}
	ys := niceStep(float64(top), 5)
	ymax := ys * float64(int(float64(top)/ys)+1)
	y := func(v float64) float64 { return c.Bottom - (c.Bottom-c.Top)*v/ymax }
	for t := 0.0; t <= ymax; t += ys {
		c.YTicks = append(c.YTicks, tick{X: c.Left - 6, Y: y(t), Label: strconv.Itoa(int(t))})
	}
	xs := niceStep(xmax, 8)
	for t := 0.0; t <= xmax; t += xs {
		c.XTicks = append(c.XTicks, tick{X: x(t), Y: c.Bottom + 18, Label: strconv.Itoa(int(t))})
	}
	for _, b := range d.Histogram {
		x0, x1 := x(float64(b.Low)-0.5), x(float64(b.High)+0.5)
		c.Bars = append(c.Bars, bar{X: x0, W: max(x1-x0-1, 1), Y: y(float64(b.Clients)), H: c.Bottom - y(float64(b.Clients)),
			Title: fmt.Sprintf("%d clients peaked at %d to %d", b.Clients, b.Low, b.High)})
	}
	add := func(at int, label, color string) {
		c.Markers = append(c.Markers, marker{X: x(float64(at)), Y1: c.Top, Y2: c.Bottom, Label: label, Color: color,
			LabelY: c.Top + 12 + 14*float64(len(c.Markers))})
	}
	add(limit, "limit "+strconv.Itoa(limit), "#d62728")
	for _, s := range rep.Suggestions {
		if s.Met && s.Algorithm == rep.Limits[0].Algorithm {
			why := s.Target + " ≤ " + pct(s.Share)
			if s.Target == "headroom" {
				why = "headroom " + strconv.FormatFloat(s.Headroom, 'g', -1, 64) + "x"
			}
			add(s.Limit, "suggested "+strconv.Itoa(s.Limit)+" ("+why+")", "#2ca02c")
		}
	}
	for _, q := range []struct {
		name string
		v    int
	}{{"p50", d.P50}, {"p99", d.P99}} {
		add(q.v, q.name+" "+strconv.Itoa(q.v), "#777")
	}
	return c
}

func (rep *Report) compareChart() *compareChart {
	c := &compareChart{W: chartW, Mid: 160, Scale: 250}
	maxShare := 0.0
	for _, l := range rep.Limits {
		maxShare = max(maxShare, l.RejectedShare, l.LimitedShare)
	}
	if maxShare == 0 {
		maxShare = 1
	}
	maxBurst := 1.0
	for _, l := range rep.Limits {
		maxBurst = max(maxBurst, float64(l.MaxAdmittedInPeriod)/float64(max(l.Limit, 1)))
	}
	for i, l := range rep.Limits {
		name := l.Algorithm
		if rep.Rules != "" {
			name = l.Name
		}
		c.Rows = append(c.Rows, hbar{
			Label: name, Y: 40 + 50*float64(i), Color: palette[i%len(palette)],
			Rejected: c.Scale * l.RejectedShare / maxShare, RejText: "rejected " + pct(l.RejectedShare),
			Limited: c.Scale * l.LimitedShare / maxShare, LimText: "clients limited " + pct(l.LimitedShare),
			Burst:     140 * float64(l.MaxAdmittedInPeriod) / float64(max(l.Limit, 1)) / maxBurst,
			BurstText: fmt.Sprintf("%s (%.2fx the limit)", l.maxAdmitted(), float64(l.MaxAdmittedInPeriod)/float64(max(l.Limit, 1))),
		})
	}
	c.H = 40 + 50*float64(len(rep.Limits)) + 10
	return c
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":  pct,
	"f":    fnum,
	"when": func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") },
	"add":  func(a, b float64) float64 { return a + b },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1000px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.muted { color: #666; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f6f6f6; }
svg { display: block; background: #fff; border: 1px solid #eee; margin: 8px 0; }
svg text { font: 11px system-ui, sans-serif; fill: #333; paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.legend span { margin-right: 18px; white-space: nowrap; font-size: 12px; }
.axis { stroke: #999; }
.grid { stroke: #eee; }
pre { background: #f8f8f8; padding: 10px; overflow-x: auto; font-size: 12px; }
code { font-size: 12px; }
</style>
</head>
<body>
<h1>ratekit replay</h1>
<div class="muted">{{range $i, $in := .R.Inputs}}{{if $i}}, {{end}}<code>{{$in}}</code>{{end}} ({{.R.Format}}){{if not .R.Start.IsZero}}: {{when .R.Start}} to {{when .R.End}}{{end}}</div>
<p>{{.R.Lines}} lines: {{.R.Requests}} requests replayed, {{.R.BadLines}} bad lines, {{.R.OutOfOrder}} out of order (replayed at the latest time seen), {{.R.Unkeyed}} without a key.{{with .R.ClientCap}} The client cap ({{.Clients}} clients) was reached at {{.Input}}:{{.Line}}: {{$.R.Untracked}} requests of clients first seen after it were not replayed.{{end}}
{{if .R.PeakPerSecond.Count}}Busiest second: {{.R.PeakPerSecond.Count}} requests at {{when .R.PeakPerSecond.At}}.{{end}}</p>

<h2>Limits</h2>
<table>
<tr><th>limit</th><th>algorithm</th><th>requests</th><th>admitted</th><th>rejected</th><th>clients</th><th>limited</th><th>most admitted to one client in a period</th></tr>
{{range .R.Limits}}<tr><td>{{if $.R.Rules}}{{.Name}}{{else}}{{.Limit}}/{{.Period}}{{if .Burst}} burst {{.Burst}}{{end}}{{end}}{{if .Shadow}} (shadow){{end}}</td><td>{{.Algorithm}}</td><td>{{.Requests}}</td><td>{{.Admitted}}{{if .NotDecided}} ({{.NotDecided}} not decided: rejected by another rule){{end}}</td><td>{{.Rejected}} ({{pct .RejectedShare}})</td><td>{{.Clients}}</td><td>{{.ClientsLimited}} ({{pct .LimitedShare}})</td><td>{{if .Saturated}}at least {{end}}{{.MaxAdmittedInPeriod}} of {{.Limit}}</td></tr>
{{end}}</table>

{{with .Time}}
<h2>Requests and admissions over time</h2>
<svg width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="requests and admissions over time">
{{range .YTicks}}<line class="grid" x1="{{$.Time.Left}}" x2="{{$.Time.Right}}" y1="{{f .Y}}" y2="{{f .Y}}"/><text x="{{f .X}}" y="{{f .Y}}" dy="4" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<line class="axis" x1="{{f .X}}" x2="{{f .X}}" y1="{{$.Time.Bottom}}" y2="{{add $.Time.Bottom 5}}"/><text x="{{f .X}}" y="{{f .Y}}" text-anchor="middle">{{.Label}}</text>
{{end}}<line class="axis" x1="{{.Left}}" x2="{{.Right}}" y1="{{.Bottom}}" y2="{{.Bottom}}"/><line class="axis" x1="{{.Left}}" x2="{{.Left}}" y1="{{.Top}}" y2="{{.Bottom}}"/>
<text x="14" y="{{.Top}}" transform="rotate(-90 14 {{.Top}})" text-anchor="end">{{.YLabel}}</text>
{{range .Lines}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5"{{if .Dash}} stroke-dasharray="4 3"{{end}} points="{{.Points}}"/>
{{end}}</svg>
<div class="legend">{{range .Lines}}<span><svg width="22" height="10" style="display:inline;border:0;margin:0"><line x1="0" x2="22" y1="5" y2="5" stroke="{{.Color}}" stroke-width="2"{{if .Dash}} stroke-dasharray="4 3"{{end}}/></svg> {{.Name}}</span>{{end}}</div>
{{end}}

{{with .Dist}}
<h2>Clients' peak rates</h2>
<p class="muted">Each client's most requests sent in any interval one period long, whatever was admitted; the red line is the limit replayed.</p>
<svg width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="per-client rate distribution">
{{range .YTicks}}<line class="grid" x1="{{$.Dist.Left}}" x2="{{$.Dist.Right}}" y1="{{f .Y}}" y2="{{f .Y}}"/><text x="{{f .X}}" y="{{f .Y}}" dy="4" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<line class="axis" x1="{{f .X}}" x2="{{f .X}}" y1="{{$.Dist.Bottom}}" y2="{{add $.Dist.Bottom 5}}"/><text x="{{f .X}}" y="{{f .Y}}" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .Bars}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}" fill="#1f77b4" fill-opacity="0.75"><title>{{.Title}}</title></rect>
{{end}}<line class="axis" x1="{{.Left}}" x2="{{.Right}}" y1="{{.Bottom}}" y2="{{.Bottom}}"/><line class="axis" x1="{{.Left}}" x2="{{.Left}}" y1="{{.Top}}" y2="{{.Bottom}}"/>
<text x="{{.Right}}" y="{{add .Bottom 34}}" text-anchor="end">{{.XLabel}}</text>
<text x="14" y="{{.Top}}" transform="rotate(-90 14 {{.Top}})" text-anchor="end">clients</text>
{{range .Markers}}<line x1="{{f .X}}" x2="{{f .X}}" y1="{{f .Y1}}" y2="{{f .Y2}}" stroke="{{.Color}}" stroke-width="2" stroke-dasharray="5 3"/><text x="{{add .X 4}}" y="{{f .LabelY}}" fill="{{.Color}}">{{.Label}}</text>
{{end}}</svg>
{{end}}

{{with .Compare}}
<h2>Algorithms side by side</h2>
<svg width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="algorithm comparison">
<text x="{{.Mid}}" y="20">share of requests rejected (upper bar) and of clients limited (lower bar)</text>
<text x="{{add .Mid 430}}" y="20">most admitted to one client in one period</text>
{{range .Rows}}<text x="{{add $.Compare.Mid -10}}" y="{{add .Y 16}}" text-anchor="end">{{.Label}}</text>
<rect x="{{$.Compare.Mid}}" y="{{f .Y}}" width="{{f .Rejected}}" height="14" fill="{{.Color}}"/><text x="{{add $.Compare.Mid (add .Rejected 4)}}" y="{{add .Y 11}}">{{.RejText}}</text>
<rect x="{{$.Compare.Mid}}" y="{{add .Y 18}}" width="{{f .Limited}}" height="14" fill="{{.Color}}" fill-opacity="0.45"/><text x="{{add $.Compare.Mid (add .Limited 4)}}" y="{{add .Y 29}}">{{.LimText}}</text>
<rect x="{{add $.Compare.Mid 430}}" y="{{add .Y 8}}" width="{{f .Burst}}" height="14" fill="#999"/><text x="{{add (add $.Compare.Mid 434) .Burst}}" y="{{add .Y 19}}">{{.BurstText}}</text>
{{end}}</svg>
{{end}}

{{with .R.CounterVsLog}}
<h2>Sliding window counter vs exact log</h2>
<p>At {{.Limit}} per {{.Period}}, {{.Differ}} of {{.Requests}} decisions differ ({{pct .DifferShare}}): {{.CounterOnly}} admitted by the counter only, {{.LogOnly}} by the log only. The most one client got admitted in one period: counter {{.CounterMaxAdmitted}}, log {{.LogMaxAdmitted}}.</p>
{{end}}

{{if .R.Suggestions}}
<h2>Suggested limits</h2>
<p class="muted">For a target, the smallest limit found that met it when the log was replayed through it; for a headroom, the busiest normal client's peak times the headroom, rounded up, replayed (buckets with a burst equal to the limit).</p>
{{with .R.Normal}}<p>Normal clients: {{.Clients}}, whose peak is at most {{.OutlierAbove}} per {{.Period}} ({{.Factor}}x the median client's peak, {{.MedianPeak}}); the busiest, <code>{{.BusiestClient}}</code>, peaked at {{.BusiestPeak}}. Outliers: {{.Outliers}}, which sent {{.OutlierRequests}} requests ({{pct .OutlierShare}} of all). A target counts the outliers like any client, so it can leave the limit near an outlier's peak; a headroom suggestion is sized from the busiest normal client alone.</p>{{end}}
<table>
<tr><th>algorithm</th><th>target</th><th>limit</th><th>rejected</th><th>clients limited</th><th>normal clients limited</th><th>outliers' requests refused</th><th>largest tried that missed</th></tr>
{{range .R.Suggestions}}<tr><td>{{.Algorithm}}</td><td>{{if eq .Target "reject"}}≤ {{pct .Share}} of requests rejected{{else if eq .Target "limited"}}≤ {{pct .Share}} of clients limited{{else}}headroom {{.Headroom}}x over the busiest normal client's peak, {{.BusiestNormal}}{{end}}</td>
{{if .Met}}<td>{{.Limit}}/{{.Period}}{{if .Burst}} burst {{.Burst}}{{end}}</td><td>{{.Rejected}} ({{pct .RejectedShare}})</td><td>{{.ClientsLimited}} of {{.Clients}}</td><td>{{.NormalLimited}} of {{.NormalClients}}</td><td>{{if $.R.Normal}}{{.OutliersRejected}} of {{$.R.Normal.OutlierRequests}}{{end}}{{range .Outliers}}<br><code>{{.Key}}</code>: {{.Rejected}} of {{.Requests}}{{end}}</td><td>{{if .Below}}{{.Below}}{{else}}none{{end}}</td>{{else}}<td colspan="6">{{.Note}}</td>{{end}}</tr>
{{end}}</table>
{{end}}

<h2>Most limited clients</h2>
{{range .R.Limits}}<h3 style="font-size:14px">{{.Algorithm}} {{.Limit}}/{{.Period}}{{if $.R.Rules}} ({{.Name}}){{end}}</h3>
{{if .TopLimited}}<table><tr><th>client</th><th>requests</th><th>rejected</th><th>peak per {{.Period}}</th></tr>
{{range .TopLimited}}<tr><td><code>{{.Key}}</code></td><td>{{.Requests}}</td><td>{{.Rejected}}</td><td>{{.Peak}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No client limited.</p>{{end}}
{{end}}

<h2>Text report</h2>
<pre>{{.Text}}</pre>
</body>
</html>
`))
