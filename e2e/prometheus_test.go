package e2e_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPrometheusEvaluatesDashboardsAndAlerts runs the real binary, traced
// into an in-test OTLP receiver, and a real Prometheus (the Debian package)
// scraping it every second with OpenMetrics and exemplar storage, with the
// rule file loaded and a test copy of its alerts on a short time scale
// (`for:` 2 s, ranges and offsets 30 s). Under load, every recording rule
// and every panel expression of every dashboards/*.json (variables
// substituted, rows' panels included) must parse and return at least one
// series, and the exemplars of the archive transaction and command
// histograms must carry trace ids of exported spans. It then induces each
// failure a panel can be marked with — the archive directory unavailable
// (degraded) and refused by its custody check (paused), a quota below the
// archive's use (capacity), the background scrub off with a short
// full_validation_interval (stale), and different bytes under an archived
// event's identity (conflict, dead_letter) — waits for the matching alert to fire,
// requires data from the panels marked with that failure and from the
// panels whose description names its alerts, repairs, and waits for the
// alert to become inactive again. The table of every query and its series
// count is logged, and written to the file named by RIFFDB_PROMETHEUS_REPORT
// when set.
func TestPrometheusEvaluatesDashboardsAndAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drives a live Prometheus through every failure and repair for about a minute")
	}
	sink, otlp := traceSinkServer(t)
	e := newEnv(t, envOpts{outbox: true, extra: fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\ntrace_sample_ratio = 1.0\n", otlp)})
	metricsAddr := freeAddr(t)
	e.pinMetricsListen(metricsAddr)
	ps := startPrometheus(t, metricsAddr)
	files, panels := loadDashboards(t)
	if len(files) < 3 {
		t.Fatalf("found %d dashboards/*.json, want at least 3 (fleet, outbox, primary & storage)", len(files))
	}
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	ctx := context.Background()
	began := time.Now()
	p := e.start()

	var rows []*evalRow
	defer func() {
		report := table(rows)
		t.Logf("live Prometheus evaluation (%d queries):\n%s", len(rows), report)
		if f := os.Getenv("RIFFDB_PROMETHEUS_REPORT"); f != "" {
			if err := os.WriteFile(f, []byte(report), 0o644); err != nil {
				t.Errorf("writing RIFFDB_PROMETHEUS_REPORT: %v", err)
			}
		}
	}()
	// check evaluates the phase's rows and fails on any that does not parse
	// or evaluate, or whose need is unmet.
	check := func(phase string, batch []*evalRow) {
		t.Helper()
		ps.evaluate(batch, 30*time.Second)
		for _, r := range batch {
			if r.err != nil {
				t.Errorf("%s (%s): %s: %v", r.source, phase, r.query, r.err)
			} else if r.unmet(batch) {
				what := "no series from"
				if r.need == needPanelSeries {
					what = "no series from any query of the panel, e.g."
				}
				t.Errorf("%s (%s): %s %s", r.source, phase, what, r.query)
			}
		}
		rows = append(rows, batch...)
	}
	panelRows := func(phase string, want func(dashPanel) need) []*evalRow {
		var out []*evalRow
		for _, pn := range panels {
			nd := want(pn)
			if nd < 0 {
				continue
			}
			src := pn.dashboard + " / " + pn.title
			for _, expr := range pn.exprs {
				q, err := substitute(expr)
				out = append(out, &evalRow{source: src, phase: phase, query: cmpOr(q, expr), err: err, need: nd})
			}
		}
		return out
	}

	// Load: commands committed and delivered, an unknown command, some
	// client errors.
	burst(t, p, token, 0, 1000)
	for _, key := range []string{"a", "b"} {
		if code, _, body, err := p.command(ctx, token, "no_such_command", map[string]any{}, key); err != nil || code < 400 || code >= 500 {
			t.Fatalf("unknown command: %d %v %s", code, err, body)
		}
	}
	p.waitDrained(t, token)

	// Every recording rule, as Prometheus parsed it from the original file.
	rules := ps.rulesOf(ps.rules)
	var recording []*evalRow
	alerts := 0
	for _, r := range rules {
		switch r.Type {
		case "recording":
			recording = append(recording, &evalRow{source: "rule " + r.Name, phase: "load", query: r.Query})
		case "alerting":
			alerts++
		}
	}
	if len(recording) == 0 || alerts == 0 {
		t.Fatalf("Prometheus loaded %d recording and %d alerting rules from the rule file", len(recording), alerts)
	}
	if copied := len(ps.rulesOf(ps.copy)); copied != alerts {
		t.Fatalf("the test copy has %d alerting rules, the rule file %d", copied, alerts)
	}
	check("load", recording)
	for _, r := range ps.rulesOf(ps.rules) {
		if r.Health == "err" {
			t.Errorf("rule %s fails to evaluate: %s", r.Name, r.LastError)
		}
	}
	check("load", panelRows("load", func(pn dashPanel) need {
		if len(pn.kinds) > 0 {
			return needNothing
		}
		return needSeries
	}))

	// Exemplars: trace ids of both histograms, found among exported spans.
	for _, h := range []struct{ series, span string }{
		{"riffdb_archive_txn_duration_seconds_bucket", "riffdb.archive.txn"},
		{"riffdb_command_duration_seconds_bucket", "riffdb.command"},
	} {
		var ids []string
		waitFor(t, 30*time.Second, "exemplars of "+h.series+" with a trace id of an exported "+h.span+" span", func() bool {
			var err error
			if ids, err = ps.exemplarTraceIDs(h.series, began); err != nil {
				t.Fatalf("query_exemplars %s: %v", h.series, err)
			}
			exported := sink.spanTraceIDs(h.span)
			return slices.ContainsFunc(ids, func(id string) bool { return exported[id] })
		})
		t.Logf("%s: %d exemplar trace ids, at least one is an exported %s span's trace", h.series, len(ids), h.span)
	}

	// Under each failure, every query of the panels marked with it, and
	// one query of each panel whose description names its alerts, must
	// return series: the panels an alert sends the operator to show data.
	underFailure := func(kind string) {
		t.Helper()
		names := regexp.MustCompile(`\b(` + strings.Join(failureAlerts[kind], "|") + `)\b`)
		batch := panelRows(kind, func(pn dashPanel) need {
			switch {
			case slices.Contains(pn.kinds, kind):
				return needSeries
			case names.MatchString(pn.description):
				return needPanelSeries
			}
			return -1
		})
		if len(batch) == 0 {
			t.Errorf("no panel is marked with failure %s or names its alerts %v", kind, failureAlerts[kind])
		}
		check(kind, batch)
	}
	more := 100_000
	commands := func(n int) {
		t.Helper()
		burst(t, p, token, more, n)
		more += n
	}

	// degraded: the archive directory is unavailable (moved away; a mode of
	// 000 would not stop a test running as root).
	away := e.outbox + ".away"
	must(t, os.Rename(e.outbox, away))
	commands(20)
	p.waitHealth(t, token, "degraded", "destination_unavailable")
	ps.waitAlert(t, "RiffdbOutboxUnhealthy", true)
	underFailure("degraded")
	must(t, os.Rename(away, e.outbox))
	p.waitDrained(t, token)
	ps.waitAlert(t, "RiffdbOutboxUnhealthy", false)

	// paused: the archive directory is group-writable, which its custody
	// check refuses whoever runs the server.
	must(t, os.Chmod(e.outbox, 0o770))
	commands(20)
	p.waitHealth(t, token, "paused", "destination_refused")
	ps.waitAlert(t, "RiffdbOutboxUnhealthy", true)
	underFailure("paused")
	must(t, os.Chmod(e.outbox, 0o700))
	p.waitDrained(t, token)
	ps.waitAlert(t, "RiffdbOutboxUnhealthy", false)

	// capacity: restarted with a quota below the archive's use.
	used := 0.0
	waitFor(t, 10*time.Second, "the archive's quota use in Prometheus", func() bool {
		used = promScalar(t, ps, "max(riffdb_archive_quota_used_bytes)")
		return used > 0
	})
	p.stop()
	e.setQuota(int64(used / 2))
	p = e.start()
	commands(20)
	p.waitHealth(t, token, "degraded", "capacity_exhausted")
	ps.waitAlert(t, "RiffdbArchiveQuotaCritical", true)
	underFailure("capacity")
	p.stop()
	e.setQuota(e.quota)
	p = e.start()
	p.waitDrained(t, token)
	ps.waitAlert(t, "RiffdbArchiveQuotaCritical", false)

	// stale: restarted with the background scrub off and a
	// full_validation_interval of 3 s, so the last full validation (the
	// last scrub pass's, or this start's) soon lies beyond the interval.
	p.stop()
	e.setOutboxOptions("scrub_pages_per_second = 0\nfull_validation_interval = \"3s\"\n")
	p = e.start()
	ps.waitAlert(t, "RiffdbArchiveValidationStale", true)
	underFailure("stale")
	p.stop()
	e.setOutboxOptions("")
	p = e.start()
	p.waitDrained(t, token)
	ps.waitAlert(t, "RiffdbArchiveValidationStale", false)

	// conflict and dead_letter: the primary is restored from a copy taken
	// before an event was delivered and commits other bytes under that
	// event's identity past the archive with no outbox configured
	// (conflictDeadLetter); the archive refuses them and the event is
	// dead-lettered.
	p.stop()
	p, _ = conflictDeadLetter(t, e, token)
	ps.waitAlert(t, "RiffdbArchiveRefused", true)
	ps.waitAlert(t, "RiffdbOutboxDeadLetters", true)
	underFailure("conflict")
	underFailure("dead_letter")
	// Repair: the operator investigated the conflicting event (it stays a
	// dead letter) and restarts; delivery goes on.
	p.stop()
	p = e.start()
	commands(5)
	waitFor(t, 60*time.Second, "delivery to catch up (only the dead letter left)", func() bool {
		s, _, pending := p.outboxState(token)
		return s == "healthy" && pending == 1
	})
	ps.waitAlert(t, "RiffdbArchiveRefused", false)
	ps.waitAlert(t, "RiffdbOutboxDeadLetters", false)
	ps.waitAlert(t, "RiffdbOutboxUnhealthy", false)
	p.stop()
}

// failureAlerts are the alerts of each induced failure: the first one must
// fire while it lasts and become inactive after the repair.
var failureAlerts = map[string][]string{
	"degraded":    {"RiffdbOutboxUnhealthy"},
	"paused":      {"RiffdbOutboxUnhealthy"},
	"capacity":    {"RiffdbArchiveQuotaCritical", "RiffdbArchiveQuotaHigh"},
	"conflict":    {"RiffdbArchiveRefused"},
	"dead_letter": {"RiffdbOutboxDeadLetters"},
	"stale":       {"RiffdbArchiveValidationStale"},
}

// promScalar evaluates expr and returns its single value, or -1.
func promScalar(t *testing.T, ps *promServer, expr string) float64 {
	t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	must(t, ps.get("/api/v1/query", map[string][]string{"query": {expr}}, &data))
	if len(data.Result) != 1 {
		return -1
	}
	var v float64
	if s, ok := data.Result[0].Value[1].(string); ok {
		if _, err := fmt.Sscan(s, &v); err != nil {
			return -1
		}
	}
	return v
}
