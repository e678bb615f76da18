package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSyncBesideUnlink measures what a compaction's file work does to
// a WAL's fdatasync on the same filesystem. One writer overwrites 128 bytes
// of a zero-filled file and syncs it (fdatasync), again and again, as a
// zero-filled WAL's synced commits do. Beside it, once a second, a
// "compaction" writes a 20 MiB file in 64 KiB writes, pushed out every
// 512 KiB with sync_file_range(WAIT_BEFORE|WRITE) as Pebble's BytesPerSync
// does, fsyncs and closes it, and then removes it, in one of three ways,
// each for one second at a time, rotating (three rounds of five seconds):
//
//   - quiet: no compaction, the writer alone;
//   - unlink: the file is unlinked whole, as Pebble deletes an obsolete
//     table;
//   - truncate: the file is first truncated in 1 MiB steps and then
//     unlinked, as RocksDB's DeleteScheduler does with bytes_max_delete_chunk.
//
// It reports, per way, the syncs over 5 ms per compaction (stalls_per_burst;
// per second for quiet) and the syncs' p99 and p99.9 in µs. On ext4 on the
// project's virtio disk (2026-12-05) the whole-file unlink was where the
// writer's syncs stalled (docs/benchmarks/2026-12-01-soak.md).
func BenchmarkSyncBesideUnlink(b *testing.B) {
	const (
		burst    = 20 << 20
		chunk    = 64 << 10
		perSync  = 512 << 10
		slice    = 5 * time.Second
		rounds   = 3
		stallAt  = 5 * time.Millisecond
		walBytes = 64 << 20
	)
	dir := b.TempDir()
	wal, err := os.OpenFile(filepath.Join(dir, "wal"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer wal.Close()
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < walBytes; off += int64(len(zeros)) {
		if _, err := wal.WriteAt(zeros, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := wal.Sync(); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, chunk)
	for i := range data {
		data[i] = byte(i * 7)
	}
	// write fills f as a compaction writes a table, and syncs it.
	write := func(f *os.File) error {
		var off, pushed int64
		for off < burst {
			if _, err := f.Write(data); err != nil {
				return err
			}
			off += chunk
			if off-pushed >= perSync {
				if err := unix.SyncFileRange(int(f.Fd()), 0, off, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE); err != nil {
					return err
				}
				pushed = off
			}
		}
		return f.Sync()
	}
	// compact writes, syncs and removes one table-sized file.
	compact := func(name string, truncate bool) error {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if truncate {
			for size := int64(burst) - 1<<20; size > 0; size -= 1 << 20 {
				if err := os.Truncate(name, size); err != nil {
					return err
				}
			}
		}
		return os.Remove(name)
	}
	type result struct {
		syncs  []time.Duration
		stalls int
		bursts int
		secs   float64
	}
	ways := []string{"quiet", "unlink", "truncate"}
	results := make(map[string]*result, len(ways))
	for _, w := range ways {
		results[w] = &result{}
	}
	record := make([]byte, 128)
	var at int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for k := range ways {
				way := ways[(k+r)%len(ways)]
				res := results[way]
				errc := make(chan error, 1)
				stop := make(chan struct{})
				go func() {
					tick := time.NewTicker(time.Second)
					defer tick.Stop()
					for n := 0; ; n++ {
						select {
						case <-stop:
							errc <- nil
							return
						case <-tick.C:
						}
						if way == "quiet" {
							continue
						}
						if err := compact(filepath.Join(dir, fmt.Sprintf("table-%d", n)), way == "truncate"); err != nil {
							errc <- err
							return
						}
						res.bursts++
					}
				}()
				start := time.Now()
				for time.Since(start) < slice {
					t := time.Now()
					if _, err := wal.WriteAt(record, at); err != nil {
						b.Fatal(err)
					}
					if err := unix.Fdatasync(int(wal.Fd())); err != nil {
						b.Fatal(err)
					}
					d := time.Since(t)
					res.syncs = append(res.syncs, d)
					if d > stallAt {
						res.stalls++
					}
					at = (at + int64(len(record))) % walBytes
				}
				close(stop)
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				res.secs += time.Since(start).Seconds()
			}
		}
	}
	b.StopTimer()
	for _, w := range ways {
		res := results[w]
		slices.Sort(res.syncs)
		q := func(p float64) float64 {
			return float64(res.syncs[int(p*float64(len(res.syncs)-1))].Microseconds())
		}
		per := float64(res.bursts)
		if w == "quiet" {
			per = res.secs
		}
		b.ReportMetric(float64(res.stalls)/per, w+"_stalls_per_burst")
		b.ReportMetric(q(0.99), w+"_p99_us")
		b.ReportMetric(q(0.999), w+"_p999_us")
		b.ReportMetric(float64(len(res.syncs))/res.secs, w+"_syncs/s")
	}
}
