package telemetry_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/telemetry"
)

// TestPromtoolAcceptsExposition lints a real scrape (histogram, counter,
// up-down counter, gauge, Pebble instruments, Go and process collectors)
// with promtool when it is installed.
func TestPromtoolAcceptsExposition(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (Debian: apt-get install prometheus); exposition lint skipped")
	}
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	ctx, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "riffdb.outbox.claim")
	defer span.End()
	m := tel.MeterProvider.Meter("test")
	h, err := m.Float64Histogram("riffdb.outbox.claim.duration", metric.WithUnit("s"), metric.WithDescription("Claim run duration."))
	if err != nil {
		t.Fatal(err)
	}
	h.Record(ctx, 0.01)
	c, err := m.Int64Counter("riffdb.archive.accepted.events", metric.WithUnit("{event}"), metric.WithDescription("Events accepted by the archive."))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 3)
	u, err := m.Int64UpDownCounter("riffdb.outbox.pending", metric.WithUnit("{event}"), metric.WithDescription("Undelivered events."))
	if err != nil {
		t.Fatal(err)
	}
	u.Add(ctx, 4)
	g, err := m.Int64Gauge("riffdb.archive.quota.used", metric.WithUnit("By"), metric.WithDescription("Encoded bytes charged to the quota."))
	if err != nil {
		t.Fatal(err)
	}
	g.Record(ctx, 1024)
	db := openStore(t, 3)
	t.Cleanup(func() { _ = db.Close() })
	unregister, err := telemetry.ObservePebble(tel.MeterProvider, "archive", "default", db.Metrics, stall.New(nil, "archive", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unregister() }()

	body, _ := scrape(t, tel.MetricsHandler, false)
	for _, name := range []string{"riffdb_outbox_claim_duration_seconds_bucket", "riffdb_archive_accepted_events_total",
		"riffdb_outbox_pending", "riffdb_archive_quota_used_bytes", "riffdb_pebble_disk_usage_bytes"} {
		if !strings.Contains(body, "\n"+name) {
			t.Fatalf("scrape lacks %s", name)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}
