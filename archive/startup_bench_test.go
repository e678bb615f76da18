package archive

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkOpenPerTable measures what a start costs per table file of the
// archive: Open (custody audit, storage-engine open, startup validation,
// anchors, the Monitor's first values) of an archive of many table files
// against one of a single table, after a clean close, interleaved. The
// large archive holds 200,000 records of about 1 KiB of incompressible
// payload, fully compacted; the small one 10,000 records. Until the stores'
// tables grew to 32 MiB (2026-12-02) the large one had about 100 tables;
// it now has about 7, so µs/table, the difference over a few tables, is
// coarse (tables_small and tables_large say how many). It reports the fastest and the
// median Open of each, their ratio, and µs/table: the fastest Opens'
// difference over the difference in table files. Close is not timed.
func BenchmarkOpenPerTable(b *testing.B) {
	ctx := context.Background()
	small, large := bulkDir(b), bulkDir(b)
	bulkLoad(b, small, testDatabase, 10_000, bulkPayload)
	loadIncompressible(b, large, 200_000)
	dirs := []string{small, large}
	tables := []int{countTables(b, small), countTables(b, large)}
	opts := Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1}
	times := make([][]time.Duration, 2)
	b.ResetTimer()
	for b.Loop() {
		for i, dir := range dirs {
			start := time.Now()
			s, err := Open(ctx, dir, opts)
			if err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], time.Since(start))
			b.StopTimer()
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	for i := range times {
		slices.Sort(times[i])
	}
	fastest := func(i int) float64 { return float64(times[i][0].Microseconds()) }
	median := func(i int) float64 { return float64(times[i][len(times[i])/2].Microseconds()) }
	b.ReportMetric(float64(tables[0]), "tables_small")
	b.ReportMetric(float64(tables[1]), "tables_large")
	b.ReportMetric(fastest(0)/1000, "ms_fastest_small")
	b.ReportMetric(fastest(1)/1000, "ms_fastest_large")
	b.ReportMetric(median(0)/1000, "ms_median_small")
	b.ReportMetric(median(1)/1000, "ms_median_large")
	b.ReportMetric(fastest(1)/fastest(0), "ratio_fastest")
	b.ReportMetric((fastest(1)-fastest(0))/float64(tables[1]-tables[0]), "µs/table")
	b.ReportMetric(0, "ns/op")
}

// loadIncompressible bulk-loads n records of 900 bytes of random letters
// (which compress little, so that the tables fill as with real payloads)
// and compacts the store, as bulkLoadAt does for one repeated payload.
func loadIncompressible(b *testing.B, dir string, n int) {
	b.Helper()
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, 900)
	s.mu.Lock()
	acct := s.acct
	for i := 0; i < n; i += bulkBatch {
		batch := s.db.NewBatch()
		for seq := i + 1; seq <= min(n, i+bulkBatch); seq++ {
			for j := range payload {
				payload[j] = 'a' + byte(rng.IntN(26))
			}
			k, r := rec(b, testDatabase, uint64(seq), 0, string(payload))
			if err := batch.Set(recordKey(k), encodeValue(k, r), nil); err != nil {
				b.Fatal(err)
			}
			acct.Records++
			acct.EncodedBytes += Charge(k, r)
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		_ = batch.Close()
	}
	batch := s.db.NewBatch()
	_ = batch.Set(keyAccounting, encodeAccounting(acct), nil)
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	_ = batch.Close()
	s.acct = acct
	s.records.Store(acct.Records)
	s.encoded.Store(acct.EncodedBytes)
	s.mu.Unlock()
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

// countTables counts the table files of the store in dir.
func countTables(b *testing.B, dir string) int {
	b.Helper()
	names, err := os.ReadDir(filepath.Join(dir, StoreDirName))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range names {
		if strings.HasSuffix(e.Name(), ".sst") {
			n++
		}
	}
	if n == 0 {
		b.Fatalf("no table files in %d entries", len(names))
	}
	return n
}
