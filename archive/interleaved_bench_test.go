package archive_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/bench"
	"github.com/riffdb/riffdb/event"
)

// BenchmarkAcceptInterleaved measures one writer's synced archive
// transactions (1 KiB records) against a raw loop appending a record of the
// same size and fdatasyncing it, in the same kind of directory, interleaved
// in time (bench.Interleave: half a second each in rotating order, four
// rounds per loop iteration, each slice starting once the archive's engine
// is idle), so that the ratio accept_vs_raw compares rates measured under
// the same disk conditions.
func BenchmarkAcceptInterleaved(b *testing.B) {
	ctx := context.Background()
	s, err := archive.Open(ctx, privateDir(b), archive.Options{Database: db, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	f, err := os.OpenFile(filepath.Join(privateDir(b), "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	_, record := stored(b, 1, benchPayload)
	var seq uint64
	ws := []bench.Workload{
		{Name: "raw", Run: bench.Parallel(1, func() error {
			if _, err := f.Write(record); err != nil {
				return err
			}
			return unix.Fdatasync(int(f.Fd()))
		})},
		{Name: "accept", Run: bench.Parallel(1, func() error {
			seq++ // one client: no race
			id := event.ID{Seq: seq}
			st, err := event.NewStored(id, "order_placed", []byte(benchPayload))
			if err != nil {
				return err
			}
			_, err = s.Accept(ctx, event.Key{Database: db, Incarnation: 1, Event: id}, st.Encode())
			return err
		})},
	}
	// Every slice starts with the archive's engine idle: the flushes and
	// compactions the accept slice left must not slow the raw slice.
	for i := range ws {
		ws[i].Before = bench.EnginesIdle(s.Metrics)
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
	raw, acc := total[0].PerSecond(), total[1].PerSecond()
	b.ReportMetric(raw, "raw_events/s")
	b.ReportMetric(acc, "accept_events/s")
	b.ReportMetric(acc/raw, "accept_vs_raw")
}
