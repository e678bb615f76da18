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

	"github.com/riffdb/riffdb/internal/store/lsmshape"
	"github.com/riffdb/riffdb/primary/contract"
)

// TestCompactionsKeepNamespacesApart commits with clients' idempotency keys
// and delivers, as a server does, with a small memtable so that the store
// flushes and compacts many times, and checks the shape the engine keeps:
// no table holds keys of two namespaces (so a flush's commits overlap
// nothing older and the idempotency records are merged on their own), L0
// does not pile up flushed tables, and compactions write less than three
// times what was flushed (without the split: about 8× here, and growing with
// the store).
func TestCompactionsKeepNamespacesApart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10,000 commands through a 256 KiB memtable, flushed and compacted many times")
	}
	t.Parallel()
	db := openShapeStore(t, 256<<10)
	defer db.Close()
	commandAndDeliver(t, db, 10_000, 5)
	m := db.Metrics()
	shape := lsmshape.Of(m)
	if m.Flush.Count < 30 {
		t.Fatalf("%d flushes; the test needs many", m.Flush.Count)
	}
	if shape.Amplification() >= 3 {
		t.Errorf("compactions wrote %d bytes for %d bytes flushed (%.1f×); want < 3×\n%s",
			shape.Compacted, shape.Flushed, shape.Amplification(), m)
	}
	if shape.L0 > 40 {
		t.Errorf("L0 holds %d tables; want ≤ 40\n%s", shape.L0, m)
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
	for b.Loop() {
		db := openShapeStore(b, 1<<20)
		commandAndDeliver(b, db, n, 9)
		lsmshape.Of(db.Metrics()).Report(b)
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// openShapeStore opens a store on Pebble's in-memory filesystem with the
// given memtable size and a command that emits two events.
func openShapeStore(tb testing.TB, memTable uint64) *DB {
	tb.Helper()
	c, err := contract.Compile([]byte("[commands.two]\ninput = { x = \"string\" }\nemits = [\"a\", \"b\"]\n"))
	if err != nil {
		tb.Fatal(err)
	}
	db, err := Open(context.Background(), Options{Path: "/db", Contract: c, FS: vfs.NewMem(), Logger: zap.NewNop(), MemTableSize: memTable})
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// commandAndDeliver executes n commands (200 bytes of input, a client's
// random idempotency key) and delivers them in claims of 50 commands, as a
// server does.
func commandAndDeliver(tb testing.TB, db *DB, n int, seed uint64) {
	tb.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	pad := make([]byte, 200)
	for i := range n {
		for j := range pad {
			pad[j] = 'a' + byte(rng.IntN(26))
		}
		in, _ := json.Marshal(map[string]string{"x": string(pad)})
		if _, err := db.Execute(ctx, "two", in, fmt.Sprintf("%016x", rng.Uint64())); err != nil {
			tb.Fatal(err)
		}
		if i%50 == 49 {
			ins, err := db.ScanIntents(ctx, nil, 200)
			if err != nil {
				tb.Fatal(err)
			}
			claimed, err := db.Claim(ctx, ins, time.Now().Add(time.Minute))
			if err != nil {
				tb.Fatal(err)
			}
			if err := db.Complete(ctx, claimed); err != nil {
				tb.Fatal(err)
			}
		}
	}
}
