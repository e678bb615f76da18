package e2e_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// promServer is a real Prometheus server on loopback, with a temporary
// configuration and data directory, killed when the test ends.
type promServer struct {
	t      *testing.T
	addr   string
	rules  string // the original rule file
	copy   string // the test copy of the alerting rules
	cmd    *exec.Cmd
	output *syncBuffer
	exited chan struct{}
}

// freeAddr returns a loopback address whose port was free a moment ago. The
// server's metrics listener needs a fixed address: Prometheus keeps scraping
// it across the restarts the test makes.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

// pinMetricsListen gives the configuration's metrics listener a fixed
// address.
func (e *env) pinMetricsListen(addr string) {
	e.t.Helper()
	b, err := os.ReadFile(e.config)
	must(e.t, err)
	const from = `metrics_listen = "127.0.0.1:0"`
	if !strings.Contains(string(b), from) {
		e.t.Fatal("the configuration has no metrics_listen on port 0")
	}
	must(e.t, os.WriteFile(e.config, []byte(strings.Replace(string(b), from, fmt.Sprintf("metrics_listen = %q", addr), 1)), 0o600))
}

var quotaLine = regexp.MustCompile(`(?m)^quota_encoded_bytes = \d+$`)

// setQuota rewrites the outbox quota of the configuration.
func (e *env) setQuota(n int64) {
	e.t.Helper()
	b, err := os.ReadFile(e.config)
	must(e.t, err)
	if !quotaLine.Match(b) {
		e.t.Fatal("the configuration has no quota_encoded_bytes line")
	}
	must(e.t, os.WriteFile(e.config, quotaLine.ReplaceAll(b, fmt.Appendf(nil, "quota_encoded_bytes = %d", n)), 0o600))
}

var outboxOptionLine = regexp.MustCompile(`(?m)^(scrub_pages_per_second|full_validation_interval) = .*\n`)

// setOutboxOptions replaces the scrub and full validation options of the
// configuration's outbox section with lines ("" removes them).
func (e *env) setOutboxOptions(lines string) {
	e.t.Helper()
	b, err := os.ReadFile(e.config)
	must(e.t, err)
	b = outboxOptionLine.ReplaceAll(b, nil)
	loc := quotaLine.FindIndex(b)
	if loc == nil {
		e.t.Fatal("the configuration has no quota_encoded_bytes line")
	}
	out := append(append(append([]byte(nil), b[:loc[1]+1]...), lines...), b[loc[1]+1:]...)
	must(e.t, os.WriteFile(e.config, out, 0o600))
}

var (
	ruleGroupStart = regexp.MustCompile(`(?m)^  - name: `)
	forDuration    = regexp.MustCompile(`(?m)^(\s+for: )\S+$`)
	minuteRange    = regexp.MustCompile(`\[\d+m\]`)
	minuteOffset   = regexp.MustCompile(`offset \d+m\b`)
)

// copyLabel is a label every alert of the test copy carries, which tells
// its alerts from those of the original rule file in /api/v1/alerts.
const copyLabel = "riffdb_rules_copy"

// alertingRulesCopy returns the alerting groups of a rule file on a short
// time scale: every `for:` becomes forD, and every range and offset in
// minutes in an alert's expression becomes window, so that an alert that
// holds for a window after an event (a refusal, a dead letter: counters
// that a restart resets) returns to inactive within the test. The recording
// groups are left out: Prometheus loads them from the original file, and
// the same rule loaded twice would write the same series twice. Every alert
// of the copy carries the label copyLabel="short".
func alertingRulesCopy(t *testing.T, rules, forD, window string) (string, int) {
	t.Helper()
	starts := ruleGroupStart.FindAllStringIndex(rules, -1)
	if len(starts) == 0 {
		t.Fatal("the rule file has no groups")
	}
	out := "groups:\n"
	groups := 0
	for i, s := range starts {
		end := len(rules)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		g := rules[s[0]:end]
		if strings.Contains(g, "\n      - record: ") {
			continue
		}
		g = forDuration.ReplaceAllString(g, "${1}"+forD)
		g = minuteRange.ReplaceAllString(g, "["+window+"]")
		g = minuteOffset.ReplaceAllString(g, "offset "+window)
		if strings.Count(g, "\n      - alert: ") != strings.Count(g, "\n        labels: {") {
			t.Fatal("an alert of the rule file has no one-line labels map: the test copy cannot mark its alerts")
		}
		g = strings.ReplaceAll(g, "\n        labels: {", "\n        labels: {"+copyLabel+": short, ")
		out += g + "\n"
		groups++
	}
	return out, groups
}

