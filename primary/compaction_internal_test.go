package primary

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/primary/contract"
)

// TestCompactionsKeepNamespacesApart commits with clients' idempotency keys
// and delivers, as a server does, with a small memtable so that the store
// flushes and compacts many times, and checks the shape the engine keeps:
// no table holds keys of two namespaces (so a flush's commits overlap
// nothing older and the idempotency records are merged on their own), L0
// does not pile up flushed tables, and compactions write less than three
// times what was flushed (without the split: 8.6× here, and growing with
// the store).
func TestCompactionsKeepNamespacesApart(t *testing.T) {
	t.Parallel()
	c, err := contract.Compile([]byte("[commands.two]\ninput = { x = \"string\" }\nemits = [\"a\", \"b\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := Open(ctx, Options{Path: "/db", Contract: c, FS: vfs.NewMem(), Logger: zap.NewNop(), MemTableSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	pad := make([]byte, 200)
	for i := range 10_000 {
		for j := range pad {
			pad[j] = 'a' + byte(rng.IntN(26))
		}
		in, _ := json.Marshal(map[string]string{"x": string(pad)})
		if _, err := db.Execute(ctx, "two", in, fmt.Sprintf("%016x", rng.Uint64())); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			ins, err := db.ScanIntents(ctx, nil, 200)
			if err != nil {
				t.Fatal(err)
			}
			deliver(t, db, ins)
		}
	}
	m := db.Metrics()
	var compacted uint64
	for _, lm := range m.Levels {
		compacted += lm.TableBytesCompacted
	}
	flushed := m.Levels[0].TableBytesFlushed
	if m.Flush.Count < 30 {
		t.Fatalf("%d flushes; the test needs many", m.Flush.Count)
	}
	if compacted > 3*flushed {
		t.Errorf("compactions wrote %d bytes for %d bytes flushed (%.1f×); want < 3×\n%s",
			compacted, flushed, float64(compacted)/float64(flushed), m)
	}
	if l0 := m.Levels[0].TablesCount; l0 > 40 {
		t.Errorf("L0 holds %d tables; want ≤ 40\n%s", l0, m)
	}
	tables, err := db.store.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for level, ts := range tables {
		for _, tb := range ts {
			if lo, hi := tb.Smallest.UserKey, tb.Largest.UserKey; lo[0] != hi[0] {
				t.Errorf("L%d table %s spans namespaces %q to %q", level, tb.FileNum, lo[:1], hi[:1])
			}
		}
	}
}

// BenchmarkCompactionShape commits place-order-like commands (two events,
// 200 bytes of input, a client's random idempotency key) and delivers them
// in claims of 50 commits, as a server does, RIFFDB_SHAPE_COMMITS of them
// (default 40,000), into a store with a 1 MiB memtable (so that it flushes
// often) on Pebble's in-memory filesystem, and reports what the engine
// did: bytes compactions wrote over bytes flushed (compacted/flushed),
// table files in all and in L0, and Pebble's estimated compaction debt.
func BenchmarkCompactionShape(b *testing.B) {
	n := 40_000
	if v := os.Getenv("RIFFDB_SHAPE_COMMITS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("RIFFDB_SHAPE_COMMITS: %q is not a commit count", v)
		}
	}
	c, err := contract.Compile([]byte("[commands.two]\ninput = { x = \"string\" }\nemits = [\"a\", \"b\"]\n"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		db, err := Open(ctx, Options{Path: "/db", Contract: c, FS: vfs.NewMem(), Logger: zap.NewNop(), MemTableSize: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(9, 10))
		pad := make([]byte, 200)
		for i := range n {
			for j := range pad {
				pad[j] = 'a' + byte(rng.IntN(26))
			}
			in, _ := json.Marshal(map[string]string{"x": string(pad)})
			if _, err := db.Execute(ctx, "two", in, fmt.Sprintf("%016x", rng.Uint64())); err != nil {
				b.Fatal(err)
			}
			if i%50 == 49 {
				ins, err := db.ScanIntents(ctx, nil, 200)
				if err != nil {
					b.Fatal(err)
				}
				claimed, err := db.Claim(ctx, ins, time.Now().Add(time.Minute))
				if err != nil {
					b.Fatal(err)
				}
				if err := db.Complete(ctx, claimed); err != nil {
					b.Fatal(err)
				}
			}
		}
		m := db.Metrics()
		var compacted, tables uint64
		for _, lm := range m.Levels {
			compacted += lm.TableBytesCompacted
			tables += uint64(lm.TablesCount)
		}
		b.ReportMetric(float64(compacted)/float64(m.Levels[0].TableBytesFlushed), "compacted/flushed")
		b.ReportMetric(float64(tables), "tables")
		b.ReportMetric(float64(m.Levels[0].TablesCount), "tables_L0")
		b.ReportMetric(float64(m.Compact.EstimatedDebt)/(1<<20), "debt_MiB")
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
