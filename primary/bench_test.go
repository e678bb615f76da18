package primary_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

// parallelism returns the SetParallelism factor that yields about n goroutines.
func parallelism(n int) int { return max(1, n/runtime.GOMAXPROCS(0)) }

// BenchmarkCommit measures durable command commits on a real directory with
// 1 and 64 concurrent clients (group commit), and 16-event commits (the
// cheapest way to create many pending intents: 1,000,000 intents take
// 62,500 such commits).
func BenchmarkCommit(b *testing.B) {
	for _, bc := range []struct {
		name    string
		clients int
		cmd     string
		input   string
	}{
		{"clients=1", 1, "place_order", `{"order_id":"o-1","amount_cents":1250}`},
		{"clients=64", 64, "place_order", `{"order_id":"o-1","amount_cents":1250}`},
		{"clients=64/events=16", 64, "bulk", `{"x":1}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			db, err := primary.Open(context.Background(), primary.Options{Path: filepath.Join(b.TempDir(), "db"), Contract: compile(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			in := json.RawMessage(bc.input)
			b.SetParallelism(parallelism(bc.clients))
			b.ResetTimer()
			if bc.clients == 1 {
				for b.Loop() {
					if _, err := db.Execute(context.Background(), bc.cmd, in, ""); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := db.Execute(context.Background(), bc.cmd, in, ""); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRawFdatasync is the disk's floor: append 128 bytes and fdatasync,
// in the same kind of directory as BenchmarkCommit.
func BenchmarkRawFdatasync(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 128)
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPebbleSyncedBatch64 is bare Pebble's group commit: 64 goroutines
// committing small synced batches, with Pebble's default options. It is the
// baseline of the commit target.
func BenchmarkPebbleSyncedBatch64(b *testing.B) {
	bareWriters64(b, bareOptions(), twoKeyBatch)
}

// BenchmarkPebbleSyncedBatch64Tuned is BenchmarkPebbleSyncedBatch64 with the
// primary's own Pebble options (its memtable size and zero-filled WALs),
// reported for context: it shows whether those options alone would make bare
// Pebble faster than the baseline.
func BenchmarkPebbleSyncedBatch64Tuned(b *testing.B) {
	o := bareOptions()
	o.MemTableSize, o.FS = primary.MemTableSize, walfill.New(vfs.Default)
	bareWriters64(b, o, twoKeyBatch)
}

// BenchmarkPebbleCommitShapedBatch64 is bare Pebble's group commit with
// batches of the shape a place_order commit writes (one event, so one
// stored event of 100 bytes under a 14-byte key, a 97-byte history record
// under a 10-byte key, a 37-byte intent under a 13-byte key and the 8-byte
// count), one batch per writer and no validation or encoding: what the
// engine alone does with the bytes a commit must write. It is reported for
// context next to BenchmarkPebbleSyncedBatch64, the baseline of the target.
func BenchmarkPebbleCommitShapedBatch64(b *testing.B) {
	val := make([]byte, 100)
	bareWriters64(b, bareOptions(), func(bt *pebble.Batch, n uint64) {
		seq := binary.BigEndian.AppendUint64([]byte("c"), n)
		_ = bt.Set(binary.BigEndian.AppendUint32(append(seq, 'e'), 0), val, nil)
		_ = bt.Set(append(seq, 'h'), val[:97], nil)
		_ = bt.Set(binary.BigEndian.AppendUint32(append([]byte("i"), seq[1:]...), 0), val[:37], nil)
		_ = bt.Set([]byte("m/undelivered"), val[:8], nil)
	})
}

// bareOptions are Pebble's defaults at the primary's format version.
func bareOptions() *pebble.Options {
	return &pebble.Options{FormatMajorVersion: primary.FormatMajorVersion, Logger: testutil.QuietPebbleLogger{}}
}

// twoKeyBatch fills the baseline's batch n: a 128-byte value and a 32-byte
// one under adjacent keys.
var twoKeyBatch = func() func(*pebble.Batch, uint64) {
	val := make([]byte, 128)
	return func(bt *pebble.Batch, n uint64) {
		k := binary.BigEndian.AppendUint64([]byte("k"), n)
		_ = bt.Set(k, val, nil)
		_ = bt.Set(append(k, 'i'), val[:32], nil)
	}
}()

// bareWriters64 runs about 64 goroutines that each commit synced batches
// filled by fill (n numbers the batches from 1) to a new bare Pebble store.
func bareWriters64(b *testing.B, o *pebble.Options, fill func(bt *pebble.Batch, n uint64)) {
	db, err := pebble.Open(filepath.Join(b.TempDir(), "bare"), o)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var n atomic.Uint64
	b.SetParallelism(parallelism(64))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bt := db.NewBatch()
			fill(bt, n.Add(1))
			if err := bt.Commit(pebble.Sync); err != nil {
				b.Error(err)
			}
			_ = bt.Close()
		}
	})
}
