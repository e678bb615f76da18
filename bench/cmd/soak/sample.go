package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is one row of the soak's record, taken every interval. Values that
// could not be read are NaN (an empty CSV cell).
type Sample struct {
	// Elapsed is the time since the soak load started.
	Elapsed time.Duration
	// RSSBytes is VmRSS of the server process (/proc/<pid>/status).
	RSSBytes float64
	// Goroutines is the server's go_goroutines.
	Goroutines float64
	// OpenFDs is the number of entries of /proc/<pid>/fd, and Sockets how
	// many of them are sockets (listeners and connections).
	OpenFDs, Sockets float64
	// Tables is how many of the descriptors are open table files (*.sst)
	// of either store: Pebble's table cache keeps them open, up to the
	// store's MaxOpenFiles, so they follow the number of tables.
	Tables float64
	// DebtPrimary and DebtArchive are riffdb_pebble_compaction_debt_bytes
	// of the primary and the archive store.
	DebtPrimary, DebtArchive float64
	// Memtables is riffdb_pebble_memtable_size_bytes of both stores: the
	// memtable memory Pebble has allocated, the obsolete memtable it keeps
	// for reuse included (outside the Go heap; it becomes resident as the
	// memtables fill, so RSS rises towards it).
	Memtables float64
	// HeapInUse is the server's go_memstats_heap_inuse_bytes and
	// BlockCache its Pebble block caches (riffdb_pebble_block_cache_size_bytes
	// of the primary, which reports the primaries' cache, plus the archive's,
	// which reports the archives' cache), the other two large parts of RSS.
	HeapInUse, BlockCache float64
	// Pending is the database's pending_outbox_deliveries (GET /v1/stats).
	Pending float64
	// Requests is the number of requests the load generator completed so
	// far, every command together.
	Requests float64
	// Compactions*, Fsyncs* and FsyncSeconds* are the cumulative
	// riffdb_pebble_compactions_total, riffdb_pebble_wal_fsyncs_total and
	// riffdb_pebble_wal_fsync_time_seconds_total of each store: their
	// change between rows says which intervals compacted, and how long the
	// intervals' WAL syncs took on average, next to the lag of the same
	// interval.
	CompactionsPrimary, CompactionsArchive   float64
	FsyncsPrimary, FsyncsArchive             float64
	FsyncSecondsPrimary, FsyncSecondsArchive float64
	// CHeapRSS is the resident size of the server's [heap] mapping
	// (/proc/<pid>/smaps): glibc's main arena, which on the one arena the
	// server sets up holds Pebble's block cache blocks, the cache's entries
	// and maps, and whatever free space their churn left (a block freed
	// when it is evicted, or when a compaction deletes its table, stays
	// resident until a new block takes its place). Its excess over
	// BlockCache is that free space (CHeapFree) and the cache's own
	// structures.
	CHeapRSS float64
	// FileRSS is RssFile of /proc/<pid>/status: pages of the binary and
	// libraries, which grow as code runs for the first time.
	FileRSS float64
	// GoRetained is go_memstats_sys_bytes less go_memstats_heap_released_bytes:
	// everything the Go runtime holds from the system (heap, stacks, its own
	// structures), an upper bound of its resident part.
	GoRetained float64
	// CHeapFree is the C allocator's free space in its heap
	// (riffdb_c_allocator_memory_bytes{riffdb_c_allocator_state="heap_free"},
	// glibc's mallinfo2): the part of CHeapRSS less BlockCache that is
	// not in use. The rest of that excess is in use by Pebble beyond the
	// blocks the cache counts: the cache's entries and maps, and each
	// block's header.
	CHeapFree float64
	// StallSecondsPrimary and StallSecondsArchive are the cumulative
	// riffdb_pebble_write_stall_time_seconds_total of each store: how long
	// Pebble held the store's writes back so far (internal/store/stall).
	StallSecondsPrimary, StallSecondsArchive float64
	// ServerCPUSeconds is the server's process_cpu_seconds_total: its change
	// over a window, divided by the events delivered in it, is the server's
	// CPU per delivered event (its commands included).
	ServerCPUSeconds float64
	// MachineBusySeconds and MachineSeconds are the CPU time of the whole
	// machine from /proc/stat, busy (all but idle and iowait) and in all,
	// summed over its CPUs: the load generator and anything else running
	// share them with the server.
	MachineBusySeconds, MachineSeconds float64
	// Disk* are the cumulative counters of the disk that holds the server's
	// data (/sys/dev/block/<device>/stat, the whole disk): writes completed,
	// the bytes they wrote and the time they took, and flush requests (a
	// WAL's fdatasync ends in one) and the time they took. They say whether
	// the disk served the server's syncs more slowly in one window than in
	// another, and how much was written next to them (flushes, compactions).
	DiskWrites, DiskWrittenBytes, DiskWriteSeconds, DiskFlushes, DiskFlushSeconds float64
	// SchedWaitSeconds and SchedWaits are the cumulative sum and count of
	// the server's go_sched_latencies_seconds (how long goroutines waited,
	// runnable, for a CPU), and SchedWaitsSlow how many of the waits were
	// longer than the histogram's largest bound at or below 1 ms (0.92 ms
	// with Go 1.26's buckets): over an interval, the change of
	// SchedWaitSeconds divided by its length is the mean number of
	// goroutines waiting for a CPU.
	SchedWaitSeconds, SchedWaits, SchedWaitsSlow float64
	// CompactionSeconds* and CompactedBytes* are the cumulative
	// riffdb_pebble_compaction_time_seconds_total and
	// riffdb_pebble_compaction_written_bytes_total of each store: over an
	// interval, the share of its time a compaction ran and what compactions
	// wrote, which grow as the store does.
	CompactionSecondsPrimary, CompactionSecondsArchive float64
	CompactedBytesPrimary, CompactedBytesArchive       float64
	// ArchiveTxns and ArchiveTxnsSlow are the cumulative count of the
	// server's archive transactions (riffdb_archive_txn_duration_seconds)
	// and of those that took longer than 5 ms: one event each, so over an
	// interval they say how many deliveries waited on a stalled sync.
	ArchiveTxns, ArchiveTxnsSlow float64
	// Lag holds the commit→archived lag observations of the interval that
	// ends at this sample: the change of the server's
	// riffdb_outbox_delivery_lag_seconds histogram since the previous
	// sample, cumulative by bucket bound in seconds. Nil for the first
	// sample.
	Lag histogram
}