// startPrometheus runs prometheus scraping target every second with
// OpenMetrics negotiation (its default) and exemplar storage, evaluating
// the rule file and the test copy of its alerts every second.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found on PATH (Debian package prometheus: apt-get install prometheus, or scripts/install-test-deps.sh); live Prometheus test skipped")
	}
	rules, err := filepath.Abs("../dashboards/riffdb-rules.yml")
	must(t, err)
	src, err := os.ReadFile(rules)
	must(t, err)
	dir := t.TempDir()
	ps := &promServer{t: t, addr: freeAddr(t), rules: rules, copy: filepath.Join(dir, "riffdb-rules-short.yml"),
		output: &syncBuffer{}, exited: make(chan struct{})}
	short, groups := alertingRulesCopy(t, string(src), "2s", "30s")
	if groups == 0 {
		t.Fatal("the rule file has no alerting groups")
	}
	must(t, os.WriteFile(ps.copy, []byte(short), 0o600))
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
  - %q
scrape_configs:
  - job_name: riffdb
    static_configs:
      - targets: [%q]
`, rules, ps.copy, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	must(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
	ps.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+ps.addr, "--enable-feature=exemplar-storage", "--log.level=warn")
	ps.cmd.Stdout, ps.cmd.Stderr = ps.output, ps.output
	must(t, ps.cmd.Start())
	go func() { _ = ps.cmd.Wait(); close(ps.exited) }()
	t.Cleanup(func() {
		_ = ps.cmd.Process.Signal(syscall.SIGKILL)
		<-ps.exited
	})
	waitFor(t, 60*time.Second, "prometheus to be ready", func() bool {
		select {
		case <-ps.exited:
			t.Fatalf("prometheus exited:\n%s", ps.output.String())
		default:
		}
		resp, err := httpClient.Get("http://" + ps.addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ps
}

// get calls the HTTP API and decodes the data of a successful answer into
// data. An answer with status error is returned as an error naming its type.
func (ps *promServer) get(path string, params url.Values, data any) error {
	resp, err := httpClient.Get("http://" + ps.addr + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// query evaluates expr at the current time and returns the number of
// series (or 1 for a scalar or string).
func (ps *promServer) query(expr string) (int, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := ps.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	switch data.ResultType {
	case "vector", "matrix":
		var series []json.RawMessage
		if err := json.Unmarshal(data.Result, &series); err != nil {
			return 0, err
		}
		return len(series), nil
	default:
		return 1, nil
	}
}

// promRule is one rule of /api/v1/rules.
type promRule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Type      string `json:"type"`
	State     string `json:"state"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	Alerts    []struct {
		State string `json:"state"`
	} `json:"alerts"`
}

