package grafana_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metrics are the series the ratekitprom exporter produces, each with
// whether it carries a limit label.
var metrics = map[string]bool{
	"ratekit_requests_total":         true, // once per request, under the limit that decided it
	"ratekit_decisions_total":        true, // once per limit that decided a request
	"ratekit_near_limit_total":       true,
	"ratekit_actions_total":          true,
	"ratekit_store_duration_seconds": true,
	"ratekit_store_errors_total":     false,
	"ratekit_tracked_keys":           true,
}

// histograms are the metrics exposed as _bucket, _sum and _count series.
var histograms = []string{"ratekit_store_duration_seconds"}

const datasourceRef = "${datasource}"

var (
	metricName = regexp.MustCompile(`ratekit_[a-z_]+`)
	// selector matches a metric name and its label matchers, if any.
	selector = regexp.MustCompile(`(ratekit_[a-z_]+)(\{[^}]*\})?`)
)

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

type panel struct {
	ID          *int        `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	GridPos     *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	Datasource *datasource     `json:"datasource"`
}

type dashboard struct {
	Title         string   `json:"title"`
	UID           string   `json:"uid"`
	SchemaVersion int      `json:"schemaVersion"`
	Tags          []string `json:"tags"`
	Panels        []panel  `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("ratekit-dashboard.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d), "the dashboard is not valid JSON")
	return d
}

// knownSeries reports whether name is an exported metric or one of the
// series of an exported histogram.
func knownSeries(name string) bool {
	if _, ok := metrics[name]; ok {
		return true
	}
	for _, h := range histograms {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if name == h+suffix {
				return true
			}
		}
	}
	return false
}

// baseMetric strips a histogram series suffix.
func baseMetric(name string) string {
	for _, h := range histograms {
		if strings.HasPrefix(name, h) {
			return h
		}
	}
	return name
}

func TestDashboardTopLevel(t *testing.T) {
	d := load(t)
	assert.NotEmpty(t, d.Title, "title")
	assert.NotEmpty(t, d.UID, "uid")
	assert.LessOrEqual(t, len(d.UID), 40, "Grafana rejects uids longer than 40 characters")
	assert.GreaterOrEqual(t, d.SchemaVersion, 36, "schemaVersion")
	assert.Contains(t, d.Tags, "ratekit")
	require.NotEmpty(t, d.Panels, "panels")
}

func TestPanels(t *testing.T) {
	d := load(t)
	ids := map[int]string{}
	for i, p := range d.Panels {
		name := p.Title
		if name == "" {
			name = "panel #" + strconv.Itoa(i)
		}
		t.Run(name, func(t *testing.T) {
			require.NotNil(t, p.ID, "id")
			if other, dup := ids[*p.ID]; dup {
				t.Errorf("id %d is also used by %q", *p.ID, other)
			}
			ids[*p.ID] = p.Title

			assert.NotEmpty(t, p.Type, "type")
			assert.NotEmpty(t, p.Title, "title")
			assert.NotEmpty(t, p.Description, "description")

			require.NotNil(t, p.GridPos, "gridPos")
			g := p.GridPos
			assert.Positive(t, g.W, "gridPos.w")
			assert.Positive(t, g.H, "gridPos.h")
			assert.GreaterOrEqual(t, g.X, 0, "gridPos.x")
			assert.GreaterOrEqual(t, g.Y, 0, "gridPos.y")
			assert.LessOrEqual(t, g.X+g.W, 24, "gridPos.x + gridPos.w")

			require.NotNil(t, p.Datasource, "datasource")
			assert.Equal(t, datasourceRef, p.Datasource.UID, "panel datasource")
			assert.Equal(t, "prometheus", p.Datasource.Type, "panel datasource type")

			require.NotEmpty(t, p.Targets, "targets")
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				assert.NotEmpty(t, tg.RefID, "refId")
				assert.False(t, refs[tg.RefID], "duplicate refId %q", tg.RefID)
				refs[tg.RefID] = true
				if tg.Datasource != nil {
					assert.Equal(t, datasourceRef, tg.Datasource.UID, "target %s datasource", tg.RefID)
				}
				checkExpr(t, tg.Expr)
			}
		})
	}
}