// LagP returns the q-quantile of the interval's lag in milliseconds (NaN
// when nothing was delivered in the interval).
func (s Sample) LagP(q float64) float64 {
	if s.Lag == nil {
		return math.NaN()
	}
	return s.Lag.quantile(q) * 1000
}

// fixedColumns are the CSV columns before the lag buckets.
var fixedColumns = []string{"elapsed_s", "rss_bytes", "goroutines", "open_fds", "open_sockets", "open_tables",
	"compaction_debt_primary_bytes", "compaction_debt_archive_bytes", "memtable_bytes", "heap_inuse_bytes", "block_cache_bytes", "pending", "requests",
	"compactions_primary", "compactions_archive", "wal_fsyncs_primary", "wal_fsyncs_archive", "wal_fsync_seconds_primary", "wal_fsync_seconds_archive",
	"lag_count", "lag_p50_ms", "lag_p99_ms"}

// laterColumns follow the lag buckets, in the order they were added; a
// record written before some of them lacks those, and reads back with their
// values unknown (NaN).
var laterColumns = []string{"c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes", "c_heap_free_bytes",
	"write_stall_seconds_primary", "write_stall_seconds_archive",
	"server_cpu_seconds", "machine_cpu_busy_seconds", "machine_cpu_seconds",
	"disk_writes", "disk_written_bytes", "disk_write_seconds", "disk_flushes", "disk_flush_seconds",
	"sched_wait_seconds", "sched_waits", "sched_waits_slow",
	"compaction_seconds_primary", "compaction_seconds_archive", "compacted_bytes_primary", "compacted_bytes_archive",
	"archive_txns", "archive_txns_slow"}

