package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/dashboards/gen"
)

const regenerate = "run `go run ./dashboards/cmd/gendashboards` from the repository root (or `go generate ./dashboards`) and commit the result"

// TestDashboardsMatchGenerator fails when a checked-in dashboard differs
// from what the generator produces, or when a dashboards/*.json file is not
// produced by it at all.
func TestDashboardsMatchGenerator(t *testing.T) {
	files, err := gen.All()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		want = append(want, f.Name)
		generated, err := gen.Marshal(f.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := os.ReadFile(f.Name)
		if err != nil {
			t.Errorf("dashboards/%s is missing: %s", f.Name, regenerate)
			continue
		}
		if !bytes.Equal(onDisk, generated) {
			t.Errorf("dashboards/%s differs from what the generator produces (%s):\n%s", f.Name, regenerate, firstDifference(onDisk, generated))
		}
	}
	got, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range got {
		if !slices.Contains(want, name) {
			t.Errorf("dashboards/%s is not produced by the generator: delete it, or add it to gen.All", name)
		}
	}
}

// firstDifference describes the first line where two files differ.
func firstDifference(onDisk, generated []byte) string {
	a, b := strings.Split(string(onDisk), "\n"), strings.Split(string(generated), "\n")
	for i := 0; i < max(len(a), len(b)); i++ {
		var la, lb string
		if i < len(a) {
			la = a[i]
		}
		if i < len(b) {
			lb = b[i]
		}
		if la != lb || i >= len(a) || i >= len(b) {
			return fmt.Sprintf("line %d\n checked in: %s\n generated:  %s", i+1, la, lb)
		}
	}
	return "no line differs"
}

