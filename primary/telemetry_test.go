package primary_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/riffdb/riffdb/primary"
)

func TestCommandSpanMetricAndTraceParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	db, _ := setup(t, func(o *primary.Options) { o.TracerProvider = tp; o.MeterProvider = mp; o.Alias = "orders" })
	c := exec(t, db, "two", `{"x":1}`, "")
	if _, err := db.Execute(context.Background(), "nope", nil, ""); err == nil {
		t.Fatal("unknown command accepted")
	}
	spans := rec.Ended()
	if len(spans) == 0 || spans[0].Name() != "riffdb.command" {
		t.Fatalf("spans = %v", spans)
	}
	attrs := map[string]string{}
	for _, a := range spans[0].Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["riffdb.database"] != "orders" || attrs["riffdb.database.id"] != db.Identity().String() || attrs["riffdb.command"] != "two" ||
		attrs["riffdb.commit.seq"] != "1" || attrs["riffdb.command.events"] != "2" {
		t.Fatalf("span attributes = %v", attrs)
	}
	in := allIntents(t, db)
	sc := spans[0].SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if in[0].TraceParent != want || c.Seq != 1 {
		t.Fatalf("intent traceparent = %q, want %q", in[0].TraceParent, want)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	results := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "riffdb.command.duration" || m.Unit != "s" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				r, _ := dp.Attributes.Value("result")
				results[r.AsString()] += dp.Count
				if d, _ := dp.Attributes.Value("riffdb.database"); d.AsString() != "orders" {
					t.Fatalf("riffdb.command.duration without the database label: %v", dp.Attributes)
				}
				if c, _ := dp.Attributes.Value("riffdb.command"); c.AsString() == "nope" {
					t.Fatal("an unknown command name became a metric label")
				}
			}
		}
	}
	if results["committed"] != 1 || results["unknown_command"] != 1 {
		t.Fatalf("riffdb.command.duration by result = %v", results)
	}
	// One commit went through the committer: one group of one.
	var groups, commits int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "riffdb.commit.group.size" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
				if d, _ := dp.Attributes.Value("riffdb.database"); d.AsString() != "orders" {
					t.Fatalf("riffdb.commit.group.size without the database label: %v", dp.Attributes)
				}
				groups += int64(dp.Count)
				commits += dp.Sum
			}
		}
	}
	if groups != 1 || commits != 1 {
		t.Fatalf("riffdb.commit.group.size: %d groups holding %d commits, want 1 and 1", groups, commits)
	}
}
