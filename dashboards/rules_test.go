package dashboards

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	rulesFile     = "riffdb-rules.yml"
	rulesTestFile = "riffdb-rules_test.yml"
	metricsDoc    = "../docs/metrics.md"
)

// promtool returns the path of promtool, or skips the test naming it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found on PATH (Debian: apt-get install prometheus, or scripts/install-test-deps.sh); rule checks skipped")
	}
	return p
}

// runPromtool runs promtool with args in dir and returns its combined output.
func runPromtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestRulesCheck(t *testing.T) {
	out, err := runPromtool(t, ".", "check", "rules", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	rules := parseRules(t, readFile(t, rulesFile))
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(out, want) {
		t.Fatalf("promtool check rules: want %q in\n%s", want, out)
	}
}

func TestRulesUnitTests(t *testing.T) {
	out, err := runPromtool(t, ".", "test", "rules", rulesTestFile)
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules printed no SUCCESS:\n%s", out)
	}
}

// TestEveryRuleIsTested replaces each rule's expression in turn by one that
// never returns a sample and checks that the unit tests then fail: a rule
// that no test would miss is a rule whose breakage nobody would notice.
func TestEveryRuleIsTested(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the mutation campaign: promtool's unit tests once per rule")
	}
	promtool(t)
	src := readFile(t, rulesFile)
	tests := readFile(t, rulesTestFile)
	rules := parseRules(t, src)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, r := range rules {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dir := t.TempDir()
			mutated := r.replaceExpr(src, "vector(1) < 0")
			if err := os.WriteFile(filepath.Join(dir, rulesFile), []byte(mutated), 0o600); err != nil {
				t.Error(err)
				return
			}
			if err := os.WriteFile(filepath.Join(dir, rulesTestFile), []byte(tests), 0o600); err != nil {
				t.Error(err)
				return
			}
			out, err := runPromtool(t, dir, "test", "rules", rulesTestFile)
			if err == nil {
				t.Errorf("%s: the unit tests still pass when its expression returns nothing\n%s", r.name, out)
			} else if !strings.Contains(out, "FAILED") {
				t.Errorf("%s: promtool failed without a test failure: %v\n%s", r.name, err, out)
			}
		}()
	}
	wg.Wait()
}

// TestRulesMatchTheReference checks that the rules read only series that
// docs/metrics.md documents, and that the alerts and recorded series the
// reference names are exactly the ones defined.
func TestRulesMatchTheReference(t *testing.T) {
	doc := readFile(t, metricsDoc)
	documented := documentedSeries(doc)
	if len(documented) < 20 {
		t.Fatalf("found only %d Prometheus names in %s: has its table format changed?", len(documented), metricsDoc)
	}
	rules := parseRules(t, readFile(t, rulesFile))
	var alerts, records []string
	for _, r := range rules {
		if r.alert {
			alerts = append(alerts, r.name)
		} else {
			records = append(records, r.name)
		}
		for _, name := range seriesIn(r.expr) {
			if !documented[name] {
				t.Errorf("%s reads %s, which %s does not document", r.name, name, metricsDoc)
			}
		}
	}
	slices.Sort(alerts)
	slices.Sort(records)
	if got := uniqueMatches(doc, `\bRiffdb[A-Z][A-Za-z]+\b`); !slices.Equal(got, alerts) {
		t.Errorf("alerts named in %s:\n %v\nalerts defined in %s:\n %v", metricsDoc, got, rulesFile, alerts)
	}
	if got := uniqueMatches(doc, `\briffdb:[a-z0-9_:]+\b`); !slices.Equal(got, records) {
		t.Errorf("recorded series named in %s:\n %v\nrecording rules in %s:\n %v", metricsDoc, got, rulesFile, records)
	}
}