// jsonPanel is what the tests read of a panel in the checked-in JSON; rows
// carry nested panels.
type jsonPanel struct {
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Panels      []jsonPanel `json:"panels"`
	Targets     []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Exemplar   bool   `json:"exemplar"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Links []struct {
				URL string `json:"url"`
			} `json:"links"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type jsonDashboard struct {
	file       string
	Title      string      `json:"title"`
	Panels     []jsonPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Multi      bool   `json:"multi"`
			IncludeAll bool   `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

// checkedIn reads every dashboards/*.json.
func checkedIn(t *testing.T) []jsonDashboard {
	t.Helper()
	names, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"riffdb-fleet.json", "riffdb-outbox.json", "riffdb-primary.json"} {
		if !slices.Contains(names, want) {
			t.Fatalf("dashboards/%s is missing: %s", want, regenerate)
		}
	}
	var out []jsonDashboard
	for _, name := range names {
		var d jsonDashboard
		if err := json.Unmarshal([]byte(readFile(t, name)), &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d.file = name
		out = append(out, d)
	}
	return out
}

// panels returns every panel of d that is not a row, rows' nested panels
// included.
func (d jsonDashboard) panels() []jsonPanel {
	var out []jsonPanel
	var walk func([]jsonPanel)
	walk = func(ps []jsonPanel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVars substitutes the template variables the way the live
// Prometheus test does.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "15s", "$__range", "5m",
	"$instance", ".*", "$database", ".*")

var (
	alertName     = regexp.MustCompile(`\bRiffdb[A-Z][A-Za-z]+\b`)
	failureMarker = regexp.MustCompile(`Shows data only under failure: (\S+?)[.,;]?(\s|$)`)
	failureKinds  = []string{"paused", "degraded", "capacity", "conflict", "dead_letter"}
)

// TestPanelsAreDescribed checks that every panel's description asks the
// question it answers, names the alerts that relate to it (or says there is
// none), names only alerts that riffdb-rules.yml defines, and marks a
// failure-only panel with a known failure kind.
func TestPanelsAreDescribed(t *testing.T) {
	var alerts []string
	for _, r := range parseRules(t, readFile(t, rulesFile)) {
		if r.alert {
			alerts = append(alerts, r.name)
		}
	}
	for _, d := range checkedIn(t) {
		ps := d.panels()
		if len(ps) == 0 {
			t.Errorf("%s: no panels", d.file)
		}
		for _, p := range ps {
			where := fmt.Sprintf("%s: panel %q", d.file, p.Title)
			desc := p.Description
			switch {
			case strings.TrimSpace(desc) == "":
				t.Errorf("%s has no description", where)
				continue
			case !strings.Contains(desc, "?"):
				t.Errorf("%s: the description asks no question: %q", where, desc)
			}
			named := alertName.FindAllString(desc, -1)
			if len(named) == 0 && !strings.Contains(desc, "No alert") {
				t.Errorf("%s: the description names no alert and does not say \"No alert\": %q", where, desc)
			}
			for _, a := range named {
				if !slices.Contains(alerts, a) {
					t.Errorf("%s names alert %s, which %s does not define", where, a, rulesFile)
				}
			}
			if strings.Contains(desc, "Shows data only under failure") {
				m := failureMarker.FindStringSubmatch(desc)
				if m == nil || !slices.Contains(failureKinds, m[1]) {
					t.Errorf("%s: a failure marker must read \"Shows data only under failure: <kind>\" with kind one of %v: %q", where, failureKinds, desc)
				}
			}
		}
	}
}

// TestPanelQueriesFollowConventions checks the variables and what every
// query selects: the shared Prometheus data source, a reference id, the
// instance matcher on every selector, the database matcher on every riffdb
// series that carries the label, and exemplars with a trace link on every
// latency panel.
func TestPanelQueriesFollowConventions(t *testing.T) {
	selector := regexp.MustCompile(`([a-z_:]+)\{([^}]*)\}`)
	for _, d := range checkedIn(t) {
		vars := map[string]string{}
		for _, v := range d.Templating.List {
			vars[v.Name] = v.Type
			if (v.Name == "instance" || v.Name == "database") && !(v.Multi && v.IncludeAll) {
				t.Errorf("%s: variable %s must be multi-value with All", d.file, v.Name)
			}
		}
		for name, typ := range map[string]string{"datasource": "datasource", "tracing": "datasource", "instance": "query", "database": "query"} {
			if vars[name] != typ {
				t.Errorf("%s: variable %s is %q, want a %s variable", d.file, name, vars[name], typ)
			}
		}
		for _, p := range d.panels() {
			where := fmt.Sprintf("%s: panel %q", d.file, p.Title)
			if len(p.Targets) == 0 {
				t.Errorf("%s has no query", where)
			}
			latency := false
			for _, tg := range p.Targets {
				if tg.RefID == "" || tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: query %q needs a refId and the ${datasource} data source", where, tg.Expr)
				}
				for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
					if !strings.Contains(m[2], `instance=~"$instance"`) {
						t.Errorf("%s: selector %s lacks instance=~\"$instance\"", where, m[0])
					}
					if strings.HasPrefix(m[1], "riffdb_") && !strings.HasPrefix(m[1], "riffdb_server_") && !strings.Contains(m[2], `riffdb_database=~"$database"`) {
						t.Errorf("%s: selector %s lacks riffdb_database=~\"$database\"", where, m[0])
					}
				}
				if strings.Contains(tg.Expr, "histogram_quantile") {
					latency = true
					if !tg.Exemplar {
						t.Errorf("%s: latency query %s does not ask for exemplars", where, tg.RefID)
					}
				}
			}
			if latency && !slices.ContainsFunc(p.FieldConfig.Defaults.Links, func(l struct {
				URL string `json:"url"`
			}) bool {
				return strings.Contains(l.URL, "tracing") && strings.Contains(l.URL, "trace_id")
			}) {
				t.Errorf("%s: latency panel has no data link opening the trace_id on the ${tracing} data source", where)
			}
		}
	}
}

// query is one panel expression with the variables substituted.
type query struct {
	where, expr string
}

func panelQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, d := range checkedIn(t) {
		for _, p := range d.panels() {
			for _, tg := range p.Targets {
				out = append(out, query{
					where: fmt.Sprintf("%s: panel %q query %s", d.file, p.Title, tg.RefID),
					expr:  grafanaVars.Replace(tg.Expr),
				})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no panel queries found")
	}
	return out
}

// TestPanelQueriesParse runs every panel expression, variables substituted,
// through `promtool check rules` as a recording rule: promtool parses and
// type-checks PromQL without a server.
func TestPanelQueriesParse(t *testing.T) {
	promtool(t)
	qs := panelQueries(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard-queries\n    rules:\n")
	for i, q := range qs {
		fmt.Fprintf(&b, "      - record: dashboard_query_%d\n        expr: |\n          %s\n", i, q.expr)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "queries.yml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runPromtool(t, dir, "check", "rules", "queries.yml")
	if err == nil && strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", len(qs))) {
		return
	}
	for i, q := range qs {
		if strings.Contains(out, fmt.Sprintf("%q", fmt.Sprintf("dashboard_query_%d", i))) {
			t.Errorf("%s does not parse: %s", q.where, q.expr)
		}
	}
	t.Fatalf("promtool check rules on the panel queries: %v\n%s", err, out)
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	ranges     = regexp.MustCompile(`\[[^\]]*\]`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlWord = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "inf", "nan"}
)

// metricsIn returns the metric names an expression reads: identifiers that
// are not functions, keywords, labels, strings or durations.
func metricsIn(expr string) []string {
	expr = quoted.ReplaceAllString(expr, `""`)
	expr = labelLists.ReplaceAllString(expr, " ")
	expr = matchers.ReplaceAllString(expr, " ")
	expr = ranges.ReplaceAllString(expr, " ")
	var out []string
	for _, loc := range identifier.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[0] > 0 && (expr[loc[0]-1] == '.' || (expr[loc[0]-1] >= '0' && expr[loc[0]-1] <= '9')) {
			continue // a number such as 1e3 or 0.5
		}
		if strings.HasPrefix(strings.TrimLeft(expr[loc[1]:], " "), "(") || slices.Contains(promqlWord, strings.ToLower(name)) {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// TestPanelQueriesUseDocumentedMetrics checks that every panel reads only
// series docs/metrics.md documents, or the Go and process collectors' go_*
// and process_* series.
func TestPanelQueriesUseDocumentedMetrics(t *testing.T) {
	documented := documentedSeries(readFile(t, metricsDoc))
	for _, q := range panelQueries(t) {
		names := metricsIn(q.expr)
		if len(names) == 0 {
			t.Errorf("%s reads no metric: %s", q.where, q.expr)
		}
		for _, n := range names {
			if !documented[n] && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
				t.Errorf("%s reads %s, which %s does not document", q.where, n, metricsDoc)
			}
		}
	}
}

// TestMetricsIn pins the metric-name scanner.
func TestMetricsIn(t *testing.T) {
	got := metricsIn(`histogram_quantile(0.99, sum by (instance, le) (rate(riffdb_a_bucket{x="y{z}", riffdb_database=~".*"}[1m]))) ` +
		`/ on (instance) group_left (le) clamp_min(max(deriv(process_b[1h])), 1e3) or go_c offset 5m unless vector(0) > bool 1`)
	if want := []string{"riffdb_a_bucket", "process_b", "go_c"}; !slices.Equal(got, want) {
		t.Fatalf("metricsIn = %v, want %v", got, want)
	}
}
