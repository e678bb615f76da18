package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
# TYPE riffdb_pebble_compaction_debt_bytes gauge
riffdb_pebble_compaction_debt_bytes{otel_scope_name="github.com/riffdb/riffdb/telemetry",riffdb_database="default",riffdb_store="primary"} 1024
riffdb_pebble_compaction_debt_bytes{otel_scope_name="github.com/riffdb/riffdb/telemetry",riffdb_database="default",riffdb_store="archive"} 3.5e+06
# TYPE riffdb_outbox_delivery_lag_seconds histogram
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="default",le="0.001"} 10
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="default",le="0.01"} 60
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="default",le="0.1"} 100
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="default",le="+Inf"} 100
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="other",le="0.001"} 0
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="other",le="0.01"} 0
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="other",le="0.1"} 0
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="other",le="+Inf"} 100
riffdb_outbox_delivery_lag_seconds_sum{riffdb_database="default"} 1.5
weird_label{a="x\"y,z}",b="new\nline"} 7 1700000000000
`

func TestParseExposition(t *testing.T) {
	ss, err := parseExposition(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := sum(ss, "go_goroutines", nil); !ok || v != 42 {
		t.Fatalf("go_goroutines = %v, %v", v, ok)
	}
	if v, ok := sum(ss, "riffdb_pebble_compaction_debt_bytes", map[string]string{"riffdb_store": "archive"}); !ok || v != 3.5e6 {
		t.Fatalf("archive debt = %v, %v", v, ok)
	}
	if v, ok := sum(ss, "riffdb_pebble_compaction_debt_bytes", nil); !ok || v != 3.5e6+1024 {
		t.Fatalf("debt of both stores = %v, %v", v, ok)
	}
	if _, ok := sum(ss, "riffdb_pebble_compaction_debt_bytes", map[string]string{"riffdb_store": "nope"}); ok {
		t.Fatal("a label that matches nothing found a sample")
	}
	if _, ok := sum(ss, "go_gc", nil); ok {
		t.Fatal("a prefix of a name matched")
	}
	var weird series
	for _, s := range ss {
		if s.name == "weird_label" {
			weird = s
		}
	}
	if weird.value != 7 || weird.labels["a"] != `x"y,z}` || weird.labels["b"] != "new\nline" {
		t.Fatalf("escaped labels parsed as %+v", weird)
	}
	h, err := histogramOf(ss, "riffdb_outbox_delivery_lag_seconds", map[string]string{"riffdb_database": "default"})
	if err != nil {
		t.Fatal(err)
	}
	if h.count() != 100 || h[0.01] != 60 || len(h) != 4 {
		t.Fatalf("histogram %v", h)
	}
	all, err := histogramOf(ss, "riffdb_outbox_delivery_lag_seconds", nil)
	if err != nil || all.count() != 200 || all[0.1] != 100 {
		t.Fatalf("histogram of both series %v (%v)", all, err)
	}
}

