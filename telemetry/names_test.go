package telemetry_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/riffdb/riffdb/telemetry"
)

// TestPrometheusNameTranslation pins how OpenTelemetry names and units become
// Prometheus series names with the pinned translation strategy; docs/metrics.md
// relies on these rules.
func TestPrometheusNameTranslation(t *testing.T) {
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	m := tel.MeterProvider.Meter("test")
	ctx := context.Background()
	attrs := metric.WithAttributes(telemetry.DatabaseKey.String("default"))

	h, _ := m.Float64Histogram("riffdb.archive.txn.duration", metric.WithUnit("s"))
	h.Record(ctx, 0.1, attrs)
	c, _ := m.Int64Counter("riffdb.outbox.retries", metric.WithUnit("{event}"))
	c.Add(ctx, 1, attrs)
	plain, _ := m.Int64Counter("riffdb.archive.accepted.events") // no unit
	plain.Add(ctx, 1, attrs)
	size, _ := m.Int64Histogram("riffdb.outbox.claim.batch.size", metric.WithUnit("{event}"))
	size.Record(ctx, 3, attrs)
	g, _ := m.Int64Gauge("riffdb.archive.quota.used", metric.WithUnit("By"))
	g.Record(ctx, 5, attrs)
	ratio, _ := m.Int64Gauge("riffdb.test.unit_one", metric.WithUnit("1"))
	ratio.Record(ctx, 1, attrs)
	updown, _ := m.Int64UpDownCounter("riffdb.outbox.pending", metric.WithUnit("{event}"))
	updown.Add(ctx, 2, attrs)

	body, _ := scrape(t, tel.MetricsHandler, false)
	for _, want := range []string{
		`riffdb_archive_txn_duration_seconds_bucket{riffdb_database="default",le="0.1"} 1`,
		`riffdb_outbox_retries_total{riffdb_database="default"} 1`,
		`riffdb_archive_accepted_events_total{riffdb_database="default"} 1`,
		`riffdb_outbox_claim_batch_size_count{riffdb_database="default"} 1`,
		`riffdb_archive_quota_used_bytes{riffdb_database="default"} 5`,
		`riffdb_test_unit_one_ratio{riffdb_database="default"} 1`, // unit "1" on a gauge adds _ratio
		`riffdb_outbox_pending{riffdb_database="default"} 2`,
		"# TYPE riffdb_outbox_pending gauge",
	} {
		if !strings.Contains(body, "\n"+want) {
			t.Errorf("scrape lacks %q:\n%s", want, grepLines(body, "riffdb_"))
		}
	}
}
