package primary

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/bench"
	"github.com/riffdb/riffdb/internal/store/dirlock"
	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary/contract"
)

// BenchmarkWALSpace compares the primary's WAL handling before and after
// the disk fix, interleaved in time on one disk (bench.Interleave, four
// rounds of half a second per workload): "reserved" is the old handling
// (Pebble's 1.1-memtable reservation fallocated, zero-filled one step
// ahead, obsolete WALs recycled), "filled" the current one (allocation only
// by zero-filling one step ahead, obsolete WALs deleted). It reports
// commits/s from 1 and 64 clients for each, their ratios, and each store's
// allocated bytes afterwards next to its apparent size. The sub-benchmarks
// are the single-database memtable (32 MiB) and the one a 32-database
// server gets from the default budget (4.5 MiB).
func BenchmarkWALSpace(b *testing.B) {
	for _, memtable := range []uint64{DefaultMemTableSize, 4<<20 + 512<<10} {
		b.Run(fmt.Sprintf("memtable=%.1fMiB", float64(memtable)/(1<<20)), func(b *testing.B) {
			benchWALSpace(b, memtable)
		})
	}
}

func benchWALSpace(b *testing.B, memtable uint64) {
	ctx := context.Background()
	c, err := contract.Compile([]byte(`
[commands.place_order]
input = { order_id = "string", amount_cents = "int" }
emits = ["order_placed"]
`))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	open := func(name string, edit func(*pebble.Options)) *DB {
		db, err := Open(ctx, Options{Path: filepath.Join(dir, name), Contract: c, MemTableSize: memtable, pebbleOptions: edit})
		if err != nil {
			b.Fatal(err)
		}
		return db
	}
	reserved := open("reserved", func(o *pebble.Options) {
		o.FS, o.Cleaner = reservingFS{walfill.New(dirlock.FS(vfs.Default))}, nil
	})
	defer reserved.Close()
	filled := open("filled", nil)
	defer filled.Close()
	in := json.RawMessage(`{"order_id":"o-1","amount_cents":1250}`)
	commit := func(db *DB) func() error {
		return func() error {
			_, err := db.Execute(ctx, "place_order", in, "")
			return err
		}
	}
	ws := []bench.Workload{
		{Name: "reserved1", Run: bench.Parallel(1, commit(reserved))},
		{Name: "filled1", Run: bench.Parallel(1, commit(filled))},
		{Name: "reserved64", Run: bench.Parallel(64, commit(reserved))},
		{Name: "filled64", Run: bench.Parallel(64, commit(filled))},
	}
	for i := range ws {
		ws[i].Before = bench.EnginesIdle(reserved.Metrics, filled.Metrics)
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
	r1, f1, r64, f64 := total[0].PerSecond(), total[1].PerSecond(), total[2].PerSecond(), total[3].PerSecond()
	b.ReportMetric(r1, "reserved_c1_commits/s")
	b.ReportMetric(f1, "filled_c1_commits/s")
	b.ReportMetric(r64, "reserved_c64_commits/s")
	b.ReportMetric(f64, "filled_c64_commits/s")
	b.ReportMetric(f1/r1, "filled_vs_reserved_c1")
	b.ReportMetric(f64/r64, "filled_vs_reserved_c64")
	bench.EnginesIdle(reserved.Metrics, filled.Metrics)()
	for _, name := range []string{"reserved", "filled"} {
		alloc, apparent, logs := dirUsage(b, filepath.Join(dir, name))
		b.ReportMetric(float64(alloc)/(1<<20), name+"_allocated_MiB")
		b.ReportMetric(float64(apparent)/(1<<20), name+"_apparent_MiB")
		b.ReportMetric(float64(logs), name+"_wal_files")
	}
}

// dirUsage returns the allocated bytes (st_blocks × 512) and apparent size
// of the files under dir, and how many WALs it holds.
func dirUsage(tb testing.TB, dir string) (allocated, apparent int64, logs int) {
	tb.Helper()
	allocated, apparent = testutil.DiskUsage(tb, dir)
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		tb.Fatal(err)
	}
	return allocated, apparent, len(names)
}

// reservingFS is internal/store/walfill as it was before the disk fix: Pebble's
// whole reservation is allocated with fallocate(FALLOC_FL_KEEP_SIZE), then
// zero-filled one step ahead of the log by the wrapped walfill.FS.
type reservingFS struct{ vfs.FS }

func (f reservingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return reserving(f.FS.Create(name, cat))
}

func (f reservingFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return reserving(f.FS.ReuseForWrite(oldname, newname, cat))
}

func (f reservingFS) Unwrap() vfs.FS { return f.FS }

func reserving(f vfs.File, err error) (vfs.File, error) {
	if err != nil || f.Fd() == vfs.InvalidFd {
		return f, err
	}
	return reservingFile{f}, nil
}

type reservingFile struct{ vfs.File }

func (f reservingFile) Preallocate(offset, length int64) error {
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, offset, length); err != nil {
		return err
	}
	return f.File.Preallocate(offset, length)
}
