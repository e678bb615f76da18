package primary_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/bench"
	"github.com/riffdb/riffdb/primary"
)

// BenchmarkCommitInterleaved measures the commit-throughput ratios with
// every baseline interleaved in time (bench.Interleave): a raw append+
// fdatasync loop, durable commits from 1 and from 64 concurrent clients,
// and bare Pebble's 64-writer synced batches, each run for half a second
// in rotating order, four rounds per loop iteration, on one disk
// (b.TempDir), each slice starting once both engines are idle. Unlike
// BenchmarkCommit, BenchmarkRawFdatasync and
// BenchmarkPebbleSyncedBatch64, which run minutes apart, the ratios it
// reports (c64_vs_c1, c64_vs_pebble64, c1_vs_raw) compare rates measured
// under the same disk conditions.
func BenchmarkCommitInterleaved(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	db, err := primary.Open(ctx, primary.Options{Path: filepath.Join(dir, "db"), Contract: compile(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	bare, err := pebble.Open(filepath.Join(dir, "bare"), bareOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	f, err := os.OpenFile(filepath.Join(dir, "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()

	in := json.RawMessage(`{"order_id":"o-1","amount_cents":1250}`)
	commit := func() error {
		_, err := db.Execute(ctx, "place_order", in, "")
		return err
	}
	buf := make([]byte, 128)
	var n atomic.Uint64
	ws := []bench.Workload{
		{Name: "raw", Run: bench.Parallel(1, func() error {
			if _, err := f.Write(buf); err != nil {
				return err
			}
			return unix.Fdatasync(int(f.Fd()))
		})},
		{Name: "c1", Run: bench.Parallel(1, commit)},
		{Name: "c64", Run: bench.Parallel(64, commit)},
		{Name: "pebble64", Run: bench.Parallel(64, func() error {
			bt := bare.NewBatch()
			defer bt.Close()
			twoKeyBatch(bt, n.Add(1))
			return bt.Commit(pebble.Sync)
		})},
	}
	// Every slice starts with both engines idle: a workload's compaction
	// debt must not slow the next workload's slice (ours writes about twice
	// the bytes of the bare-Pebble baseline, so without this the baseline
	// would pay for part of our compactions).
	for i := range ws {
		ws[i].Before = bench.EnginesIdle(db.Metrics, bare.Metrics)
	}
	total := make([]bench.Rate, len(ws))
	for b.Loop() {
		rates, err := bench.Interleave(4, 500*time.Millisecond, ws)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range rates {
			total[i].Ops += r.Ops
			total[i].Elapsed += r.Elapsed
		}
	}
	raw, c1, c64, peb := total[0].PerSecond(), total[1].PerSecond(), total[2].PerSecond(), total[3].PerSecond()
	b.ReportMetric(raw, "raw_ops/s")
	b.ReportMetric(c1, "c1_commits/s")
	b.ReportMetric(c64, "c64_commits/s")
	b.ReportMetric(peb, "pebble64_ops/s")
	b.ReportMetric(c64/c1, "c64_vs_c1")
	b.ReportMetric(c64/peb, "c64_vs_pebble64")
	b.ReportMetric(c1/raw, "c1_vs_raw")
}
