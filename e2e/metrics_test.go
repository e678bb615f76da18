package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMetricsEndpointServesTheReference drives the real binary through
// delivery, retries (the archive directory removed mid-run), an identity
// conflict (the primary restored from a copy and the same event id committed
// with other bytes) and an unknown command, then scrapes /metrics. Every
// Prometheus name in the contract table of docs/metrics.md must be served,
// the labels the reference promises must be there, `promtool check metrics`
// must accept the scrape, and an OpenMetrics scrape must carry trace
// exemplars on the claim-duration buckets.
func TestMetricsEndpointServesTheReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a multi-second scenario (delivery, retries, a conflict) before the scrapes")
	}
	t.Parallel()
	contract := contractSeries(t)
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	ctx := context.Background()

	// Event 1.0 becomes a dead letter by an identity conflict. Everything
	// below then runs in one process, because counters start from no
	// series at each start.
	p, _ := conflictDeadLetter(t, e, token)
	if code, _, body, err := p.command(ctx, token, "no_such_command", map[string]any{}, ""); err != nil || code < 400 || code >= 500 {
		t.Fatalf("unknown command: %d %v %s", code, err, body)
	}
	onlyDeadLetter := func() bool { _, _, pending := p.outboxState(token); return pending == 1 }

	// Retries: move the archive directory away while a backlog is being
	// delivered (archiveAwayDuringBurst). An acceptance in flight then fails
	// the directory check and the rest of its run is scheduled for retry. A
	// removal that lands between runs fails the group check first (no
	// attempt is spent), so try a few times.
	for try := 0; sample(scrape(t, p, false), "riffdb_outbox_retries_total", nil) <= 0; try++ {
		if try == 12 {
			t.Fatalf("no retry after %d archive removals during delivery\n%s", try, grep(scrape(t, p, false), "riffdb_outbox_"))
		}
		busy, _ := archiveAwayDuringBurst(t, e, p, token, 10_000+try*2000)
		waitFor(t, 60*time.Second, "delivery to catch up (only the dead letter left)", onlyDeadLetter)
		t.Logf("archive removal %d during delivery: backlog present %v", try+1, busy)
	}

	text := scrape(t, p, false)
	series := seriesNames(text)
	t.Logf("checking %d contract series from docs/metrics.md", len(contract))
	for _, name := range contract {
		if !series[name] {
			t.Errorf("docs/metrics.md documents %s as a contract series, but /metrics does not serve it", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"riffdb_command_duration_seconds_count", map[string]string{"riffdb_database": "default", "riffdb_command": "_unknown", "result": "unknown_command"}},
		{"riffdb_command_duration_seconds_count", map[string]string{"riffdb_database": "default", "riffdb_command": "place_order", "result": "committed"}},
		{"riffdb_outbox_dead_letters_total", map[string]string{"riffdb_database": "default", "riffdb_reason": "identity_conflict"}},
		{"riffdb_archive_accepted_events_total", map[string]string{"riffdb_database": "default", "result": "refused"}},
		{"riffdb_archive_accepted_events_total", map[string]string{"riffdb_database": "default", "result": "stored"}},
		{"riffdb_archive_quota_decisions_total", map[string]string{"riffdb_database": "default", "result": "fits"}},
		{"riffdb_outbox_retries_total", map[string]string{"riffdb_database": "default"}},
		{"riffdb_outbox_health", map[string]string{"riffdb_database": "default", "riffdb_outbox_state": "degraded"}},
		{"riffdb_archive_quota_used_bytes", map[string]string{"riffdb_database": "default"}},
		{"riffdb_archive_txn_duration_seconds_count", map[string]string{"riffdb_database": "default"}},
		{"riffdb_pebble_wal_fsyncs_total", map[string]string{"riffdb_database": "default", "riffdb_store": "primary"}},
		{"riffdb_pebble_disk_usage_bytes", map[string]string{"riffdb_database": "default", "riffdb_store": "archive"}},
	} {
		if v := sample(text, c.name, c.labels); v <= 0 {
			t.Errorf("%s%v = %v, want a series above 0\n%s", c.name, c.labels, v, grep(text, c.name))
		}
	}
	for _, state := range []string{"healthy", "paused", "stopped"} {
		if v := sample(text, "riffdb_outbox_health", map[string]string{"riffdb_outbox_state": state}); v != 0 {
			t.Errorf("riffdb_outbox_health{riffdb_outbox_state=%q} = %v, want 0 (the state is degraded)", state, v)
		}
	}
	if strings.Contains(text, "riffdb_outbox_health_ratio") {
		t.Error("riffdb.outbox.health is exported with a unit suffix")
	}

	if promtool, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not found on PATH (Debian: apt-get install prometheus): exposition lint skipped")
	} else {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out.String())
		}
	}

	om := scrape(t, p, true)
	exemplar := regexp.MustCompile(`(?m)^riffdb_outbox_claim_duration_seconds_bucket\{[^}]*\} \S+ # \{[^}]*trace_id="[0-9a-f]{32}"`)
	if !exemplar.MatchString(om) {
		t.Errorf("no claim-duration bucket carries a trace exemplar in the OpenMetrics scrape:\n%s",
			grep(om, "riffdb_outbox_claim_duration_seconds_bucket"))
	}
	p.stop()
}

// contractSeries returns the Prometheus names of the contract metrics table
// of docs/metrics.md: the second backticked name of each row's first cell,
// with "_{bucket,sum,count}" expanded.
func contractSeries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	must(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n## Metrics (contract)")
	if start < 0 {
		t.Fatal(`docs/metrics.md has no "## Metrics (contract)" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	row := regexp.MustCompile("(?m)^\\| `riffdb\\.[a-z0-9_.]+`[^|]*<br>`([a-z0-9_]+?)(_\\{([a-z,]+)\\})?` \\|")
	var names []string
	rows := row.FindAllStringSubmatch(section, -1)
	for _, m := range rows {
		if m[3] == "" {
			names = append(names, m[1])
			continue
		}
		for _, s := range strings.Split(m[3], ",") {
			names = append(names, m[1]+"_"+s)
		}
	}
	// DESIGN §6 fixes 15 metrics; fewer rows means the table format changed
	// and this check would silently check less.
	if len(rows) < 15 {
		t.Fatalf("found %d contract metric rows in docs/metrics.md, want at least 15", len(rows))
	}
	return names
}

// scrape fetches /metrics, as Prometheus text or as OpenMetrics.
func scrape(t *testing.T, p *proc, openMetrics bool) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	must(t, err)
	if openMetrics {
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	}
	resp, err := httpClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); openMetrics != strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("GET /metrics (OpenMetrics %v) answered Content-Type %q", openMetrics, ct)
	}
	return string(b)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// seriesNames returns the metric names that have at least one sample.
func seriesNames(text string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		if m := sampleLine.FindStringSubmatch(l); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// sample returns the sum of the samples of name whose labels include want,
// or -1 when there is none.
func sample(text, name string, want map[string]string) float64 {
	total, found := 0.0, false
	for _, l := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(l)
		if m == nil || m[1] != name {
			continue
		}
		labels := map[string]string{}
		for _, kv := range labelPair.FindAllStringSubmatch(m[3], -1) {
			labels[kv[1]] = kv[2]
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			continue
		}
		total, found = total+v, true
	}
	if !found {
		return -1
	}
	return total
}

// grep returns the lines of text that contain s, for failure messages.
func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// copyTree copies the regular files and directories under src to dst,
// with their modes (dmCopyTree, failing the test on error).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := dmCopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
}