// TestSeriesIn pins the expression scanner the reference check relies on.
func TestSeriesIn(t *testing.T) {
	got := seriesIn(`sum by (instance, riffdb_database) (rate(riffdb_a_total{result="x",riffdb_reason=~"a|b"}[5m])) ` +
		`unless on (riffdb_database) riffdb_b > 0 and riffdb:rec:ratio > riffdb_c offset 5m`)
	if want := []string{"riffdb_a_total", "riffdb_b", "riffdb_c"}; !slices.Equal(got, want) {
		t.Fatalf("seriesIn = %v, want %v", got, want)
	}
	doc := "| `riffdb.x` (s)<br>`riffdb_x_seconds_{bucket,sum,count}` | `riffdb_y_total` | `http_z_bytes_*` |"
	names := documentedSeries(doc)
	for _, n := range []string{"riffdb_x_seconds_bucket", "riffdb_x_seconds_sum", "riffdb_x_seconds_count", "riffdb_y_total"} {
		if !names[n] {
			t.Errorf("documentedSeries lacks %s: %v", n, names)
		}
	}
	if len(names) != 4 {
		t.Errorf("documentedSeries = %v, want 4 names", names)
	}
}

type rule struct {
	name  string
	alert bool
	expr  string
	// first and last line (inclusive) of the expr field in the file.
	first, last int
}

// replaceExpr returns src with this rule's expression replaced by expr.
func (r rule) replaceExpr(src, expr string) string {
	lines := strings.Split(src, "\n")
	indent := lines[r.first][:len(lines[r.first])-len(strings.TrimLeft(lines[r.first], " "))]
	out := slices.Concat(lines[:r.first], []string{indent + "expr: " + expr}, lines[r.last+1:])
	return strings.Join(out, "\n")
}

var (
	ruleStart = regexp.MustCompile(`^\s*- (record|alert): (\S+)\s*$`)
	exprLine  = regexp.MustCompile(`^(\s*)expr: (.*)$`)
)

// parseRules finds each rule and its expression, single-line or a "|" block.
func parseRules(t *testing.T, src string) []rule {
	t.Helper()
	lines := strings.Split(src, "\n")
	var rules []rule
	for i := 0; i < len(lines); i++ {
		m := ruleStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		r := rule{name: m[2], alert: m[1] == "alert", first: -1}
		for j := i + 1; j < len(lines) && !ruleStart.MatchString(lines[j]); j++ {
			e := exprLine.FindStringSubmatch(lines[j])
			if e == nil {
				continue
			}
			r.first, r.last = j, j
			if strings.TrimSpace(e[2]) != "|" {
				r.expr = e[2]
				break
			}
			var block []string
			for k := j + 1; k < len(lines); k++ {
				l := lines[k]
				if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " ")) <= len(e[1]) {
					break
				}
				block = append(block, strings.TrimSpace(l))
				r.last = k
			}
			r.expr = strings.Join(block, " ")
			break
		}
		if r.first < 0 || strings.TrimSpace(r.expr) == "" {
			t.Fatalf("rule %s: no expression found", r.name)
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		t.Fatalf("no rules found in %s", rulesFile)
	}
	return rules
}

var (
	labelLists = regexp.MustCompile(`\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)`)
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	metricName = regexp.MustCompile(`(^|[^a-zA-Z0-9_:])(riffdb_[a-z0-9_]+)`)
)

// seriesIn returns the riffdb_* metric names an expression reads (recorded
// riffdb:* series and label names are not metric names).
func seriesIn(expr string) []string {
	expr = matchers.ReplaceAllString(labelLists.ReplaceAllString(expr, " "), " ")
	var out []string
	for _, m := range metricName.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(out, m[2]) {
			out = append(out, m[2])
		}
	}
	return out
}

var docName = regexp.MustCompile("`((?:riffdb|http)_[a-z0-9_]+?)(_\\{([a-z,]+)\\})?`")

// documentedSeries returns every Prometheus series name written in
// backticks in the reference, with "_{bucket,sum,count}" expanded.
func documentedSeries(doc string) map[string]bool {
	names := map[string]bool{}
	for _, m := range docName.FindAllStringSubmatch(doc, -1) {
		if m[3] == "" {
			names[m[1]] = true
			continue
		}
		for _, suffix := range strings.Split(m[3], ",") {
			names[m[1]+"_"+suffix] = true
		}
	}
	return names
}

func uniqueMatches(s, pattern string) []string {
	var out []string
	for _, m := range regexp.MustCompile(pattern).FindAllString(s, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
