package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/internal/store/stall"
)

// ScopeName is the instrumentation scope of the instruments created by this
// package.
const ScopeName = "github.com/riffdb/riffdb/telemetry"

// Attribute keys of the storage-engine instruments.
const (
	// StoreKey names the Pebble store: "primary" or "archive".
	StoreKey = attrkey.Store
	// DatabaseKey is the database alias the store belongs to.
	DatabaseKey = attrkey.Database
)

// Names of the storage-engine instruments registered by ObservePebble.
const (
	MetricPebbleCompactions       = "riffdb.pebble.compactions"
	MetricPebbleCompactionDebt    = "riffdb.pebble.compaction.debt"
	MetricPebbleCompactionTime    = "riffdb.pebble.compaction.time"
	MetricPebbleCompactionWritten = "riffdb.pebble.compaction.written"
	MetricPebbleFlushes           = "riffdb.pebble.flushes"
	MetricPebbleWALFsyncs         = "riffdb.pebble.wal.fsyncs"
	MetricPebbleWALFsyncTime      = "riffdb.pebble.wal.fsync.time"
	MetricPebbleDiskUsage         = "riffdb.pebble.disk.usage"
	MetricPebbleMemtableSize      = "riffdb.pebble.memtable.size"
	MetricPebbleBlockCacheSize    = "riffdb.pebble.block_cache.size"
	MetricPebbleReadAmplification = "riffdb.pebble.read_amplification"
	MetricPebbleWriteStalls       = "riffdb.pebble.write_stalls"
	MetricPebbleWriteStallTime    = "riffdb.pebble.write_stall.time"
)

// ErrNilMetricsFunc is returned by ObservePebble when it is given no metrics
// function.
var ErrNilMetricsFunc = errors.New("telemetry: pebble metrics function is nil")

type pebbleInstruments struct {
	compactions    metric.Int64ObservableCounter
	compactionDebt metric.Int64ObservableGauge
	compactionTime metric.Float64ObservableCounter
	compacted      metric.Int64ObservableCounter
	flushes        metric.Int64ObservableCounter
	fsyncs         metric.Int64ObservableCounter
	fsyncTime      metric.Float64ObservableCounter
	diskUsage      metric.Int64ObservableGauge
	memtable       metric.Int64ObservableGauge
	blockCache     metric.Int64ObservableGauge
	readAmp        metric.Int64ObservableGauge
	stalls         metric.Int64ObservableCounter
	stallTime      metric.Float64ObservableCounter
}

// ObservePebble registers asynchronous instruments for one Pebble store,
// labelled riffdb.store=store and riffdb.database=database:
//
//   - riffdb.pebble.compactions ({compaction}, counter): compactions completed.
//   - riffdb.pebble.compaction.debt (By, gauge): estimated bytes still to compact.
//   - riffdb.pebble.compaction.time (s, counter): how long compactions ran,
//     summed over compactions that ran at once, the ongoing ones counted up
//     to the collection (Metrics.Compact.Duration). Its rate is the mean
//     number of compactions running: on a machine with few cores, the share
//     of a CPU the store's compactions take from commits and deliveries.
//   - riffdb.pebble.compaction.written (By, counter): bytes of tables
//     compactions wrote, over every level (LevelMetrics.TableBytesCompacted
//     and BlobBytesCompacted; flushes not included).
//   - riffdb.pebble.flushes ({flush}, counter): memtable flushes completed.
//   - riffdb.pebble.wal.fsyncs ({fsync}, counter) and riffdb.pebble.wal.fsync.time
//     (s, counter): WAL fsyncs and the total time spent in them, read from
//     Pebble's LogWriter.FsyncLatency histogram. Their rate ratio is the mean
//     fsync latency. The histogram's buckets are not re-exported: OpenTelemetry
//     has no asynchronous histogram instrument, and Pebble's cumulative buckets
//     cannot be fed into a synchronous one without double counting.
//   - riffdb.pebble.disk.usage (By, gauge): Metrics.DiskSpaceUsage, the logical
//     size of live and obsolete files (WAL preallocation is not included).
//   - riffdb.pebble.memtable.size and riffdb.pebble.block_cache.size (By, gauge):
//     memory held outside the Go heap (Pebble allocates both manually). The
//     memtable size is MemTable.Size plus MemTable.ZombieSize: the memtables
//     in use and those still allocated, above all the one obsolete memtable
//     Pebble keeps to reuse at its next rotation, whose pages stay resident.
//     MemTable.Size alone leaves up to a whole memtable per store out.
//   - riffdb.pebble.read_amplification ({sublevel}, gauge): sorted runs a read
//     may consult (Metrics.ReadAmp).
//   - riffdb.pebble.write_stalls ({stall}, counter) and
//     riffdb.pebble.write_stall.time (s, counter): the times Pebble held
//     every write to the store back, and for how long in all, an ongoing
//     stall counted up to the collection (internal/store/stall). Pebble's
//     metrics do not count them. Observed from stalls, when it is not nil,
//     whether or not the store is open.
//
// metrics is called once per collection (scrape), never otherwise; when it
// returns nil (the store is closed or being reopened) nothing is observed for
// this store. A nil mp uses a no-op provider. The returned unregister
// function removes the callback; call it before the store goes away for good.
// Several stores may be observed at once with distinct labels.
func ObservePebble(mp metric.MeterProvider, store, database string, metrics func() *pebble.Metrics, stalls *stall.Tracker) (unregister func() error, err error) {
	if metrics == nil {
		return nil, ErrNilMetricsFunc
	}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	in, meter, err := newPebbleInstruments(mp)
	if err != nil {
		return nil, err
	}
	set := metric.WithAttributeSet(attribute.NewSet(StoreKey.String(store), DatabaseKey.String(database)))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if stalls != nil {
			n, held := stalls.Stats()
			o.ObserveInt64(in.stalls, n, set)
			o.ObserveFloat64(in.stallTime, held.Seconds(), set)
		}
		m := metrics()
		if m == nil {
			return nil
		}
		o.ObserveInt64(in.compactions, m.Compact.Count, set)
		o.ObserveInt64(in.compactionDebt, clampInt64(m.Compact.EstimatedDebt), set)
		o.ObserveFloat64(in.compactionTime, m.Compact.Duration.Seconds(), set)
		total := m.Total()
		o.ObserveInt64(in.compacted, clampInt64(total.TableBytesCompacted+total.BlobBytesCompacted), set)
		o.ObserveInt64(in.flushes, m.Flush.Count, set)
		o.ObserveInt64(in.diskUsage, clampInt64(m.DiskSpaceUsage()), set)
		o.ObserveInt64(in.memtable, clampInt64(m.MemTable.Size+m.MemTable.ZombieSize), set)
		o.ObserveInt64(in.blockCache, m.BlockCache.Size, set)
		o.ObserveInt64(in.readAmp, int64(m.ReadAmp()), set)
		if h := m.LogWriter.FsyncLatency; h != nil {
			var d dto.Metric
			if err := h.Write(&d); err == nil && d.Histogram != nil {
				o.ObserveInt64(in.fsyncs, clampInt64(d.Histogram.GetSampleCount()), set)
				// Pebble observes time.Duration values, i.e. nanoseconds.
				o.ObserveFloat64(in.fsyncTime, d.Histogram.GetSampleSum()/float64(time.Second), set)
			}
		}
		return nil
	}, in.compactions, in.compactionDebt, in.compactionTime, in.compacted, in.flushes, in.fsyncs, in.fsyncTime,
		in.diskUsage, in.memtable, in.blockCache, in.readAmp, in.stalls, in.stallTime)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register pebble callback: %w", err)
	}
	return reg.Unregister, nil
}

