package archive_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
)

// benchPayload makes records of about 1 KiB, like the Pebble notes' baseline.
var benchPayload = strings.Repeat("x", 900)

// BenchmarkAccept measures one writer's synced archive transactions on the
// real disk; compare with BenchmarkRawFdatasync.
func BenchmarkAccept(b *testing.B) {
	ctx := context.Background()
	dir := privateDir(b)
	s, err := archive.Open(ctx, dir, archive.Options{Database: db, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k, r := stored(b, uint64(i+1), benchPayload)
		if _, err := s.Accept(ctx, k, r); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRawFdatasync appends one record-sized block and fdatasyncs it, in
// the same kind of directory: the floor for a durable single writer.
func BenchmarkRawFdatasync(b *testing.B) {
	_, r := stored(b, 1, benchPayload)
	f, err := os.OpenFile(filepath.Join(privateDir(b), "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.Write(r); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkInspect measures offline verification throughput in records/s
// over an archive of 5,000 records (20 pages).
func BenchmarkInspect(b *testing.B) {
	ctx := context.Background()
	dir := privateDir(b)
	s, err := archive.Open(ctx, dir, archive.Options{Database: db, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	const n = 5000
	for i := 0; i < n; i++ {
		k, r := stored(b, uint64(i+1), benchPayload)
		if _, err := s.Accept(ctx, k, r); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := archive.Inspect(ctx, dir, db, archive.InspectOptions{MaxPages: archive.MaxInspectPages})
		if err != nil || rep.Integrity != archive.IntegrityVerified {
			b.Fatalf("%+v, %v", rep, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAcceptCPU measures the CPU of one archive transaction without
// the disk: Accept on Pebble's in-memory filesystem, whose sync returns at
// once, so what remains is riffdb's and Pebble's own work per event (the
// part of a delivery that does not overlap with anything). It reports the
// process's CPU time per transaction (cpu_us/op), user and system.
func BenchmarkAcceptCPU(b *testing.B) {
	ctx := context.Background()
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/outbox", 0o700); err != nil {
		b.Fatal(err)
	}
	s, err := archive.Open(ctx, "/outbox", archive.Options{Database: db, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1, FS: fs})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	keys := make([]event.Key, b.N)
	records := make([][]byte, b.N)
	for i := range b.N {
		keys[i], records[i] = stored(b, uint64(i+1), benchPayload)
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Accept(ctx, keys[i], records[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu_us/op")
}

// processCPU returns the process's CPU time so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