// laterFields are the fields of s that laterColumns hold, in their order.
func (s *Sample) laterFields() []*float64 {
	return []*float64{&s.CHeapRSS, &s.FileRSS, &s.GoRetained, &s.CHeapFree, &s.StallSecondsPrimary, &s.StallSecondsArchive,
		&s.ServerCPUSeconds, &s.MachineBusySeconds, &s.MachineSeconds,
		&s.DiskWrites, &s.DiskWrittenBytes, &s.DiskWriteSeconds, &s.DiskFlushes, &s.DiskFlushSeconds,
		&s.SchedWaitSeconds, &s.SchedWaits, &s.SchedWaitsSlow,
		&s.CompactionSecondsPrimary, &s.CompactionSecondsArchive, &s.CompactedBytesPrimary, &s.CompactedBytesArchive,
		&s.ArchiveTxns, &s.ArchiveTxnsSlow}
}

// lagColumnPrefix starts the name of each lag bucket column; the bound in
// seconds follows ("lag_le_0.005", "lag_le_+Inf"). A bucket column holds the
// interval's cumulative count at that bound.
const lagColumnPrefix = "lag_le_"

// csvWriter writes samples as CSV, one row per sample, flushed at once so
// that an interrupted soak keeps every row written so far. The bucket
// columns are fixed by the bounds given or, without them, by the first
// sample that has lag buckets: a soak with -rate starts on a server that
// has delivered nothing, so the first scrape has no lag histogram, and the
// rows before the first delivery are held until its buckets are known
// (before 2026-12-04 such a CSV had no bucket columns, and -from-csv could
// not compute its p99 target).
type csvWriter struct {
	w      *csv.Writer
	bounds []float64
	wrote  bool
	held   []Sample // rows waiting for the bucket columns
}

func newCSVWriter(w io.Writer, bounds []float64) *csvWriter {
	return &csvWriter{w: csv.NewWriter(w), bounds: slices.Clone(bounds)}
}

func formatBound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

