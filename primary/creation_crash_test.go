package primary_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/riffdb/riffdb/internal/testsupport/crashfs"
	"github.com/riffdb/riffdb/primary"
)

// TestCrashDuringCreationReopens crashes at every write operation of a new
// database's first Open, keeping a random half of the unsynced data, and
// requires the next Open to succeed: nothing can have been acknowledged yet,
// so an interrupted creation is started over.
func TestCrashDuringCreationReopens(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a crash campaign (every write operation of a creation, 16 seeds, each reopened)")
	}
	c := compile(t)
	for seed := uint64(1); seed <= 16; seed++ { // seed 8 crashed Pebble's creation in a way it could not reopen
		for k := int64(1); ; k++ {
			mem := crashfs.New()
			var ops atomic.Int64
			var clone *vfs.MemFS
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && ops.Add(1) == k {
					clone = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, uint64(k)))})
				}
				return nil
			})
			db, err := primary.Open(context.Background(), primary.Options{Path: "/db", Contract: c, FS: errorfs.Wrap(mem, inj)})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if clone == nil {
				break // past the end of creation
			}
			db, err = primary.Open(context.Background(), primary.Options{Path: "/db", Contract: c, FS: clone})
			if err != nil {
				t.Fatalf("seed %d, crash at write %d of the first Open: reopen: %v", seed, k, err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCreatedDatabaseIsNeverRecreated damages a database that finished its
// first Open: Open must fail rather than start over.
func TestCreatedDatabaseIsNeverRecreated(t *testing.T) {
	mem := vfs.NewMem()
	c := compile(t)
	db, err := primary.Open(context.Background(), primary.Options{Path: "/db", Contract: c, FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := mem.List("/db")
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			if err := mem.Remove("/db/" + n); err != nil {
				t.Fatal(err)
			}
			removed = true
		}
	}
	if !removed {
		t.Fatal("no manifest to remove")
	}
	if _, err := primary.Open(context.Background(), primary.Options{Path: "/db", Contract: c, FS: mem}); err == nil {
		t.Fatal("a damaged, fully created database was silently recreated")
	}
	if _, err := mem.Stat("/db/riffdb-created"); err != nil {
		t.Fatalf("the creation marker was removed: %v", err)
	}
}
