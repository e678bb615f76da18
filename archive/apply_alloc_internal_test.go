package archive

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// applyAllocsPerEvent bounds the allocations of one delivered event's
// archive transaction (TestApplyAllocations). The code before
// docs/benchmarks.md's "Allocations a delivered event no longer makes"
// made 18.6 per event in this test; 10.1 since, and 7.1 since the
// verification of a record makes no string of its type, the monitor's
// accounting is copied under a lock instead of published as a new Usage,
// and a posted apply lives in its transaction's allocation.
const applyAllocsPerEvent = 8

// TestApplyAllocations: an archive transaction applied and confirmed in a
// group of 16 as the outbox worker does (Apply each, then Durable), on the
// real filesystem with every span sampled and the metrics recorded,
// allocates at most applyAllocsPerEvent times per event, Pebble's and the
// OpenTelemetry SDK's allocations included.
func TestApplyAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, TxnTimeout: time.Minute,
		TracerProvider: sdktrace.NewTracerProvider(),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))}
	s, err := Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const group, runs = 16, 40
	var keys []event.Key
	var records [][]byte
	for i := range (runs + 2) * group {
		k, r := rec(t, testDatabase, uint64(i+1), 0, fmt.Sprintf(`{"order_id":"o-%06d","amount_cents":125}`, i))
		keys, records = append(keys, k), append(records, r)
	}
	n := 0
	applyGroup := func() {
		for range group {
			if out, err := s.Apply(ctx, keys[n], records[n]); err != nil || out != deliverytype.Stored {
				t.Fatalf("Apply = %v, %v", out, err)
			}
			n++
		}
		if err := s.Durable(ctx); err != nil {
			t.Fatal(err)
		}
	}
	applyGroup() // the store's kept goroutine, timer and arrays are made once
	perEvent := testing.AllocsPerRun(runs, applyGroup) / group
	if perEvent > applyAllocsPerEvent {
		t.Fatalf("an archive transaction allocates %.1f times per event, want at most %d", perEvent, applyAllocsPerEvent)
	}
	t.Logf("%.2f allocations per event", perEvent)
}
