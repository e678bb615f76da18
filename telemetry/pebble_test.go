package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/telemetry"
)

type quietPebbleLogger struct{ t *testing.T }

func (l quietPebbleLogger) Infof(string, ...any) {}
func (l quietPebbleLogger) Errorf(format string, args ...any) {
	l.t.Logf("pebble: "+format, args...)
}
func (l quietPebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble fatal: "+format, args...))
}

// openStore opens a real Pebble store in a temporary directory and writes n
// synced keys twice, flushing each time, compacts them, and reads them back so that the
// block cache is populated.
func openStore(t *testing.T, n int) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{
		FormatMajorVersion: pebble.FormatWALSyncChunks,
		Logger:             quietPebbleLogger{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two flushes of the same keys: the compaction merges the two tables
	// and writes one, rather than moving one table down.
	for range 2 {
		for i := range n {
			if err := db.Set(fmt.Appendf(nil, "k%05d", i), []byte("value"), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(context.Background(), []byte("k"), []byte("l"), false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v, closer, err := db.Get(fmt.Appendf(nil, "k%05d", i))
		if err != nil || string(v) != "value" {
			t.Fatalf("get %d: %q %v", i, v, err)
		}
		_ = closer.Close()
	}
	return db
}

// points returns, for one metric, the int or float value of each data point
// keyed by its riffdb.store attribute.
func points(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			add := func(attrs attribute.Set, v float64) {
				store, _ := attrs.Value(telemetry.StoreKey)
				db, _ := attrs.Value(telemetry.DatabaseKey)
				out[store.AsString()+"/"+db.AsString()] = v
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s is not monotonic", name)
				}
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

func TestObservePebbleReportsStoreMetrics(t *testing.T) {
	const writes = 50
	db := openStore(t, writes)
	t.Cleanup(func() { _ = db.Close() })
	var open atomic.Pointer[pebble.DB]
	open.Store(db)
	calls := atomic.Int64{}

	mr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(mr))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	unregister, err := telemetry.ObservePebble(mp, "archive", "default", func() *pebble.Metrics {
		calls.Add(1)
		if d := open.Load(); d != nil {
			return d.Metrics()
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second store, already closed: it must produce no series at all.
	unregisterClosed, err := telemetry.ObservePebble(mp, "primary", "default", func() *pebble.Metrics { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unregisterClosed() }()
	if calls.Load() != 0 {
		t.Fatalf("metrics function called %d times before any collection", calls.Load())
	}

	var rm metricdata.ResourceMetrics
	if err := mr.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("metrics function called %d times for one collection, want 1", calls.Load())
	}
	want := db.Metrics()
	if want.MemTable.ZombieSize == 0 {
		t.Fatalf("the store keeps no obsolete memtable after its flush (MemTable %+v): the memtable check below would not tell Size from Size+ZombieSize", want.MemTable)
	}
	key := "archive/default"
	checks := []struct {
		name string
		ok   func(v float64) bool
		desc string
	}{
		{telemetry.MetricPebbleCompactions, func(v float64) bool { return v >= 1 && v == float64(want.Compact.Count) }, "≥ 1 and = Compact.Count"},
		{telemetry.MetricPebbleCompactionDebt, func(v float64) bool { return v >= 0 }, "≥ 0"},
		// No compaction runs once openStore returns, so the time is the
		// completed compactions' own.
		{telemetry.MetricPebbleCompactionTime, func(v float64) bool { return v > 0 && v == want.Compact.Duration.Seconds() },
			fmt.Sprintf("> 0 and = Compact.Duration (%v)", want.Compact.Duration)},
		{telemetry.MetricPebbleCompactionWritten, func(v float64) bool {
			total := want.Total()
			return v > 0 && v == float64(total.TableBytesCompacted+total.BlobBytesCompacted)
		}, "> 0 and = the bytes compactions wrote over all levels"},
		{telemetry.MetricPebbleFlushes, func(v float64) bool { return v >= 1 && v == float64(want.Flush.Count) }, "≥ 1 and = Flush.Count"},
		{telemetry.MetricPebbleWALFsyncs, func(v float64) bool { return v >= writes }, fmt.Sprintf("≥ %d synced writes", writes)},
		{telemetry.MetricPebbleWALFsyncTime, func(v float64) bool { return v > 0 && v < 60 }, "in (0, 60) seconds"},
		{telemetry.MetricPebbleDiskUsage, func(v float64) bool { return v > 0 }, "> 0"},
		{telemetry.MetricPebbleMemtableSize, func(v float64) bool { return v == float64(want.MemTable.Size+want.MemTable.ZombieSize) },
			fmt.Sprintf("= MemTable.Size + ZombieSize (%d + %d): the recycled memtable is resident too", want.MemTable.Size, want.MemTable.ZombieSize)},
		{telemetry.MetricPebbleBlockCacheSize, func(v float64) bool { return v > 0 }, "> 0 after reads"},
		{telemetry.MetricPebbleReadAmplification, func(v float64) bool { return v >= 1 && v == float64(want.ReadAmp()) }, "≥ 1 and = ReadAmp()"},
	}
	for _, c := range checks {
		got := points(t, rm, c.name)
		v, ok := got[key]
		if !ok {
			t.Errorf("%s: no point for %s (got %v)", c.name, key, got)
			continue
		}
		if !c.ok(v) {
			t.Errorf("%s = %v, want %s", c.name, v, c.desc)
		}
		if len(got) != 1 {
			t.Errorf("%s: closed store produced points: %v", c.name, got)
		}
	}

	// The store closes: no observation, no error.
	open.Store(nil)
	rm = metricdata.ResourceMetrics{}
	if err := mr.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if got := points(t, rm, c.name); len(got) != 0 {
			t.Errorf("%s after close: %v", c.name, got)
		}
	}

	// Unregistered: the function is not called any more.
	open.Store(db)
	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	rm = metricdata.ResourceMetrics{}
	if err := mr.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != before {
		t.Error("metrics function called after unregister")
	}
	if got := points(t, rm, telemetry.MetricPebbleDiskUsage); len(got) != 0 {
		t.Errorf("disk usage after unregister: %v", got)
	}
}

func TestObservePebblePrometheusNames(t *testing.T) {
	db := openStore(t, 5)
	t.Cleanup(func() { _ = db.Close() })
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	// Two stalls: one of 2.5 s that ended, one still holding writes for
	// 1 s at the scrape.
	now := time.Unix(1000, 0)
	stalls := stall.New(nil, "archive", func() time.Time { return now })
	var l pebble.EventListener
	stalls.Listen(&l)
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	now = now.Add(2500 * time.Millisecond)
	l.WriteStallEnd()
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	now = now.Add(time.Second)
	unregister, err := telemetry.ObservePebble(tel.MeterProvider, "archive", "orders", db.Metrics, stalls)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unregister() }()
	body, _ := scrape(t, tel.MetricsHandler, false)
	labels := `{riffdb_database="orders",riffdb_store="archive"}`
	for _, name := range []string{
		"riffdb_pebble_compactions_total", "riffdb_pebble_compaction_debt_bytes", "riffdb_pebble_flushes_total",
		"riffdb_pebble_compaction_time_seconds_total", "riffdb_pebble_compaction_written_bytes_total",
		"riffdb_pebble_wal_fsyncs_total", "riffdb_pebble_wal_fsync_time_seconds_total", "riffdb_pebble_disk_usage_bytes",
		"riffdb_pebble_memtable_size_bytes", "riffdb_pebble_block_cache_size_bytes", "riffdb_pebble_read_amplification",
		"riffdb_pebble_write_stalls_total", "riffdb_pebble_write_stall_time_seconds_total",
	} {
		if !strings.Contains(body, "\n"+name+labels+" ") {
			t.Errorf("scrape lacks %s%s:\n%s", name, labels, grepLines(body, "riffdb_pebble"))
		}
	}
	for _, want := range []string{
		"\nriffdb_pebble_write_stalls_total" + labels + " 2\n",
		"\nriffdb_pebble_write_stall_time_seconds_total" + labels + " 3.5\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, grepLines(body, "riffdb_pebble_write_stall"))
		}
	}
}

func TestObservePebbleArguments(t *testing.T) {
	if _, err := telemetry.ObservePebble(sdkmetric.NewMeterProvider(), "archive", "default", nil, nil); !errors.Is(err, telemetry.ErrNilMetricsFunc) {
		t.Errorf("nil metrics: err %v, want ErrNilMetricsFunc", err)
	}
	unregister, err := telemetry.ObservePebble(nil, "archive", "default", func() *pebble.Metrics { return nil }, nil)
	if err != nil {
		t.Fatalf("nil provider: %v", err)
	}
	if err := unregister(); err != nil {
		t.Errorf("unregister on no-op provider: %v", err)
	}
}