func newPebbleInstruments(mp metric.MeterProvider) (*pebbleInstruments, metric.Meter, error) {
	meter := mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var in pebbleInstruments
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	in.compactions, err = meter.Int64ObservableCounter(MetricPebbleCompactions,
		metric.WithUnit("{compaction}"), metric.WithDescription("Pebble compactions completed."))
	add(err)
	in.compactionDebt, err = meter.Int64ObservableGauge(MetricPebbleCompactionDebt,
		metric.WithUnit("By"), metric.WithDescription("Estimated bytes Pebble still has to compact."))
	add(err)
	in.compactionTime, err = meter.Float64ObservableCounter(MetricPebbleCompactionTime,
		metric.WithUnit("s"), metric.WithDescription("Total time Pebble compactions ran, an ongoing compaction included."))
	add(err)
	in.compacted, err = meter.Int64ObservableCounter(MetricPebbleCompactionWritten,
		metric.WithUnit("By"), metric.WithDescription("Bytes of tables Pebble compactions wrote."))
	add(err)
	in.flushes, err = meter.Int64ObservableCounter(MetricPebbleFlushes,
		metric.WithUnit("{flush}"), metric.WithDescription("Pebble memtable flushes completed."))
	add(err)
	in.fsyncs, err = meter.Int64ObservableCounter(MetricPebbleWALFsyncs,
		metric.WithUnit("{fsync}"), metric.WithDescription("Pebble WAL fsyncs completed."))
	add(err)
	in.fsyncTime, err = meter.Float64ObservableCounter(MetricPebbleWALFsyncTime,
		metric.WithUnit("s"), metric.WithDescription("Total time Pebble spent in WAL fsyncs."))
	add(err)
	in.diskUsage, err = meter.Int64ObservableGauge(MetricPebbleDiskUsage,
		metric.WithUnit("By"), metric.WithDescription("Logical disk space used by the Pebble store's files."))
	add(err)
	in.memtable, err = meter.Int64ObservableGauge(MetricPebbleMemtableSize,
		metric.WithUnit("By"), metric.WithDescription("Bytes allocated to Pebble memtables."))
	add(err)
	in.blockCache, err = meter.Int64ObservableGauge(MetricPebbleBlockCacheSize,
		metric.WithUnit("By"), metric.WithDescription("Bytes in use by the Pebble block cache."))
	add(err)
	in.readAmp, err = meter.Int64ObservableGauge(MetricPebbleReadAmplification,
		metric.WithUnit("{sublevel}"), metric.WithDescription("Sorted runs a Pebble read may have to consult."))
	add(err)
	in.stalls, err = meter.Int64ObservableCounter(MetricPebbleWriteStalls,
		metric.WithUnit("{stall}"), metric.WithDescription("Times Pebble held every write to the store back (a write stall)."))
	add(err)
	in.stallTime, err = meter.Float64ObservableCounter(MetricPebbleWriteStallTime,
		metric.WithUnit("s"), metric.WithDescription("Total time Pebble held writes to the store back, an ongoing stall included."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("telemetry: create pebble instruments: %w", err)
	}
	return &in, meter, nil
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