// TestSchedWaits reads the scheduling latency histogram as the server's Go
// collector exports it (the runtime's bounds, Go 1.26): the slow waits are
// those beyond 0.92 ms, its largest bound at or below 1 ms.
func TestSchedWaits(t *testing.T) {
	const sched = `# TYPE go_sched_latencies_seconds histogram
go_sched_latencies_seconds_bucket{le="6.399999999999999e-08"} 100
go_sched_latencies_seconds_bucket{le="6.399999999999999e-07"} 500
go_sched_latencies_seconds_bucket{le="7.167999999999999e-06"} 900
go_sched_latencies_seconds_bucket{le="8.191999999999999e-05"} 960
go_sched_latencies_seconds_bucket{le="0.0009175039999999999"} 990
go_sched_latencies_seconds_bucket{le="0.010485759999999998"} 998
go_sched_latencies_seconds_bucket{le="0.11744051199999998"} 1000
go_sched_latencies_seconds_bucket{le="+Inf"} 1000
go_sched_latencies_seconds_sum 0.25
go_sched_latencies_seconds_count 1000
`
	ss, err := parseExposition(strings.NewReader(sched))
	if err != nil {
		t.Fatal(err)
	}
	if secs, waits, slow := schedWaits(ss); secs != 0.25 || waits != 1000 || slow != 10 {
		t.Fatalf("schedWaits = %v, %v, %v; want 0.25, 1000, 10", secs, waits, slow)
	}
	if txns, slow := archiveTxns(ss); !math.IsNaN(txns) || !math.IsNaN(slow) {
		t.Fatalf("archiveTxns of a scrape without the histogram = %v, %v; want NaN", txns, slow)
	}
	// The archive's transactions, of two databases, with the server's
	// duration buckets: the slow ones are those above the 5-ms bound.
	const txns = `# TYPE riffdb_archive_txn_duration_seconds histogram
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="a",le="0.001"} 900
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="a",le="0.0025"} 950
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="a",le="0.005"} 990
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="a",le="0.01"} 996
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="a",le="+Inf"} 1000
riffdb_archive_txn_duration_seconds_sum{riffdb_database="a"} 1.5
riffdb_archive_txn_duration_seconds_count{riffdb_database="a"} 1000
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="b",le="0.001"} 10
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="b",le="0.0025"} 10
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="b",le="0.005"} 10
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="b",le="0.01"} 11
riffdb_archive_txn_duration_seconds_bucket{riffdb_database="b",le="+Inf"} 12
riffdb_archive_txn_duration_seconds_sum{riffdb_database="b"} 0.1
riffdb_archive_txn_duration_seconds_count{riffdb_database="b"} 12
`
	ss, err = parseExposition(strings.NewReader(txns))
	if err != nil {
		t.Fatal(err)
	}
	if txns, slow := archiveTxns(ss); txns != 1012 || slow != 12 {
		t.Fatalf("archiveTxns = %v, %v; want 1012, 12", txns, slow)
	}
	ss, err = parseExposition(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if secs, waits, slow := schedWaits(ss); !math.IsNaN(secs) || !math.IsNaN(waits) || !math.IsNaN(slow) {
		t.Fatalf("schedWaits of a scrape without the histogram = %v, %v, %v; want NaN", secs, waits, slow)
	}
}

func TestParseExpositionRejectsMalformedLines(t *testing.T) {
	for _, in := range []string{
		`m{le="0.1"`,
		`m{le="0.1"}`,
		`m{le=0.1} 1`,
		`m{a="b" c="d"} 1`,
		`m one`,
		`m 1 2 3`,
		`{a="b"} 1`,
	} {
		if _, err := parseExposition(strings.NewReader(in)); !errors.Is(err, errExposition) {
			t.Errorf("%q: err %v, want errExposition", in, err)
		}
	}
	ss, err := parseExposition(strings.NewReader("m_bucket{x=\"1\"} 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := histogramOf(ss, "m", nil); err == nil {
		t.Error("a bucket without le was accepted")
	}
}

func TestQuantileInterpolatesLikePromQL(t *testing.T) {
	h := histogram{0.001: 10, 0.01: 60, 0.1: 100, math.Inf(1): 100}
	for _, c := range []struct{ q, want float64 }{
		{0.05, 0.0005},              // rank 5 in (0, 0.001]
		{0.35, 0.001 + 0.009*0.5},   // rank 35: halfway through (0.001, 0.01]
		{0.6, 0.01},                 // rank 60 ends exactly at 0.01
		{0.99, 0.01 + 0.09*39/40.0}, // rank 99 in (0.01, 0.1]
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := (histogram{0.1: 0, math.Inf(1): 5}).quantile(0.99); got != 0.1 {
		t.Errorf("a rank in +Inf gives %v, want the highest finite bound", got)
	}
	if !math.IsNaN(histogram{}.quantile(0.5)) || !math.IsNaN((histogram{0.1: 0, math.Inf(1): 0}).quantile(0.5)) {
		t.Error("an empty histogram has a quantile")
	}
	d := (histogram{0.1: 50, math.Inf(1): 70}).sub(histogram{0.1: 20, math.Inf(1): 20})
	if d[0.1] != 30 || d.count() != 50 {
		t.Errorf("sub = %v", d)
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\triffdb\nVmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nThreads:\t12\n"
	if v, err := parseVmRSS(status); err != nil || v != 123456*1024 {
		t.Fatalf("VmRSS = %v, %v", v, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n"} {
		if _, err := parseVmRSS(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// series builds samples every 10 s over total with the given functions of
// the elapsed seconds.
func synthetic(total time.Duration, rss, gor, fds func(float64) float64, lag func(float64) histogram) []Sample {
	var out []Sample
	for t := time.Duration(0); t <= total; t += 10 * time.Second {
		x := t.Seconds()
		s := Sample{Elapsed: t, RSSBytes: rss(x), Goroutines: gor(x), OpenFDs: fds(x), Sockets: 5, DebtPrimary: 1 << 20,
			DebtArchive: 2 << 20, Memtables: 4 << 20, HeapInUse: 6 << 20, BlockCache: 7 << 20, Pending: 3, Requests: x * 10, Tables: 8,
			CompactionsPrimary: x / 10, CompactionsArchive: x / 5, FsyncsPrimary: x, FsyncsArchive: 2 * x, FsyncSecondsPrimary: x / 1000, FsyncSecondsArchive: x / 500,
			CHeapRSS: 9 << 20, FileRSS: 5 << 20, GoRetained: 11 << 20, CHeapFree: 1 << 20,
			StallSecondsPrimary: x / 100, StallSecondsArchive: x / 50,
			ServerCPUSeconds: x / 4, MachineBusySeconds: x * 1.2, MachineSeconds: x * 2,
			DiskWrites: x * 2000, DiskWrittenBytes: x * 1e7, DiskWriteSeconds: x / 5, DiskFlushes: x * 1000, DiskFlushSeconds: x / 10,
			SchedWaitSeconds: x / 20, SchedWaits: x * 3000, SchedWaitsSlow: x * 3,
			CompactionSecondsPrimary: x / 40, CompactionSecondsArchive: x / 80, CompactedBytesPrimary: x * 1e6, CompactedBytesArchive: x * 2e6,
			ArchiveTxns: x * 100, ArchiveTxnsSlow: x / 10}
		if t > 0 {
			s.Lag = lag(x)
		}
		out = append(out, s)
	}
	return out
}

func flat(v float64) func(float64) float64 { return func(float64) float64 { return v } }

func steadyLag(float64) histogram {
	return histogram{0.001: 50, 0.01: 99, 0.1: 100, math.Inf(1): 100}
}

// readBack reads the CSV in buf and checks that it holds n samples.
func readBack(t *testing.T, buf *bytes.Buffer, n int) []Sample {
	t.Helper()
	got, err := readCSV(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d samples read, %d written", len(got), n)
	}
	return got
}

// TestCSVHoldsRowsUntilTheFirstLag: a soak with -rate starts on a server
// that has delivered nothing, so the writer has no bounds; the bucket
// columns come from the first sample with lag buckets, and the p99 target
// computed from the CSV is the one computed from the samples.
func TestCSVHoldsRowsUntilTheFirstLag(t *testing.T) {
	samples := synthetic(2*time.Minute, flat(100<<20), flat(50), flat(20), func(x float64) histogram {
		return histogram{0.001: 50, 0.01: 90 + x/20, 0.1: 100, math.Inf(1): 100}
	})
	samples[1].Lag = nil // no delivery yet at 10 s either
	var buf bytes.Buffer
	w := newCSVWriter(&buf, nil)
	for i, s := range samples {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
		if i < 2 && buf.Len() != 0 {
			t.Fatalf("wrote before the first sample with lag buckets:\n%s", buf.String())
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(buf.String(), "\n")
	if !strings.Contains(head, ",lag_le_0.001,lag_le_0.01,lag_le_0.1,lag_le_+Inf,") {
		t.Fatalf("no bucket columns in the header %q", head)
	}
	got := readBack(t, &buf, len(samples))
	for i := range samples {
		if got[i].Elapsed != samples[i].Elapsed || (got[i].Lag == nil) != (samples[i].Lag == nil) {
			t.Fatalf("sample %d: wrote %+v, read %+v", i, samples[i], got[i])
		}
	}
	want, read := p99Target(samples, windowsFor(2*time.Minute)), p99Target(got, windowsFor(2*time.Minute))
	if math.IsNaN(want.Value) || math.IsNaN(want.Baseline) || want.Value != read.Value || want.Baseline != read.Baseline {
		t.Fatalf("p99 from the samples %v (baseline %v), from the CSV %v (baseline %v)", want.Value, want.Baseline, read.Value, read.Baseline)
	}

	// Nothing delivered at all: Close writes the rows, without buckets.
	buf.Reset()
	w = newCSVWriter(&buf, nil)
	for _, s := range samples[:2] {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := readCSV(&buf); err != nil || len(got) != 2 {
		t.Fatalf("read %d samples, %v; want 2", len(got), err)
	}
}

func TestCSVRoundTrip(t *testing.T) {
	samples := synthetic(time.Minute, flat(100<<20), flat(50), flat(20), steadyLag)
	samples[2].Goroutines = math.NaN() // a failed scrape
	var buf bytes.Buffer
	w := newCSVWriter(&buf, []float64{0.001, 0.01, 0.1, math.Inf(1)})
	for _, s := range samples {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	head, _, _ := strings.Cut(buf.String(), "\n")
	if want := "elapsed_s,rss_bytes,goroutines,open_fds,open_sockets,open_tables,compaction_debt_primary_bytes,compaction_debt_archive_bytes,memtable_bytes,heap_inuse_bytes,block_cache_bytes,pending,requests,compactions_primary,compactions_archive,wal_fsyncs_primary,wal_fsyncs_archive,wal_fsync_seconds_primary,wal_fsync_seconds_archive,lag_count,lag_p50_ms,lag_p99_ms,lag_le_0.001,lag_le_0.01,lag_le_0.1,lag_le_+Inf,c_heap_rss_bytes,rss_file_bytes,go_retained_bytes,c_heap_free_bytes,write_stall_seconds_primary,write_stall_seconds_archive," +
		"server_cpu_seconds,machine_cpu_busy_seconds,machine_cpu_seconds,disk_writes,disk_written_bytes,disk_write_seconds,disk_flushes,disk_flush_seconds," +
		"sched_wait_seconds,sched_waits,sched_waits_slow,compaction_seconds_primary,compaction_seconds_archive,compacted_bytes_primary,compacted_bytes_archive,archive_txns,archive_txns_slow"; head != want {
		t.Fatalf("header\n%s\nwant\n%s", head, want)
	}
	if !strings.Contains(buf.String(), "\n10.000,104857600,50,20,5,8,1048576,2097152,4194304,6291456,7340032,3,100,1,2,10,20,0.01,0.02,100,1,") {
		t.Fatalf("row of 10 s not as expected:\n%s", buf.String())
	}
	got := readBack(t, &buf, len(samples))
	for i := range samples {
		a, b := samples[i], got[i]
		same := func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }
		if a.Elapsed != b.Elapsed || !same(a.RSSBytes, b.RSSBytes) || !same(a.Goroutines, b.Goroutines) ||
			!same(a.OpenFDs, b.OpenFDs) || !same(a.Sockets, b.Sockets) || !same(a.DebtPrimary, b.DebtPrimary) || !same(a.DebtArchive, b.DebtArchive) || !same(a.Memtables, b.Memtables) ||
			!same(a.HeapInUse, b.HeapInUse) || !same(a.BlockCache, b.BlockCache) ||
			!same(a.Pending, b.Pending) || !same(a.Requests, b.Requests) || !same(a.CompactionsPrimary, b.CompactionsPrimary) ||
			!same(a.CompactionsArchive, b.CompactionsArchive) || !same(a.FsyncsPrimary, b.FsyncsPrimary) || !same(a.FsyncsArchive, b.FsyncsArchive) ||
			!same(a.FsyncSecondsPrimary, b.FsyncSecondsPrimary) || !same(a.FsyncSecondsArchive, b.FsyncSecondsArchive) || (a.Lag == nil) != (b.Lag == nil) ||
			!same(a.CHeapRSS, b.CHeapRSS) || !same(a.FileRSS, b.FileRSS) || !same(a.GoRetained, b.GoRetained) || !same(a.CHeapFree, b.CHeapFree) ||
			!same(a.StallSecondsPrimary, b.StallSecondsPrimary) || !same(a.StallSecondsArchive, b.StallSecondsArchive) ||
			!same(a.ServerCPUSeconds, b.ServerCPUSeconds) || !same(a.MachineBusySeconds, b.MachineBusySeconds) || !same(a.MachineSeconds, b.MachineSeconds) ||
			!same(a.DiskWrites, b.DiskWrites) || !same(a.DiskWrittenBytes, b.DiskWrittenBytes) || !same(a.DiskWriteSeconds, b.DiskWriteSeconds) ||
			!same(a.DiskFlushes, b.DiskFlushes) || !same(a.DiskFlushSeconds, b.DiskFlushSeconds) ||
			!same(a.SchedWaitSeconds, b.SchedWaitSeconds) || !same(a.SchedWaits, b.SchedWaits) || !same(a.SchedWaitsSlow, b.SchedWaitsSlow) ||
			!same(a.CompactionSecondsPrimary, b.CompactionSecondsPrimary) || !same(a.CompactionSecondsArchive, b.CompactionSecondsArchive) ||
			!same(a.CompactedBytesPrimary, b.CompactedBytesPrimary) || !same(a.CompactedBytesArchive, b.CompactedBytesArchive) ||
			!same(a.ArchiveTxns, b.ArchiveTxns) || !same(a.ArchiveTxnsSlow, b.ArchiveTxnsSlow) {
			t.Fatalf("sample %d: wrote %+v, read %+v", i, a, b)
		}
		for bound, v := range a.Lag {
			if b.Lag[bound] != v {
				t.Fatalf("sample %d bucket %v: wrote %v, read %v", i, bound, v, b.Lag[bound])
			}
		}
	}
	for _, bad := range []string{"", "a,b\n1,2\n", strings.Join(fixedColumns, ",") + ",lag_le_x\n",
		strings.Join(fixedColumns, ",") + ",c_heap_rss_bytes,lag_le_0.1\n",
		strings.Join(fixedColumns, ",") + ",lag_le_0.1,rss_file_bytes,go_retained_bytes\n"} {
		if _, err := readCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("%q read", bad)
		}
	}

	// Records written before some of the later columns still read, with
	// those values unknown.
	nan := math.NaN()
	for _, c := range []struct {
		when  string
		extra []string  // the columns after the fixed ones
		cells []string  // their cells
		want  []float64 // Lag[0.1] (NaN: no such bucket), then every later field
	}{
		{"before the memory columns (2026-12-01 and 2026-12-02)", []string{"lag_le_0.1", "lag_le_+Inf"}, []string{"3", "4"},
			unknownAfter(3)},
		{"with the first three memory columns (2026-12-02 16:50 on)",
			[]string{"lag_le_0.1", "lag_le_+Inf", "c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes"},
			[]string{"3", "4", "5", "6", "7"}, unknownAfter(3, 5, 6, 7)},
		{"with the memory columns and no write-stall columns (2026-12-03 before 19:30)",
			[]string{"lag_le_+Inf", "c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes", "c_heap_free_bytes"},
			[]string{"4", "5", "6", "7", "8"}, unknownAfter(nan, 5, 6, 7, 8)},
		{"with the write-stall columns and no CPU or disk columns (2026-12-03 19:30 to 2026-12-04)",
			[]string{"lag_le_+Inf", "c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes", "c_heap_free_bytes",
				"write_stall_seconds_primary", "write_stall_seconds_archive"},
			[]string{"4", "5", "6", "7", "8", "9", "10"}, unknownAfter(nan, 5, 6, 7, 8, 9, 10)},
		{"with the CPU and disk columns and no scheduling columns (2026-12-04 to 2026-12-05)",
			[]string{"lag_le_+Inf", "c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes", "c_heap_free_bytes",
				"write_stall_seconds_primary", "write_stall_seconds_archive", "server_cpu_seconds", "machine_cpu_busy_seconds", "machine_cpu_seconds",
				"disk_writes", "disk_written_bytes", "disk_write_seconds", "disk_flushes", "disk_flush_seconds"},
			[]string{"4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18"},
			unknownAfter(nan, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)},
		{"with the scheduling columns and no compaction columns (2026-12-05 11:20 to 12:00)",
			[]string{"lag_le_+Inf", "c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes", "c_heap_free_bytes",
				"write_stall_seconds_primary", "write_stall_seconds_archive", "server_cpu_seconds", "machine_cpu_busy_seconds", "machine_cpu_seconds",
				"disk_writes", "disk_written_bytes", "disk_write_seconds", "disk_flushes", "disk_flush_seconds", "sched_wait_seconds", "sched_waits", "sched_waits_slow"},
			[]string{"4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21"},
			unknownAfter(nan, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21)},
		{"with the compaction columns and no archive transaction columns (2026-12-05 12:00 to 14:40)",
			[]string{"lag_le_+Inf", "c_heap_rss_bytes", "rss_file_bytes", "go_retained_bytes", "c_heap_free_bytes",
				"write_stall_seconds_primary", "write_stall_seconds_archive", "server_cpu_seconds", "machine_cpu_busy_seconds", "machine_cpu_seconds",
				"disk_writes", "disk_written_bytes", "disk_write_seconds", "disk_flushes", "disk_flush_seconds", "sched_wait_seconds", "sched_waits", "sched_waits_slow",
				"compaction_seconds_primary", "compaction_seconds_archive", "compacted_bytes_primary", "compacted_bytes_archive"},
			[]string{"4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25"},
			unknownAfter(nan, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25)},
	} {
		var old bytes.Buffer
		cw := csv.NewWriter(&old)
		_ = cw.Write(append(slices.Clone(fixedColumns), c.extra...))
		_ = cw.Write(append(slices.Repeat([]string{"1"}, len(fixedColumns)), c.cells...))
		cw.Flush()
		got, err := readCSV(&old)
		if err != nil || len(got) != 1 {
			t.Fatalf("a record %s: %v, %d samples", c.when, err, len(got))
		}
		lag, ok := got[0].Lag[0.1]
		if !ok {
			lag = nan
		}
		read := []float64{lag}
		for _, f := range got[0].laterFields() {
			read = append(read, *f)
		}
		if !slices.EqualFunc(read, c.want, func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }) {
			t.Errorf("a record %s read as %v, want %v", c.when, read, c.want)
		}
	}
}

// unknownAfter returns known followed by NaN up to one value for Lag[0.1]
// and one for each of laterColumns.
func unknownAfter(known ...float64) []float64 {
	out := slices.Clone(known)
	for len(out) < 1+len(laterColumns) {
		out = append(out, math.NaN())
	}
	return out
}

func TestParseProcStat(t *testing.T) {
	stat := "cpu  2564053 10 1414541 7446526 479322 0 219321 7 5 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n"
	busy, total, err := parseProcStat(stat)
	// Busy: user, nice, system, irq, softirq, steal; guest (5) is already
	// in user and is not counted again.
	if err != nil || busy != (2564053+10+1414541+0+219321+7)/100.0 || total != (2564053+10+1414541+7446526+479322+0+219321+7)/100.0 {
		t.Fatalf("busy %v, total %v, %v", busy, total, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5\n", "cpu 1 2 x 4 5\n", "cpu 1 2 3\n"} {
		if _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if busy, total, err := machineCPU(); err != nil || !(busy > 0 && total > busy) {
		t.Errorf("this machine's /proc/stat: busy %v, total %v, %v", busy, total, err)
	}
}

func TestParseDiskStat(t *testing.T) {
	stat := " 2066531   275394 84543210   910877 152017278   629280 893996656 16225932        1 10638260 23936979   696902       16 209820096   125652 61537953  6674516\n"
	d, err := parseDiskStat(stat)
	if want := (diskCounters{Writes: 152017278, WrittenBytes: 893996656 * 512, WriteSeconds: 16225.932, Flushes: 61537953, FlushSeconds: 6674.516}); err != nil || d != want {
		t.Fatalf("%+v, %v\nwant %+v", d, err, want)
	}
	// Before Linux 5.5 the file had no flush counters: no figures rather
	// than wrong ones.
	for _, bad := range []string{"", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 x"} {
		if _, err := parseDiskStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestDiskStatPath: a directory on a block device gives its disk's
// statistics; one on a file system without a device (procfs) gives an error,
// and the soak leaves the disk columns empty.
func TestDiskStatPath(t *testing.T) {
	if _, err := diskStatPath("/proc"); err == nil {
		t.Error("procfs has disk statistics")
	}
	dir := t.TempDir()
	path, err := diskStatPath(dir)
	if err != nil {
		if !strings.Contains(err.Error(), "not on a block device") {
			t.Fatalf("%s: %v", dir, err)
		}
		t.Logf("%s is not on a block device (%v): the disk columns stay empty on this machine", dir, err)
		return
	}
	if filepath.Base(path) != "stat" {
		t.Fatalf("stat file %s", path)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(path), "partition")); err == nil {
		t.Fatalf("%s is a partition's, not its disk's", path)
	}
	before, err := readDisk(path)
	if err != nil {
		t.Fatal(err)
	}
	// A synced write into dir reaches the disk: its counters move.
	f, err := os.Create(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	after, err := readDisk(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Writes <= before.Writes || after.WrittenBytes < before.WrittenBytes+4096 {
		t.Fatalf("a synced 4 KiB write moved the disk's counters from %+v to %+v", before, after)
	}
}

func TestParseHeapRSS(t *testing.T) {
	smaps := "00400000-00402000 r--p 00000000 08:01 42   /bin/riffdb\nRss:                   8 kB\n" +
		"280fb000-2c161000 rw-p 00000000 00:00 0        [heap]\nSize:   66000 kB\nRss:    65884 kB\nVmFlags: rd wr mr mw me ac\n" +
		"7fa7a5f98000-7fa7a9f9a000 rw-p 00000000 00:00 0 \nRss:   65536 kB\n"
	if v, err := parseHeapRSS(smaps); err != nil || v != 65884*1024 {
		t.Fatalf("[heap] Rss = %v, %v", v, err)
	}
	if v, err := parseHeapRSS("7fa7a5f98000-7fa7a9f9a000 rw-p 00000000 00:00 0 \nRss:   65536 kB\n"); err != nil || v != 0 {
		t.Fatalf("no [heap] mapping: %v, %v", v, err)
	}
	if v, err := statusKB("VmRSS:\t 100 kB\nRssFile:\t  26892 kB\n", "RssFile"); err != nil || v != 26892*1024 {
		t.Fatalf("RssFile = %v, %v", v, err)
	}
}

func TestWindowsScale(t *testing.T) {
	w := windowsFor(time.Hour)
	if w.Warmup != 5*time.Minute || w.BaseStart != 5*time.Minute || w.BaseEnd != 15*time.Minute || w.LastStart != 50*time.Minute {
		t.Fatalf("60-minute windows %+v", w)
	}
	w = windowsFor(5 * time.Minute)
	if w.Warmup != 25*time.Second || w.BaseEnd != 75*time.Second || w.LastStart != 250*time.Second || w.Total != 5*time.Minute {
		t.Fatalf("5-minute windows %+v", w)
	}
}

func targetsByName(ts []Target) map[string]Target {
	m := map[string]Target{}
	for _, t := range ts {
		m[strings.Fields(t.Name)[0]] = t
	}
	return m
}

func TestTargetsMetOnAFlatRun(t *testing.T) {
	// Noise around flat values: RSS ±3 %, goroutines ±8, descriptors ±2.
	wobble := func(base, amp float64) func(float64) float64 {
		return func(x float64) float64 { return base + amp*math.Sin(x/7) }
	}
	// RSS climbs during the warm-up only.
	rss := func(x float64) float64 { return min(x, 25) * 4 * (1 << 20) * (1 + 0.03*math.Sin(x/11)) }
	samples := synthetic(5*time.Minute, rss, wobble(60, 8), wobble(30, 2), steadyLag)
	got := targetsByName(evaluate(samples, 5*time.Minute))
	for name, tg := range got {
		if !tg.Met {
			t.Errorf("%s not met on a flat run: %+v", name, tg)
		}
	}
	if r := got["RSS"]; math.Abs(r.Ratio) > 0.05 {
		t.Errorf("RSS growth %v on a flat run", r.Ratio)
	}
	if p := got["commit→archived"]; math.Abs(p.Ratio-1) > 1e-9 || math.Abs(p.Value-p.Baseline) > 1e-9 {
		t.Errorf("p99 ratio %v (%v vs %v) with the same lag in every interval", p.Ratio, p.Value, p.Baseline)
	}
	var buf bytes.Buffer
	writeTargets(&buf, evaluate(samples, 5*time.Minute), windowsFor(5*time.Minute))
	if strings.Contains(buf.String(), "MISSED") || strings.Count(buf.String(), " met\n") != 7 {
		t.Errorf("report:\n%s", buf.String())
	}
}

func TestTargetsMissedOnGrowth(t *testing.T) {
	total := 5 * time.Minute
	// RSS grows 20 % over the run after the warm-up; goroutines leak one
	// per sample; descriptors leak one every two samples; the lag's p99
	// doubles in the last window.
	rss := func(x float64) float64 { return 100 * (1 << 20) * (1 + 0.2*x/300) }
	lag := func(x float64) histogram {
		if x > 250 {
			return histogram{0.001: 50, 0.01: 98, 0.1: 100, math.Inf(1): 100}
		}
		return steadyLag(x)
	}
	samples := synthetic(total, rss, func(x float64) float64 { return 60 + x/10 }, func(x float64) float64 { return 30 + x/20 }, lag)
	got := targetsByName(evaluate(samples, total))
	for _, name := range []string{"RSS", "commit→archived", "goroutines", "descriptors"} {
		if got[name].Met {
			t.Errorf("%s met despite growth: %+v", name, got[name])
		}
	}
	// Goroutines: slope 0.1/s over the 270 s after the warm-up (30 s … 300 s).
	if g := got["goroutines"]; math.Abs(g.Ratio-27) > 1e-6 {
		t.Errorf("goroutine projected growth %v, want 27", g.Ratio)
	}
	if s := got["sockets"]; !s.Met || s.Ratio != 0 {
		t.Errorf("constant sockets: %+v", s)
	}
	if r := got["RSS"]; r.Ratio < 0.1 || r.Ratio > 0.2 {
		t.Errorf("RSS growth %v, want between the windows' means (about +15 %%)", r.Ratio)
	}
	if p := got["commit→archived"]; p.Ratio < 1.2 {
		t.Errorf("p99 ratio %v", p.Ratio)
	}
}

// TestOpenTablesWithinTheTableCache: table files that settle within the
// shared table cache meet the target, a moment over it included; table
// files that keep growing past it miss it.
func TestOpenTablesWithinTheTableCache(t *testing.T) {
	total := 5 * time.Minute
	flat := func(x float64) float64 { return 60 }
	for _, c := range []struct {
		name   string
		tables func(x float64) float64
		met    bool
	}{
		{"filling then full", func(x float64) float64 { return min(x, tableCacheCapacity) }, true},
		{"a moment over", func(x float64) float64 { return map[bool]float64{true: 110, false: 90}[int(x)%60 == 0] }, true},
		{"growing past it", func(x float64) float64 { return x / 2 }, false},
	} {
		samples := synthetic(total, flat, flat, flat, steadyLag)
		for i := range samples {
			samples[i].Tables = c.tables(samples[i].Elapsed.Seconds())
		}
		if got := targetsByName(evaluate(samples, total))["open"]; got.Met != c.met {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
}

// TestBlockCacheFillIsNotALeak: RSS that grows only with the block cache
// misses the RSS target but meets the target on the memory outside the
// engines; growth outside them misses both.
func TestBlockCacheFillIsNotALeak(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, flat(100<<20), flat(60), flat(30), steadyLag)
	for i := range samples {
		fill := samples[i].Elapsed.Seconds() / 300 * (50 << 20)
		samples[i].BlockCache += fill
		samples[i].RSSBytes += fill
	}
	got := targetsByName(evaluate(samples, total))
	if got["RSS"].Met || !got["memory"].Met {
		t.Fatalf("cache fill: RSS %+v, outside the engines %+v", got["RSS"], got["memory"])
	}
	for i := range samples {
		samples[i].RSSBytes += samples[i].Elapsed.Seconds() / 300 * (40 << 20)
	}
	if got := targetsByName(evaluate(samples, total)); got["memory"].Met {
		t.Fatalf("growth outside the engines met: %+v", got["memory"])
	}
}

// TestOutsideEnginesPrintedAsPercent: the memory outside the engines is
// printed as its window means and their change in percent, the form of its
// limit, like RSS; not as a trend's first and last sample.
func TestOutsideEnginesPrintedAsPercent(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, flat(100<<20), flat(60), flat(30), steadyLag)
	for i := range samples {
		grow := samples[i].Elapsed.Seconds() / 300 * (8 << 20)
		samples[i].RSSBytes += grow
		samples[i].CHeapRSS += grow // the allocator keeps what the caches freed
	}
	var buf bytes.Buffer
	writeTargets(&buf, evaluate(samples, total), windowsFor(total))
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "memory outside the engines") {
			line = l
		}
	}
	m := targetsByName(evaluate(samples, total))["memory"]
	want := fmt.Sprintf("%.1f MiB vs baseline %8.1f MiB: %+.1f%% (target ≤ +10%%) met", m.Value, m.Baseline, m.Ratio*100)
	if m.Ratio < 0.02 || !strings.Contains(line, want) {
		t.Fatalf("outside the engines printed as %q, want %q (ratio %v)", line, want, m.Ratio)
	}
	// The note says where it went: the C heap beyond the caches grew with it.
	b, _ := mean(samples, windowsFor(total).BaseStart, windowsFor(total).BaseEnd, func(s Sample) float64 { return s.CHeapRSS - s.BlockCache })
	l, _ := mean(samples, windowsFor(total).LastStart, total, func(s Sample) float64 { return s.CHeapRSS - s.BlockCache })
	if want := fmt.Sprintf("C heap beyond the block caches ([heap] less the caches) %.1f → %.1f MiB (free in it 1.0 → 1.0 MiB,", b/(1<<20), l/(1<<20)); l <= b || !strings.Contains(m.Note, want) {
		t.Fatalf("note %q, want %q", m.Note, want)
	}
}

// TestReplayEvaluatesLikeTheRun: targets evaluated from the CSV equal the
// run's own, even for samples taken a fraction of a millisecond after a
// window's edge.
func TestReplayEvaluatesLikeTheRun(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, func(x float64) float64 { return 100<<20 + x*x*10 }, flat(30), flat(20), steadyLag)
	for i := range samples {
		samples[i].Elapsed = recorded(samples[i].Elapsed + 400*time.Microsecond)
		samples[i].RSSBytes += float64(i%7) * (1 << 20)
	}
	var buf bytes.Buffer
	w := newCSVWriter(&buf, []float64{0.001, 0.01, 0.1, math.Inf(1)})
	for _, s := range samples {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	replayed, err := readCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var run, replay bytes.Buffer
	writeTargets(&run, evaluate(samples, total), windowsFor(total))
	writeTargets(&replay, evaluate(replayed, total), windowsFor(total))
	if run.String() != replay.String() {
		t.Fatalf("run:\n%s\nreplay:\n%s", run.String(), replay.String())
	}
}

func TestDurationLabel(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "60m", 5 * time.Minute: "5m", 90 * time.Second: "1m30s"} {
		if got := durationLabel(d); got != want {
			t.Errorf("durationLabel(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0.7, 0.8}, {1, 1}, {1.01, 1.2}, {95, 100}, {121, 160}, {2351, 2400}, {19.9, 20}} {
		if got := niceCeil(c.in); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestTrendIsLeastSquares(t *testing.T) {
	if got := trend([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7}); math.Abs(got-2) > 1e-12 {
		t.Fatalf("slope %v, want 2", got)
	}
	if got := trend([]float64{0, 1, 2, 3}, []float64{5, 4, 6, 5}); math.Abs(got-0.2) > 1e-12 {
		t.Fatalf("slope %v, want 0.2", got)
	}
	if !math.IsNaN(trend([]float64{1}, []float64{1})) || !math.IsNaN(trend([]float64{2, 2}, []float64{1, 3})) {
		t.Fatal("a slope without two distinct times")
	}
}

func TestTargetsWithoutDeliveriesAreMissed(t *testing.T) {
	samples := synthetic(5*time.Minute, flat(1<<20), flat(10), flat(10), func(float64) histogram { return nil })
	if p := targetsByName(evaluate(samples, 5*time.Minute))["commit→archived"]; p.Met {
		t.Fatalf("p99 target met without a delivery: %+v", p)
	}
}

// svgDoc decodes the plot's elements this test looks at.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Panels  []struct {
		Class     string `xml:"class,attr"`
		Polylines []struct {
			Class  string `xml:"class,attr"`
			Points string `xml:"points,attr"`
			Stroke string `xml:"stroke,attr"`
		} `xml:"polyline"`
		Texts []string `xml:"text"`
	} `xml:"g"`
}

func TestSVGHasOnePanelPerSeries(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, func(x float64) float64 { return (100 + x) * (1 << 20) }, flat(50), flat(20), steadyLag)
	samples[5].Goroutines = math.NaN() // a gap
	for i := range samples {
		// Archive syncs take half of every interval; the primary's counter
		// starts again at sample 8, as after a restart.
		samples[i].FsyncSecondsArchive = samples[i].Elapsed.Seconds() / 2
		samples[i].FsyncSecondsPrimary = float64(i) * 0.1
		if i >= 8 {
			samples[i].FsyncSecondsPrimary = float64(i-8) * 0.1
		}
	}
	var buf bytes.Buffer
	if err := writeSVG(&buf, "soak <test> & co", samples, windowsFor(total)); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.NewDecoder(&buf).Decode(&doc); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	if len(doc.Panels) != len(panels) {
		t.Fatalf("%d panels, want %d", len(doc.Panels), len(panels))
	}
	for i, p := range doc.Panels {
		if p.Class != "panel" || !strings.Contains(strings.Join(p.Texts, "|"), panels[i].title) {
			t.Fatalf("panel %d: class %q, texts %v", i, p.Class, p.Texts)
		}
		var lines [][]string
		for _, pl := range p.Polylines {
			if pl.Class == "series" {
				lines = append(lines, strings.Fields(pl.Points))
			}
		}
		switch panels[i].title {
		case "goroutines":
			// Two series (goroutines, and goroutines minus sockets), each
			// broken in two around the gap.
			if len(lines) != 4 || len(lines[0])+len(lines[1]) != len(samples)-1 || len(lines[2])+len(lines[3]) != len(samples)-1 {
				t.Fatalf("goroutines: %d segments, want 4 (2 series around the gap) with %d points each", len(lines), len(samples)-1)
			}
		case "RSS":
			if len(lines) != 6 || len(lines[0]) != len(samples) { // VmRSS, Go heap, block cache, memtables, C heap, its free space
				t.Fatalf("RSS: %v", lines)
			}
			// RSS grows: y decreases (SVG y points down) and x increases.
			var px, py float64 = -1, math.Inf(1)
			for _, pt := range lines[0] {
				var x, y float64
				if _, err := fmtSscanf(pt, &x, &y); err != nil {
					t.Fatal(err)
				}
				if x <= px || y >= py {
					t.Fatalf("point %s after (%v,%v): not increasing", pt, px, py)
				}
				px, py = x, y
			}
		case "share of each interval in WAL syncs and write stalls":
			// Four rates; none at the first sample, and the primary's
			// breaks where its counter went down.
			if len(lines) != 5 || len(lines[0]) != len(samples)-1 || len(lines[1])+len(lines[2]) != len(samples)-2 {
				t.Fatalf("%s: %d segments %v", panels[i].title, len(lines), lines)
			}
			var y0 float64
			for k, pt := range lines[0] {
				var x, y float64
				if _, err := fmtSscanf(pt, &x, &y); err != nil {
					t.Fatal(err)
				}
				if k > 0 && y != y0 {
					t.Fatalf("archive syncs: point %s, want every y at %v (a constant share)", pt, y0)
				}
				y0 = y
			}
		case "CPU and the data's disk":
			// Four rates of the synthetic counters, none at the first sample.
			if len(lines) != 4 || len(lines[0]) != len(samples)-1 || len(lines[3]) != len(samples)-1 {
				t.Fatalf("%s: %d segments %v", panels[i].title, len(lines), lines)
			}
		case "commit→archived lag per interval", "Pebble compaction debt":
			if len(lines) != 2 {
				t.Fatalf("%s: %d lines, want 2", panels[i].title, len(lines))
			}
		}
	}
	if err := writeSVG(io.Discard, "empty", nil, windowsFor(total)); err != nil {
		t.Fatal(err)
	}
}

// fmtSscanf parses an "x,y" polyline point.
func fmtSscanf(pt string, x, y *float64) (int, error) {
	return fmt.Sscanf(pt, "%g,%g", x, y)
}

// TestConnectionsAreNotALeak checks that goroutines and descriptors that
// follow the client's connections (one goroutine and one socket each) do
// not count as growth, while the sockets stay within the pool's allowance.
func TestConnectionsAreNotALeak(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, flat(100<<20), flat(0), flat(0), steadyLag)
	for i := range samples {
		conns := float64(min(i*3, 150)) // the pool grows with the load's latency
		samples[i].Sockets = 2 + conns
		samples[i].Goroutines = 30 + conns
		samples[i].OpenFDs = 25 + 2 + conns
	}
	got := targetsByName(evaluate(samples, total))
	for _, name := range []string{"goroutines", "descriptors", "sockets"} {
		if !got[name].Met {
			t.Errorf("%s: %+v", name, got[name])
		}
	}
	if g := got["goroutines"]; g.Ratio != 0 || g.Value != 28 {
		t.Errorf("goroutines not serving a connection: %+v, want flat at 28", g)
	}
}

// TestOpenTablesAreNotALeak: descriptors that grow only with the open table
// files (Pebble's table cache, bounded by MaxOpenFiles) meet the descriptor
// target; other descriptors growing the same way miss it.
func TestOpenTablesAreNotALeak(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, flat(100<<20), flat(60), flat(30), steadyLag)
	for i := range samples {
		grow := math.Floor(samples[i].Elapsed.Seconds() / 3)
		samples[i].Tables += grow
		samples[i].OpenFDs += grow
	}
	if d := targetsByName(evaluate(samples, total))["descriptors"]; !d.Met {
		t.Fatalf("table files counted as a descriptor leak: %+v", d)
	}
	for i := range samples {
		samples[i].Tables = 8
	}
	if d := targetsByName(evaluate(samples, total))["descriptors"]; d.Met {
		t.Fatalf("descriptor growth outside tables met: %+v", d)
	}
}

// TestBlockCachesAddTheTwoCaches: the primary's series is the primaries'
// cache and the archive's the archives' cache; the sample is their sum, and
// one of them alone still counts.
func TestBlockCachesAddTheTwoCaches(t *testing.T) {
	both := `riffdb_pebble_block_cache_size_bytes{riffdb_database="default",riffdb_store="primary"} 7e+06
riffdb_pebble_block_cache_size_bytes{riffdb_database="default",riffdb_store="archive"} 5.4e+07
`
	for _, c := range []struct {
		text string
		want float64
		ok   bool
	}{
		{both, 6.1e7, true},
		{strings.SplitAfter(both, "\n")[1], 5.4e7, true},
		{"go_goroutines 3\n", 0, false},
	} {
		ss, err := parseExposition(strings.NewReader(c.text))
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := blockCaches(ss); v != c.want || ok != c.ok {
			t.Errorf("blockCaches of %q = %v, %v; want %v, %v", c.text, v, ok, c.want, c.ok)
		}
	}
}

// TestSamplesStandForTheirScheduledTimes: every sample is labelled with the
// end of the interval it describes, however late it was taken, so that the
// last one (due at the soak's end) is in the last window.
func TestSamplesStandForTheirScheduledTimes(t *testing.T) {
	const interval, duration = 20 * time.Millisecond, 100 * time.Millisecond
	var got []time.Duration
	err := sampleEvery(context.Background(), time.Now(), interval, duration, func(elapsed time.Duration) error {
		got = append(got, elapsed)
		time.Sleep(7 * time.Millisecond) // a slow scrape
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond, 80 * time.Millisecond, 100 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("samples at %v, want %v", got, want)
	}
	w := windowsFor(duration)
	if !in(got[len(got)-1], w.LastStart, w.Total) {
		t.Fatalf("the last sample (%v) is not in the last window (%v, %v]", got[len(got)-1], w.LastStart, w.Total)
	}

	// A failed sample or a cancelled soak ends the sampling with its cause.
	boom := errors.New("boom")
	n := 0
	if err := sampleEvery(context.Background(), time.Now(), interval, duration, func(time.Duration) error {
		if n++; n == 2 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) || n != 2 {
		t.Fatalf("after a failed sample: %v after %d samples", err, n)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(boom)
	if err := sampleEvery(ctx, time.Now(), interval, duration, func(time.Duration) error { return nil }); !errors.Is(err, boom) {
		t.Fatalf("cancelled: %v", err)
	}
}

// cumulative sets the counter field of every sample to the running sum of a
// rate per second: before until the last window of w, after in it.
func cumulative(samples []Sample, w Windows, field func(*Sample) *float64, before, after float64) {
	var sum float64
	for i := range samples {
		if i > 0 {
			rate := before
			if samples[i].Elapsed > w.LastStart {
				rate = after
			}
			sum += rate * (samples[i].Elapsed - samples[i-1].Elapsed).Seconds()
		}
		*field(&samples[i]) = sum
	}
}

func TestP99NoteSaysHowBusyTheArchiveSyncsWere(t *testing.T) {
	total := 5 * time.Minute
	w := windowsFor(total)
	samples := synthetic(total, flat(100<<20), flat(10), flat(10), steadyLag)
	// Rebuild the archive's sync counters: 1,000 syncs a second, 0.4 ms
	// each until the last window (40 % of the time) and 0.6 ms in it
	// (60 %), with one failed scrape in the last window.
	cumulative(samples, w, func(s *Sample) *float64 { return &s.FsyncsArchive }, 1000, 1000)
	cumulative(samples, w, func(s *Sample) *float64 { return &s.FsyncSecondsArchive }, 0.4, 0.6)
	samples[len(samples)-2].FsyncSecondsArchive = math.NaN()
	b, l := archiveSyncs(samples, w.BaseStart, w.BaseEnd), archiveSyncs(samples, w.LastStart, w.Total)
	if b.intervals != 5 || b.busy != 0 || math.Abs(b.meanMs-0.4) > 1e-9 || math.Abs(b.share-0.4) > 1e-9 {
		t.Errorf("baseline window: %+v, want 5 intervals, none busy, 0.4 ms, 40 %%", b)
	}
	// The failed scrape leaves out both intervals it bounds.
	if l.intervals != 3 || l.busy != 3 || math.Abs(l.meanMs-0.6) > 1e-9 || math.Abs(l.share-0.6) > 1e-9 {
		t.Errorf("last window: %+v, want 3 intervals, all busy, 0.6 ms, 60 %%", l)
	}
	note := targetsByName(evaluate(samples, total))["commit→archived"].Note
	if want := "the archive's WAL syncs, baseline and last window: 0.40 and 0.60 ms each, 40% and 60% of the time, 0 of 5 and 3 of 3 intervals at least 50%"; !strings.Contains(note, want) {
		t.Errorf("note %q\nwant it to contain %q", note, want)
	}
	// The synthetic stores stalled 0.03 s each second (primary and archive
	// together): 1.5 s in each 50-s window. A record without the stall
	// columns says nothing of them.
	if want := "Pebble held writes back (write stalls of both stores) 1.5 s in the baseline window and 1.5 s in the last"; !strings.Contains(note, want) {
		t.Errorf("note %q\nwant it to contain %q", note, want)
	}
	for i := range samples {
		samples[i].StallSecondsPrimary = math.NaN()
	}
	if note := targetsByName(evaluate(samples, total))["commit→archived"].Note; strings.Contains(note, "held writes back") {
		t.Errorf("without stall figures the note says %q", note)
	}
}

// TestP99NoteSaysWhatTheServerAndTheDiskSpent: the p99 target's note sets
// the server's CPU per delivered event, the machine's busy share and the
// disk's flush time of the baseline window against the last window's, from
// the cumulative counters; a record without them says nothing of them.
func TestP99NoteSaysWhatTheServerAndTheDiskSpent(t *testing.T) {
	total := 5 * time.Minute
	w := windowsFor(total)
	samples := synthetic(total, flat(100<<20), flat(10), flat(10), steadyLag)
	// 100 deliveries per 10-s interval (steadyLag). The server spends 0.25
	// CPU-seconds a second until the last window and 0.3 in it; the disk
	// flushes 1,000 times a second, 0.1 ms each, then 0.15 ms each, and
	// writes 10 MB/s throughout. One interval of the last window has its CPU
	// and its disk counters unknown and is left out of both.
	cumulative(samples, w, func(s *Sample) *float64 { return &s.ServerCPUSeconds }, 0.25, 0.3)
	cumulative(samples, w, func(s *Sample) *float64 { return &s.DiskFlushSeconds }, 1000*0.1e-3, 1000*0.15e-3)
	// Goroutines wait for a CPU 0.05 s a second (0.05 on average) with 3,000
	// waits a second, 0.1 % of them slow, until the last window, and then
	// 0.2 s a second with 0.5 % slow.
	cumulative(samples, w, func(s *Sample) *float64 { return &s.SchedWaitSeconds }, 0.05, 0.2)
	cumulative(samples, w, func(s *Sample) *float64 { return &s.SchedWaitsSlow }, 3, 15)
	// The primary's compactions run 2.5 % of the time, then 10 %, writing
	// 1 MB/s, then 4 MB/s; one interval of the last window has its
	// compaction time unknown.
	cumulative(samples, w, func(s *Sample) *float64 { return &s.CompactionSecondsPrimary }, 0.025, 0.1)
	cumulative(samples, w, func(s *Sample) *float64 { return &s.CompactedBytesPrimary }, 1e6, 4e6)
	samples[len(samples)-2].CompactionSecondsPrimary = math.NaN()
	// 100 archive transactions an interval (one per delivery), 1 and then 3
	// of them over 5 ms in each; one interval of the last window has them
	// unknown.
	cumulative(samples, w, func(s *Sample) *float64 { return &s.ArchiveTxns }, 10, 10)
	cumulative(samples, w, func(s *Sample) *float64 { return &s.ArchiveTxnsSlow }, 0.1, 0.3)
	samples[len(samples)-4].ArchiveTxns, samples[len(samples)-4].ArchiveTxnsSlow = math.NaN(), math.NaN()
	samples[len(samples)-3].ServerCPUSeconds = math.NaN()
	samples[len(samples)-3].DiskFlushSeconds = math.NaN()
	samples[len(samples)-3].SchedWaits = math.NaN()
	note := targetsByName(evaluate(samples, total))["commit→archived"].Note
	for _, want := range []string{
		"per event delivered, the server's CPU (commands included), baseline and last window: 25000 and 30000 µs; the machine's CPUs busy 60% and 60%",
		"the server's goroutines waiting for a CPU (go_sched_latencies_seconds), baseline and last window: 0.05 and 0.20 on average, 0.10% and 0.50% of the waits over about 1 ms",
		"the primary's compactions, baseline and last window: running 2.5% and 10.0% of the time, writing 1.00 and 4.00 MB/s",
		"the archive's compactions, baseline and last window: running 1.2% and 1.2% of the time, writing 2.00 and 2.00 MB/s",
		"the data's disk: flushes 0.100 and 0.150 ms each (1000 and 1000 a second), 10.0 and 10.0 MB/s written",
		"archive transactions over 5 ms (a stalled sync), baseline and last window: 5 and 9, 1.000% and 3.000% of them",
	} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q\nwant it to contain %q", note, want)
		}
	}
	for i := range samples {
		samples[i].ServerCPUSeconds, samples[i].DiskFlushes, samples[i].SchedWaitSeconds = math.NaN(), math.NaN(), math.NaN()
		samples[i].CompactionSecondsPrimary, samples[i].CompactedBytesArchive = math.NaN(), math.NaN()
		samples[i].ArchiveTxnsSlow = math.NaN()
	}
	if note := targetsByName(evaluate(samples, total))["commit→archived"].Note; strings.Contains(note, "server's CPU") || strings.Contains(note, "disk:") ||
		strings.Contains(note, "waiting for a CPU") || strings.Contains(note, "compactions,") || strings.Contains(note, "archive transactions") {
		t.Errorf("without CPU and disk figures the note says %q", note)
	}
}

// TestReplayKeepsThePlotsTitle: -from-csv redraws a run's plot from its
// CSV and keeps the title of the plot it replaces (the load and the time
// of the run, which the CSV does not hold); with no plot to replace, the
// title names the duration.
func TestReplayKeepsThePlotsTitle(t *testing.T) {
	total := 5 * time.Minute
	samples := synthetic(total, flat(100<<20), flat(30), flat(20), steadyLag)
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "soak-5m-latest.csv")
	var buf bytes.Buffer
	w := newCSVWriter(&buf, []float64{0.001, 0.01, 0.1, math.Inf(1)})
	for _, s := range samples {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(csvPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	svgPath := strings.TrimSuffix(csvPath, ".csv") + ".svg"
	titleOf := func() string {
		t.Helper()
		b, err := os.ReadFile(svgPath)
		if err != nil {
			t.Fatal(err)
		}
		title, ok := svgTitle(b)
		if !ok {
			t.Fatalf("no title in the replayed plot")
		}
		return title
	}

	if err := replay(csvPath, total, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, want := titleOf(), "riffdb soak, 5m0s"; got != want {
		t.Fatalf("title without an earlier plot = %q, want %q", got, want)
	}

	const runTitle = "riffdb soak, 5m0s at 830 events/s (half the drain rate of 1659/s) & more, 20261203-192821 UTC"
	var svg bytes.Buffer
	if err := writeSVG(&svg, runTitle, samples, windowsFor(total)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(svgPath, svg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replay(csvPath, total, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := titleOf(); got != runTitle {
		t.Fatalf("replayed title = %q, want the run's %q", got, runTitle)
	}
}
