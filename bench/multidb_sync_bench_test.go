package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/bench"
	"github.com/riffdb/riffdb/internal/walfill"
)

// BenchmarkParallelSync measures, for n = 1, 4, 16 and 32 independent
// durable streams on one disk, interleaved in time (bench.Interleave, three
// rounds of half a second each):
//
//   - append: n raw writers appending 128 bytes + fdatasync, one file each
//     (BenchmarkMultiDB's baseline);
//   - overwrite: the same into files already written with zeros, which is
//     what a zero-filled WAL does (internal/walfill);
//   - pebble: n Pebble stores with the stores' WAL handling (walfill.New,
//     walfill.Cleaner), each with one goroutine committing a synced
//     1,100-byte Set at a time: an archive transaction without the
//     archive's own work.
//
// It reports each rate and overwrite_vs_append and pebble_vs_append: how
// much of n raw writers one synced commit at a time per store can reach.
func BenchmarkParallelSync(b *testing.B) {
	for _, n := range []int{1, 4, 16, 32} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchParallelSync(b, n) })
	}
}

// zeroFilled is the size of each overwrite file; writes wrap around in it.
const zeroFilled = 4 << 20

func benchParallelSync(b *testing.B, n int) {
	dir := b.TempDir()
	appendFiles, overwriteFiles := make([]*os.File, n), make([]*os.File, n)
	zeros := make([]byte, zeroFilled)
	for i := range n {
		var err error
		if appendFiles[i], err = os.OpenFile(filepath.Join(dir, fmt.Sprintf("append-%02d", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			b.Fatal(err)
		}
		defer appendFiles[i].Close()
		if overwriteFiles[i], err = os.OpenFile(filepath.Join(dir, fmt.Sprintf("overwrite-%02d", i)), os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
			b.Fatal(err)
		}
		defer overwriteFiles[i].Close()
		if _, err := overwriteFiles[i].Write(zeros); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fsync(int(overwriteFiles[i].Fd())); err != nil {
			b.Fatal(err)
		}
	}
	stores := openBareStores(b, dir, n)
	defer closeBareStores(b, stores)
	buf := make([]byte, 128)
	offsets := make([]int64, n)
	ws := []bench.Workload{
		{Name: "append", Run: perStream(n, func(i int) error {
			if _, err := appendFiles[i].Write(buf); err != nil {
				return err
			}
			return unix.Fdatasync(int(appendFiles[i].Fd()))
		})},
		{Name: "overwrite", Run: perStream(n, func(i int) error {
			if _, err := overwriteFiles[i].WriteAt(buf, offsets[i]); err != nil {
				return err
			}
			offsets[i] = (offsets[i] + int64(len(buf))) % (zeroFilled - int64(len(buf)))
			return unix.Fdatasync(int(overwriteFiles[i].Fd()))
		})},
		{Name: "pebble", Run: bareCommits(stores)},
	}
	total := make([]bench.Rate, len(ws))
	for b.Loop() {
		rates, err := bench.Interleave(3, 500*time.Millisecond, ws)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range rates {
			total[i].Ops += r.Ops
			total[i].Elapsed += r.Elapsed
		}
	}
	app, over, peb := total[0].PerSecond(), total[1].PerSecond(), total[2].PerSecond()
	b.ReportMetric(app, "append_ops/s")
	b.ReportMetric(over, "overwrite_ops/s")
	b.ReportMetric(peb, "pebble_ops/s")
	b.ReportMetric(over/app, "overwrite_vs_append")
	b.ReportMetric(peb/app, "pebble_vs_append")
}

// perStream returns a Workload.Run that calls op(i) in a loop from one
// goroutine per stream i < n until d has passed, and counts the calls.
func perStream(n int, op func(i int) error) func(d time.Duration) (int, error) {
	return func(d time.Duration) (int, error) {
		deadline := time.Now().Add(d)
		var ops atomic.Int64
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for failed.Load() == nil && time.Now().Before(deadline) {
					if err := op(i); err != nil {
						failed.Store(&err)
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			return int(ops.Load()), *err
		}
		return int(ops.Load()), nil
	}
}

// openBareStores opens n Pebble stores under dir (store-00, store-01, ...)
// with the archive's WAL handling (walfill.New, walfill.Cleaner), its
// format and a 2 MiB memtable: an archive without the archive.
func openBareStores(tb testing.TB, dir string, n int) []*pebble.DB {
	tb.Helper()
	stores := make([]*pebble.DB, n)
	for i := range n {
		db, err := pebble.Open(filepath.Join(dir, fmt.Sprintf("store-%02d", i)), &pebble.Options{
			FS: walfill.New(vfs.Default), Cleaner: walfill.Cleaner{}, FormatMajorVersion: pebble.FormatValueSeparation, MemTableSize: 2 << 20})
		if err != nil {
			closeBareStores(tb, stores[:i])
			tb.Fatal(err)
		}
		stores[i] = db
	}
	return stores
}

func closeBareStores(tb testing.TB, stores []*pebble.DB) {
	tb.Helper()
	for _, db := range stores {
		if err := db.Close(); err != nil {
			tb.Error(err)
		}
	}
}

// bareCommits returns a Workload.Run in which one goroutine per store
// commits a synced 1,100-byte Set at a time (about an archive record): an
// archive transaction without the archive's own work.
func bareCommits(stores []*pebble.DB) func(d time.Duration) (int, error) {
	value := make([]byte, 1100)
	var key atomic.Uint64
	return perStream(len(stores), func(i int) error {
		return stores[i].Set(fmt.Appendf(nil, "k%016d", key.Add(1)), value, pebble.Sync)
	})
}

// barePebble opens n bare stores in a new directory under dir (see
// openBareStores), runs bareCommits for about d, removes them, and returns
// the commits completed and the elapsed time: what n stores reach with one
// synced Pebble commit at a time each, on the same disk.
func barePebble(tb testing.TB, dir string, n int, d time.Duration) (int, time.Duration) {
	tb.Helper()
	sub, err := os.MkdirTemp(dir, "bare-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(sub)
	stores := openBareStores(tb, sub, n)
	defer closeBareStores(tb, stores)
	start := time.Now()
	ops, err := bareCommits(stores)(d)
	elapsed := time.Since(start)
	if err != nil {
		tb.Fatal(err)
	}
	return ops, elapsed
}