// checkExpr checks that expr uses only exported metrics and that every
// selector of a metric with a limit label filters by the limit variable.
func checkExpr(t *testing.T, expr string) {
	t.Helper()
	names := metricName.FindAllString(expr, -1)
	require.NotEmpty(t, names, "expr %q uses no ratekit metric", expr)
	for _, n := range names {
		assert.True(t, knownSeries(n), "expr %q uses %s, which the exporter does not produce", expr, n)
	}
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		if !metrics[baseMetric(m[1])] {
			continue
		}
		assert.Contains(t, m[2], `limit=~"$limit"`, "expr %q: %s is not filtered by the limit variable", expr, m[1])
	}
}

func TestPanelsDoNotOverlap(t *testing.T) {
	d := load(t)
	type cell struct{ x, y int }
	owner := map[cell]string{}
	for _, p := range d.Panels {
		if p.GridPos == nil {
			continue // reported by TestPanels
		}
		g := p.GridPos
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				c := cell{x, y}
				if other, ok := owner[c]; ok {
					t.Errorf("panels %q and %q overlap at x=%d y=%d", other, p.Title, x, y)
					return
				}
				owner[c] = p.Title
			}
		}
	}
}

func TestTemplating(t *testing.T) {
	d := load(t)
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}

	ds, ok := vars["datasource"]
	require.True(t, ok, "no datasource variable")
	assert.Equal(t, "datasource", ds.Type)
	var dsQuery string
	require.NoError(t, json.Unmarshal(ds.Query, &dsQuery))
	assert.Equal(t, "prometheus", dsQuery)

	limit, ok := vars["limit"]
	require.True(t, ok, "no limit variable")
	assert.Equal(t, "query", limit.Type)
	var limitQuery string
	require.NoError(t, json.Unmarshal(limit.Query, &limitQuery))
	// Every limit that decided anything has ratekit_decisions_total series,
	// whichever its store; ratekit_tracked_keys is the memory stores' only.
	assert.Equal(t, "label_values(ratekit_decisions_total, limit)", limitQuery)
	assert.True(t, limit.Multi, "limit is multi-select")
	assert.True(t, limit.IncludeAll, "limit includes All")
	require.NotNil(t, limit.Datasource, "limit datasource")
	assert.Equal(t, datasourceRef, limit.Datasource.UID)
}

// panelMetrics is the metric each panel must query: the request panels
// count requests (once each), the per-limit panels each limit's
// decisions.
var panelMetrics = map[string]string{
	"Request rate":                                 "ratekit_requests_total",
	"Denial ratio":                                 "ratekit_requests_total",
	"Store errors":                                 "ratekit_store_errors_total",
	"p99 store latency":                            "ratekit_store_duration_seconds_bucket",
	"Decisions per second":                         "ratekit_decisions_total",
	"Denial ratio per limit":                       "ratekit_decisions_total",
	"Near-limit rate per limit":                    "ratekit_near_limit_total",
	"Store latency p50 / p99":                      "ratekit_store_duration_seconds_bucket",
	"Store errors per second":                      "ratekit_store_errors_total",
	"Tracked keys per limit":                       "ratekit_tracked_keys",
	"Fail-open / fail-closed decisions per second": "ratekit_decisions_total",
}

func TestPanelMetrics(t *testing.T) {
	d := load(t)
	seen := map[string]bool{}
	for _, p := range d.Panels {
		want, ok := panelMetrics[p.Title]
		if !assert.True(t, ok, "panel %q: add it to panelMetrics", p.Title) {
			continue
		}
		seen[p.Title] = true
		for _, tg := range p.Targets {
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				assert.Equal(t, want, n, "panel %q, target %s: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	for title := range panelMetrics {
		assert.True(t, seen[title], "no panel %q", title)
	}
}
