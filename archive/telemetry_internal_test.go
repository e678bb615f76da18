package archive

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

func TestTelemetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	opts := testOptions(t, newMemFS(t, false))
	opts.MeterProvider, opts.TracerProvider = mp, tp
	opts.QuotaEncodedBytes = 1000
	s := mustOpen(t, opts)

	k1, r1 := rec(t, testDatabase, 1, 0, "one")
	mustAccept(t, s, k1, r1, deliverytype.Stored)
	mustAccept(t, s, k1, r1, deliverytype.Duplicate)
	_, other := rec(t, testDatabase, 1, 0, "uno")
	if _, err := s.Accept(ctx, k1, other); !errors.Is(err, ErrConflict) {
		t.Fatal(err)
	}
	k2, r2 := rec(t, testDatabase, 2, 0, string(make([]byte, 2000)))
	if n, err := s.Fit(ctx, []event.Key{k1, k2}, [][]byte{r1, r2}); err != nil || n != 1 {
		t.Fatalf("Fit = %d, %v", n, err)
	}

	m := collect(t, reader)
	if got := sumByResult(m, "riffdb.archive.accepted.events"); got["stored"] != 1 || got["duplicate"] != 1 || got["refused"] != 1 {
		t.Fatalf("accepted.events %v", got)
	}
	if got := sumByResult(m, "riffdb.archive.quota.decisions"); got["does_not_fit"] != 1 {
		t.Fatalf("quota.decisions %v", got)
	}
	if got := gauge(m, "riffdb.archive.quota.used"); got != Charge(k1, r1) {
		t.Fatalf("quota.used = %d", got)
	}
	if got := gauge(m, "riffdb.archive.quota.limit"); got != 1000 {
		t.Fatalf("quota.limit = %d", got)
	}
	if !hasMetric(m, "riffdb.archive.txn.duration") {
		t.Fatal("no txn.duration")
	}
	if n := histogramCount(m, "riffdb.archive.quota.check.duration"); n != 1 {
		t.Fatalf("quota.check.duration holds %d measurements, want 1 (one Fit)", n)
	}
	names := map[string]int{}
	for _, sp := range spans.Ended() {
		names[sp.Name()]++
	}
	if names["riffdb.archive.txn"] != 3 || names["riffdb.archive.quota.check"] != 1 {
		t.Fatalf("spans %v", names)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if hasMetric(collect(t, reader), "riffdb.archive.quota.used") {
		t.Fatal("gauges still registered after Close")
	}
}

func collect(t *testing.T, r *sdkmetric.ManualReader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

func hasMetric(ms []metricdata.Metrics, name string) bool {
	for _, m := range ms {
		if m.Name == name {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				return len(d.DataPoints) > 0
			default:
				return true
			}
		}
	}
	return false
}

func sumByResult(ms []metricdata.Metrics, name string) map[string]int64 {
	out := map[string]int64{}
	for _, m := range ms {
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
			for _, dp := range s.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("result"))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

func gauge(ms []metricdata.Metrics, name string) int64 {
	for _, m := range ms {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == name && len(g.DataPoints) > 0 {
			return g.DataPoints[0].Value
		}
	}
	return -1
}

func TestEndSpan(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	ok := attribute.Int("riffdb.group.fits", 3)

	_, span := tracer.Start(context.Background(), "failed")
	endSpan(span, nil, fmt.Errorf("%w: quota", ErrCapacity), ok)
	_, span = tracer.Start(context.Background(), "succeeded")
	endSpan(span, nil, nil, ok)

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	failed, succeeded := ended[0], ended[1]
	if got := failed.Status(); got.Code != codes.Error || got.Description != "capacity" {
		t.Errorf("failed span status = %+v, want Error/capacity", got)
	}
	if got := failed.Attributes(); len(got) != 1 || got[0] != attribute.String("error.type", "capacity") {
		t.Errorf("failed span attributes = %v, want only error.type=capacity", got)
	}
	if got := failed.Events(); len(got) != 1 || got[0].Name != "exception" {
		t.Errorf("failed span events = %v, want the recorded error", got)
	}
	if got := succeeded.Status(); got.Code != codes.Unset {
		t.Errorf("succeeded span status = %+v, want Unset", got)
	}
	if got := succeeded.Attributes(); len(got) != 1 || got[0] != ok {
		t.Errorf("succeeded span attributes = %v, want %v", got, ok)
	}
}

// histogramCount is the number of measurements of the float histogram name.
func histogramCount(m []metricdata.Metrics, name string) uint64 {
	var n uint64
	for _, mm := range m {
		if h, ok := mm.Data.(metricdata.Histogram[float64]); ok && mm.Name == name {
			for _, dp := range h.DataPoints {
				n += dp.Count
			}
		}
	}
	return n
}

// TestMonitorQuotaGaugesOutliveTheStore: with a caller's Monitor the quota
// gauges are the Monitor's: absent before the first open, then the last
// committed accounting, still served after the store closed (as while the
// archive is unavailable or refused), and the store registers none of its
// own (no duplicate series).
func TestMonitorQuotaGaugesOutliveTheStore(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mon := new(Monitor)
	reg, err := mon.ObserveQuota(mp, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if hasMetric(collect(t, reader), "riffdb.archive.quota.used") {
		t.Fatal("quota gauges before any store was opened")
	}
	opts := testOptions(t, newMemFS(t, false))
	opts.MeterProvider, opts.Monitor, opts.QuotaEncodedBytes = mp, mon, 1000
	s := mustOpen(t, opts)
	k1, r1 := rec(t, testDatabase, 1, 0, "one")
	mustAccept(t, s, k1, r1, deliverytype.Stored)
	m := collect(t, reader)
	if got := gauge(m, "riffdb.archive.quota.used"); got != Charge(k1, r1) {
		t.Fatalf("quota.used = %d, want %d", got, Charge(k1, r1))
	}
	for _, mm := range m {
		if g, ok := mm.Data.(metricdata.Gauge[int64]); ok && mm.Name == "riffdb.archive.quota.used" && len(g.DataPoints) != 1 {
			t.Fatalf("quota.used has %d series, want 1", len(g.DataPoints))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m = collect(t, reader)
	if got, limit := gauge(m, "riffdb.archive.quota.used"), gauge(m, "riffdb.archive.quota.limit"); got != Charge(k1, r1) || limit != 1000 {
		t.Fatalf("after Close: quota.used = %d, limit = %d; want the last committed values", got, limit)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if hasMetric(collect(t, reader), "riffdb.archive.quota.used") {
		t.Fatal("quota gauges after Unregister")
	}
}