// rules returns the rules Prometheus loaded from file.
func (ps *promServer) rulesOf(file string) []promRule {
	ps.t.Helper()
	var data struct {
		Groups []struct {
			File  string     `json:"file"`
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	must(ps.t, ps.get("/api/v1/rules", nil, &data))
	var out []promRule
	for _, g := range data.Groups {
		if g.File == file {
			out = append(out, g.Rules...)
		}
	}
	return out
}

// alertState returns the state of the alerting rule name of the test copy
// ("inactive", "pending" or "firing"), and whether /api/v1/alerts lists a
// firing alert of that name from the copy.
func (ps *promServer) alertState(name string) (string, bool) {
	ps.t.Helper()
	state := ""
	for _, r := range ps.rulesOf(ps.copy) {
		if r.Name == name {
			state = r.State
		}
	}
	if state == "" {
		ps.t.Fatalf("the test copy of the rules has no alert %s", name)
	}
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	must(ps.t, ps.get("/api/v1/alerts", nil, &data))
	listed := false
	for _, a := range data.Alerts {
		listed = listed || (a.Labels["alertname"] == name && a.Labels[copyLabel] == "short" && a.State == "firing")
	}
	return state, listed
}

// waitAlert waits until the alert name of the test copy is firing (in the
// rule's state and in /api/v1/alerts), or, with firing false, inactive.
func (ps *promServer) waitAlert(t *testing.T, name string, firing bool) {
	t.Helper()
	want := "inactive"
	if firing {
		want = "firing"
	}
	last := ""
	deadline := time.Now().Add(60 * time.Second)
	for {
		state, listed := ps.alertState(name)
		last = fmt.Sprintf("rule state %q, listed firing in /api/v1/alerts %v", state, listed)
		if state == want && listed == firing {
			t.Logf("alert %s: %s", name, want)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alert %s did not become %s within 60s: %s", name, want, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// exemplarTraceIDs returns the trace ids of the exemplars Prometheus stored
// for series since start.
func (ps *promServer) exemplarTraceIDs(series string, start time.Time) ([]string, error) {
	var data []struct {
		Exemplars []struct {
			Labels map[string]string `json:"labels"`
		} `json:"exemplars"`
	}
	params := url.Values{"query": {series},
		"start": {strconv.FormatInt(start.Add(-time.Minute).Unix(), 10)},
		"end":   {strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)}}
	if err := ps.get("/api/v1/query_exemplars", params, &data); err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range data {
		for _, ex := range s.Exemplars {
			if id := ex.Labels["trace_id"]; id != "" && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// spanTraceIDs returns the trace ids of the exported spans named name.
func (s *otlpSink) spanTraceIDs(name string) map[string]bool {
	ids := map[string]bool{}
	for _, sp := range s.byName(name) {
		ids[hex.EncodeToString(sp.GetTraceId())] = true
	}
	return ids
}

// failureKinds are the failures the live test induces; a panel whose
// description says "Shows data only under failure: <kind>" is required to
// return series only after that failure was induced.
var failureKinds = []string{"paused", "degraded", "capacity", "conflict", "dead_letter"}

var failureMarker = regexp.MustCompile(`Shows data only under failure: ([a-z_]+)`)

// dashPanel is one panel of a dashboard JSON file, rows' panels included.
type dashPanel struct {
	dashboard, title, description string
	exprs                         []string // as written, variables not substituted
	kinds                         []string // the failures it has data under, if marked
}

// loadDashboards reads every dashboards/*.json and returns its panels.
func loadDashboards(t *testing.T) (files []string, panels []dashPanel) {
	t.Helper()
	files, err := filepath.Glob("../dashboards/*.json")
	must(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		var d struct {
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("dashboard %s: %v", filepath.Base(f), err)
		}
		panels = append(panels, walkPanels(t, filepath.Base(f), d.Panels)...)
	}
	return files, panels
}

func walkPanels(t *testing.T, dashboard string, raw []json.RawMessage) []dashPanel {
	t.Helper()
	var out []dashPanel
	for _, r := range raw {
		var p struct {
			Title       string            `json:"title"`
			Description string            `json:"description"`
			Panels      []json.RawMessage `json:"panels"`
			Targets     []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		}
		if err := json.Unmarshal(r, &p); err != nil {
			t.Fatalf("dashboard %s: panel: %v", dashboard, err)
		}
		out = append(out, walkPanels(t, dashboard, p.Panels)...)
		dp := dashPanel{dashboard: dashboard, title: p.Title, description: p.Description}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) != "" {
				dp.exprs = append(dp.exprs, tg.Expr)
			}
		}
		for _, m := range failureMarker.FindAllStringSubmatch(p.Description, -1) {
			if !slices.Contains(failureKinds, m[1]) {
				t.Errorf("dashboard %s panel %q: unknown failure kind %q (want one of %v)", dashboard, p.Title, m[1], failureKinds)
				continue
			}
			dp.kinds = append(dp.kinds, m[1])
		}
		if len(dp.exprs) > 0 {
			out = append(out, dp)
		}
	}
	return out
}

// grafanaVariable matches $name, ${name}, ${name:format} and [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$(\w+)`)

// dashboardVariables are the values the live test gives the dashboards'
// variables: every instance and database, and windows that fit a 1 s scrape.
var dashboardVariables = map[string]string{
	"instance": ".*", "database": ".*",
	"__rate_interval": "1m", "__interval": "15s", "__range": "5m",
}

// substitute replaces the dashboard variables of expr; it returns an error
// naming a variable it does not know.
func substitute(expr string) (string, error) {
	var unknown []string
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVariable.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		v, ok := dashboardVariables[name]
		if !ok {
			unknown = append(unknown, name)
			return m
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown dashboard variable(s) %v", unknown)
	}
	return out, nil
}

// need says what a query must return for its phase to pass.
type need int

const (
	// needSeries: the query itself returns at least one series.
	needSeries need = iota
	// needPanelSeries: at least one query of its panel (its source)
	// returns a series, as a panel shows data when one of its targets does.
	needPanelSeries
	// needNothing: the query only has to parse and evaluate.
	needNothing
)

// evalRow is one line of the printed table.
type evalRow struct {
	source, phase, query string
	series               int
	err                  error
	need                 need
}

// unmet reports whether r still lacks the series its need asks for among
// the rows of its phase.
func (r *evalRow) unmet(rows []*evalRow) bool {
	switch {
	case r.err != nil || r.series > 0 || r.need == needNothing:
		return false
	case r.need == needSeries:
		return true
	}
	for _, o := range rows {
		if o.source == r.source && o.series > 0 {
			return false
		}
	}
	return true
}

// evaluate queries every row once, then again those whose need is unmet
// until none is, a query fails (a parse or evaluation error never heals),
// or d passes; the rows then hold the last answer.
func (ps *promServer) evaluate(rows []*evalRow, d time.Duration) {
	deadline := time.Now().Add(d)
	for first := true; ; first = false {
		for _, r := range rows {
			if first || r.unmet(rows) {
				r.series, r.err = ps.query(r.query)
			}
		}
		if !slices.ContainsFunc(rows, func(r *evalRow) bool { return r.unmet(rows) }) || time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// table formats the rows as the printed table; "requires" is what the
// query had to return: series, series from one query of its panel, or
// nothing beyond parsing.
func table(rows []*evalRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-62s | %-11s | %-8s | %6s | %s\n", "dashboard/panel or rule", "phase", "requires", "series", "query")
	for _, r := range rows {
		n := strconv.Itoa(r.series)
		if r.err != nil {
			n = "ERROR"
		}
		q := strings.Join(strings.Fields(r.query), " ")
		fmt.Fprintf(&b, "%-62s | %-11s | %-8s | %6s | %s\n", r.source, r.phase, [...]string{"series", "panel", "parse"}[r.need], n, q)
	}
	return b.String()
}
