package archive

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/store/lsmshape"
)

// TestCompactionsDoNotRewriteTheArchive stores records one by one, as
// delivery does, with a small memtable so that the store flushes and
// compacts many times, and checks the shape the engine keeps:
//
//   - no table holds both metadata keys (the accounting, rewritten by
//     every record) and records, so a flush's records overlap nothing
//     older;
//   - compactions write about the records once more, not the whole archive
//     at every L0 compaction (without the split: 8× the records' bytes
//     here, and growing with the archive);
//   - L0 does not pile up flushed tables.
func TestCompactionsDoNotRewriteTheArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: thousands of records through a 256 KiB memtable, flushed and compacted many times")
	}
	t.Parallel()
	opts := testOptions(t, newMemFS(t, false))
	opts.MemTableSize = 256 << 10
	s := mustOpen(t, opts)
	storeOneByOne(t, s, 24_000, 3)
	m := s.db.Metrics()
	shape := lsmshape.Of(m)
	if m.Flush.Count < 50 {
		t.Fatalf("%d flushes; the test needs many", m.Flush.Count)
	}
	if shape.Amplification() > 2 {
		t.Errorf("compactions wrote %d bytes for %d bytes flushed (%.1f×); want ≤ 2×\n%s",
			shape.Compacted, shape.Flushed, shape.Amplification(), m)
	}
	if shape.L0 > 40 {
		t.Errorf("L0 holds %d tables; want ≤ 40\n%s", shape.L0, m)
	}
	tables, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for level, ts := range tables {
		for _, tb := range ts {
			lo, hi := tb.Smallest.UserKey, tb.Largest.UserKey
			if bytes.Compare(lo, recordLower) < 0 && bytes.Compare(hi, recordLower) >= 0 {
				t.Errorf("L%d table %s spans metadata %q and records", level, tb.FileNum, lo)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The records are all there, in order, after a reopen.
	s2 := mustOpen(t, opts)
	if u := s2.Usage(); u.Records != 24_000 {
		t.Fatalf("reopened with %d records, want 24,000", u.Records)
	}
}

// BenchmarkCompactionShape stores records of 900 incompressible bytes one
// by one, as delivery does, into an archive with the default memtable on
// Pebble's in-memory filesystem (the shape of the store, not the disk, is
// measured), RIFFDB_SHAPE_RECORDS of them (default 300,000), and reports
// what the engine did: bytes compactions wrote over bytes flushed
// (compacted/flushed), table files in all and in L0, and Pebble's
// estimated compaction debt at the end.
func BenchmarkCompactionShape(b *testing.B) {
	n := 300_000
	if v := os.Getenv("RIFFDB_SHAPE_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("RIFFDB_SHAPE_RECORDS: %q is not a record count", v)
		}
	}
	for b.Loop() {
		opts := testOptions(b, newMemFS(b, false))
		opts.QuotaEncodedBytes = 1 << 40
		s, err := Open(context.Background(), testDir, opts)
		if err != nil {
			b.Fatal(err)
		}
		storeOneByOne(b, s, n, 7)
		lsmshape.Of(s.db.Metrics()).Report(b)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// storeOneByOne stores records 1..n of 900 pseudo-random (incompressible)
// bytes, each in its own transaction, as delivery does.
func storeOneByOne(tb testing.TB, s *Store, n int, seed uint64) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	payload := make([]byte, 900)
	for seq := uint64(1); seq <= uint64(n); seq++ {
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		k, r := rec(tb, testDatabase, seq, 0, string(payload))
		mustAccept(tb, s, k, r, deliverytype.Stored)
	}
}
