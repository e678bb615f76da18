// Package gen builds riffdb's Grafana dashboards with the Grafana Foundation
// SDK. The JSON files checked in under dashboards/ are its output: run
// `go run ./dashboards/cmd/gendashboards` (or `go generate ./dashboards`)
// after changing a dashboard here, and commit both.
//
// Every dashboard has the same template variables: datasource (the
// Prometheus data source), tracing (the uid of the tracing data source that
// exemplar links open), instance and database (multi-value, "All" matches
// every value). Every panel query selects its series with
// instance=~"$instance" and, for riffdb series that carry the label,
// riffdb_database=~"$database", and uses $__rate_interval for rate windows.
//
// Every panel's description says which question it answers and which alerts
// of dashboards/riffdb-rules.yml relate to it ("No alert" when none does).
// A panel that only has data while something is wrong says so with the text
// "Shows data only under failure: <kind>".
package gen

//lint:file-ignore SA1019 The SDK deprecates the v1 dashboard schema in favour of dashboardv2, but v1 (schemaVersion 42) is the JSON every Grafana imports; v2 needs Grafana 12 and its v2 API.

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// File is one generated dashboard and the name of its JSON file in
// dashboards/.
type File struct {
	Name      string
	Dashboard dashboard.Dashboard
}

// All builds every dashboard, in a stable order.
func All() ([]File, error) {
	builders := []struct {
		name  string
		build func() (dashboard.Dashboard, error)
	}{
		{"riffdb-fleet.json", Fleet},
		{"riffdb-outbox.json", Outbox},
		{"riffdb-primary.json", Primary},
	}
	files := make([]File, 0, len(builders))
	for _, b := range builders {
		d, err := b.build()
		if err != nil {
			return nil, fmt.Errorf("gen: %s: %w", b.name, err)
		}
		files = append(files, File{Name: b.name, Dashboard: d})
	}
	return files, nil
}

// Marshal returns the JSON that is checked in for d: indented with two
// spaces and ending in a newline.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("gen: marshal dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

// promDS is the Prometheus data source every panel queries.
var promDS = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Selectors used by panel queries. sel covers the riffdb series that carry
// riffdb_database; inst covers the HTTP, Go and process series, which do not.
const (
	sel  = `instance=~"$instance", riffdb_database=~"$database"`
	inst = `instance=~"$instance"`
)

// newDashboard returns a builder with riffdb's common settings, variables
// and links to the other riffdb dashboards.
func newDashboard(uid, title, description string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"riffdb", "generated"}).
		Editable().
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("riffdb").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"riffdb"}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Prometheus").
			Description("The Prometheus data source that scrapes riffdb's metrics listener.").
			Type("prometheus")).
		WithVariable(dashboard.NewDatasourceVariableBuilder("tracing").
			Label("Tracing").
			Description("The tracing data source (Jaeger) whose uid exemplar links open.").
			Type("jaeger")).
		WithVariable(dashboard.NewQueryVariableBuilder("instance").
			Label("Instance").
			Description("riffdb servers: the instance label of their scrape target.").
			Datasource(promDS).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values({__name__=~"riffdb_.+"}, instance)`)}).
			Definition(`label_values({__name__=~"riffdb_.+"}, instance)`).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			AllValue(".*")).
		WithVariable(dashboard.NewQueryVariableBuilder("database").
			Label("Database").
			Description("Database aliases (the riffdb_database label).").
			Datasource(promDS).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(riffdb_database)`)}).
			Definition(`label_values(riffdb_database)`).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			AllValue(".*"))
}

// finish builds d and numbers its panels, rows included, from 1 in order.
func finish(b *dashboard.DashboardBuilder) (dashboard.Dashboard, error) {
	d, err := b.Build()
	if err != nil {
		return d, err
	}
	id := uint32(0)
	for i := range d.Panels {
		id++
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			p.Panel.Id = cog.ToPtr(id)
		case p.RowPanel != nil:
			p.RowPanel.Id = id
			for j := range p.RowPanel.Panels {
				id++
				p.RowPanel.Panels[j].Id = cog.ToPtr(id)
			}
		}
	}
	return d, nil
}

// target is one query of a panel.
type target struct {
	expr, legend string
	instant      bool
	exemplar     bool
}

func q(expr, legend string) target { return target{expr: expr, legend: legend} }

// queries returns builders for ts with reference ids A, B, C… in order.
func queries(ts []target) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(ts))
	for i, t := range ts {
		b := prometheus.NewDataqueryBuilder().
			Datasource(promDS).
			RefId(string(rune('A' + i))).
			Expr(t.expr).
			LegendFormat(t.legend)
		if t.instant {
			b = b.Instant().Format(prometheus.PromQueryFormatTable)
		} else {
			b = b.Range()
		}
		if t.exemplar {
			b = b.Exemplar(true)
		}
		out = append(out, b)
	}
	return out
}

// traceLinks are the data links of latency panels: an exemplar's trace_id
// opens the trace in Explore on the tracing data source.
func traceLinks() []cog.Builder[dashboard.DashboardLink] {
	left := `{"datasource":"${tracing}","queries":[{"refId":"A","datasource":{"uid":"${tracing}"},"query":"${__data.fields.trace_id}"}],"range":{"from":"now-1h","to":"now"}}`
	return []cog.Builder[dashboard.DashboardLink]{
		dashboard.NewDashboardLinkBuilder("Open trace ${__data.fields.trace_id}").
			Type(dashboard.DashboardLinkTypeLink).
			Url("/explore?left=" + url.QueryEscape(left)).
			TargetBlank(true),
	}
}

// quantiles returns the p50 and p99 queries of a histogram, grouped by the
// given labels (comma-separated, empty for one series), with exemplars.
func quantiles(metric, matchers, by string) []target {
	group := "le"
	legend := ""
	if by != "" {
		group = by + ", le"
		legend = labelsLegend(by) + " "
	}
	var out []target
	for _, p := range []struct{ q, name string }{{"0.5", "p50"}, {"0.99", "p99"}} {
		out = append(out, target{
			expr: fmt.Sprintf(`histogram_quantile(%s, sum by (%s) (rate(%s_bucket{%s}[$__rate_interval])))`,
				p.q, group, metric, matchers),
			legend:   legend + p.name,
			exemplar: true,
		})
	}
	return out
}

// labelsLegend turns "a, b" into "{{a}} {{b}}".
func labelsLegend(by string) string {
	out := ""
	for i, l := range splitLabels(by) {
		if i > 0 {
			out += " "
		}
		out += "{{" + l + "}}"
	}
	return out
}

func splitLabels(by string) []string {
	var out []string
	cur := ""
	for _, r := range by + "," {
		switch r {
		case ',':
			if cur != "" {
				out = append(out, cur)
			}
			cur = ""
		case ' ':
		default:
			cur += string(r)
		}
	}
	return out
}
