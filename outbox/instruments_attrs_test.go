package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/outbox"
)

// TestClaimAndFlushMetricAttributes: a pass that claims once, completes that
// run with reason failure when its second claim fails, records the claim's
// duration under the database alone and under the database and
// error.type=claim_failed, the claimed run's size under the database alone,
// and the completion flush under the database and its reason (the sets are
// built once, not per claim and per flush).
func TestClaimAndFlushMetricAttributes(t *testing.T) {
	b, src := gapSetup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	w, err := outbox.New(outbox.Options{Alias: "default", Source: src, Destination: b.dst, Clock: b.clock,
		Logger: zaptest.NewLogger(t), MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	src.fail["Claim"] = failCall(2, errInjected)
	if _, err := w.RunOnce(context.Background()); !errors.Is(err, errInjected) {
		t.Fatalf("pass error %v, want the claim failure", err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []string
			add := func(set attribute.Set, n uint64) {
				var kv []string
				for _, a := range set.ToSlice() { // sorted by key
					kv = append(kv, string(a.Key)+"="+a.Value.String())
				}
				for range n {
					points = append(points, strings.Join(kv, ","))
				}
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes, dp.Count)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes, dp.Count)
				}
			}
			slices.Sort(points)
			got[m.Name] = points
		}
	}
	db := "riffdb.database=default"
	for name, want := range map[string][]string{
		"riffdb.outbox.claim.duration":              {db, "error.type=claim_failed," + db},
		"riffdb.outbox.claim.batch.size":            {db},
		"riffdb.outbox.completion.flush.duration":   {db + ",riffdb.reason=failure"},
		"riffdb.outbox.completion.flush.batch.size": {db + ",riffdb.reason=failure"},
	} {
		slices.Sort(want)
		if !slices.Equal(got[name], want) {
			t.Errorf("%s: observations %q, want %q", name, got[name], want)
		}
	}
}