func cell(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Write writes s (and the header before the first row). Without bounds, a
// sample without lag buckets is held until one with them, or Close.
func (c *csvWriter) Write(s Sample) error {
	if !c.wrote && len(c.bounds) == 0 {
		if s.Lag == nil || len(s.Lag.bounds()) == 0 {
			c.held = append(c.held, s)
			return nil
		}
		c.bounds = s.Lag.bounds()
	}
	if err := c.Close(); err != nil {
		return err
	}
	return c.write(s)
}

// Close writes the rows still held: before the first row with buckets, or,
// in a soak in which nothing was delivered, without bucket columns.
func (c *csvWriter) Close() error {
	held := c.held
	c.held = nil
	for _, h := range held {
		if err := c.write(h); err != nil {
			return err
		}
	}
	return nil
}

func (c *csvWriter) write(s Sample) error {
	if !c.wrote {
		head := slices.Clone(fixedColumns)
		for _, b := range c.bounds {
			head = append(head, lagColumnPrefix+formatBound(b))
		}
		head = append(head, laterColumns...)
		if err := c.w.Write(head); err != nil {
			return err
		}
		c.wrote = true
	}
	lagCount := math.NaN()
	if s.Lag != nil {
		lagCount = s.Lag.count()
	}
	row := []string{strconv.FormatFloat(s.Elapsed.Seconds(), 'f', 3, 64), cell(s.RSSBytes), cell(s.Goroutines),
		cell(s.OpenFDs), cell(s.Sockets), cell(s.Tables), cell(s.DebtPrimary), cell(s.DebtArchive), cell(s.Memtables), cell(s.HeapInUse), cell(s.BlockCache), cell(s.Pending), cell(s.Requests),
		cell(s.CompactionsPrimary), cell(s.CompactionsArchive), cell(s.FsyncsPrimary), cell(s.FsyncsArchive), cell(s.FsyncSecondsPrimary), cell(s.FsyncSecondsArchive),
		cell(lagCount), cell(round3(s.LagP(0.5))), cell(round3(s.LagP(0.99)))}
	for _, b := range c.bounds {
		v := math.NaN()
		if s.Lag != nil {
			v = s.Lag[b]
		}
		row = append(row, cell(v))
	}
	for _, f := range s.laterFields() {
		row = append(row, cell(*f))
	}
	if err := c.w.Write(row); err != nil {
		return err
	}
	c.w.Flush()
	return c.w.Error()
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// recorded rounds a sample's time to the CSV's resolution (milliseconds),
// so that a soak evaluated from its CSV (-from-csv) puts every sample in the
// same window as the run did: a sample taken 0.4 ms after a window's edge
// is written as the edge itself.
func recorded(elapsed time.Duration) time.Duration { return elapsed.Round(time.Millisecond) }

// readCSV reads samples written by csvWriter. The derived columns (lag
// count and percentiles) are ignored: they are recomputed from the buckets.
func readCSV(r io.Reader) ([]Sample, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("soak: reading CSV: %w", err)
	}
	if len(rows) == 0 {
		return nil, errors.New("soak: the CSV has no header")
	}
	head := rows[0]
	if len(head) < len(fixedColumns) || !slices.Equal(head[:len(fixedColumns)], fixedColumns) {
		return nil, errors.New("soak: the CSV header is not a soak record's")
	}
	var bounds []float64
	rest := head[len(fixedColumns):]
	later := 0 // how many of laterColumns the record has, the first ones
	for k := len(laterColumns); k > 0; k-- {
		if n := len(rest) - k; n >= 0 && slices.Equal(rest[n:], laterColumns[:k]) {
			later, rest = k, rest[:n]
			break
		}
	}
	if slices.ContainsFunc(rest, func(h string) bool { return slices.Contains(laterColumns, h) }) {
		return nil, errors.New("soak: the CSV's later columns are not the last ones, or not in their order")
	}
	for _, h := range rest {
		b, ok := strings.CutPrefix(h, lagColumnPrefix)
		if !ok {
			return nil, fmt.Errorf("soak: unexpected CSV column %q", h)
		}
		v, err := strconv.ParseFloat(b, 64)
		if err != nil {
			return nil, fmt.Errorf("soak: CSV column %q: not a bucket bound", h)
		}
		bounds = append(bounds, v)
	}
	out := make([]Sample, 0, len(rows)-1)
	for i, row := range rows[1:] {
		v := make([]float64, len(row))
		for j, c := range row {
			if c == "" {
				v[j] = math.NaN()
				continue
			}
			if v[j], err = strconv.ParseFloat(c, 64); err != nil {
				return nil, fmt.Errorf("soak: CSV row %d, column %s: %q is not a number", i+2, head[j], c)
			}
		}
		s := Sample{Elapsed: time.Duration(math.Round(v[0] * float64(time.Second))), RSSBytes: v[1], Goroutines: v[2],
			OpenFDs: v[3], Sockets: v[4], Tables: v[5], DebtPrimary: v[6], DebtArchive: v[7], Memtables: v[8], HeapInUse: v[9], BlockCache: v[10],
			Pending: v[11], Requests: v[12], CompactionsPrimary: v[13], CompactionsArchive: v[14], FsyncsPrimary: v[15], FsyncsArchive: v[16],
			FsyncSecondsPrimary: v[17], FsyncSecondsArchive: v[18]}
		for k, f := range s.laterFields() {
			*f = math.NaN()
			if k < later {
				*f = v[len(fixedColumns)+len(bounds)+k]
			}
		}
		for k, b := range bounds {
			x := v[len(fixedColumns)+k]
			if math.IsNaN(x) {
				continue
			}
			if s.Lag == nil {
				s.Lag = histogram{}
			}
			s.Lag[b] = x
		}
		out = append(out, s)
	}
	return out, nil
}
