package primary

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/primary/contract"
)

// TestSharedFileCacheBoundsOpenTables gives a store with 24 tables a shared
// table cache of 4 and reads every table: no more than 4 of them may stay
// open afterwards (the cache's bound is soft while tables are read, and
// Pebble closes evicted tables in the background). A store that ignored Options.FileCache would keep all 24
// in a table cache of its own (MaxOpenFiles 1,000).
func TestSharedFileCacheBoundsOpenTables(t *testing.T) {
	ctx := context.Background()
	c, err := contract.Compile([]byte("[commands.two]\ninput = { x = \"int\" }\nemits = [\"a\", \"b\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	fc := pebble.NewFileCache(1, 4)
	defer fc.Unref()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(ctx, Options{Path: dir, Contract: c, Logger: zaptest.NewLogger(t), FileCache: fc,
		pebbleOptions: func(o *pebble.Options) {
			// Keep every flushed table apart, without stalling writes.
			o.DisableAutomaticCompactions, o.L0StopWritesThreshold, o.DisableTableStats = true, 1000, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const tables = 24
	for range tables {
		if _, err := db.Execute(ctx, "two", json.RawMessage(`{"x":1}`), ""); err != nil {
			t.Fatal(err)
		}
		if err := db.store.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.store.Metrics().Levels[0].TablesCount; n < tables {
		t.Fatalf("%d tables in L0, want at least %d", n, tables)
	}
	for range 3 {
		for seq := uint64(1); seq <= tables; seq++ {
			if _, err := db.get(historyKey(seq)); err != nil {
				t.Fatalf("history %d: %v", seq, err)
			}
		}
	}
	// Pebble closes evicted tables in the background: wait for it.
	open := openTableFiles(t, dir)
	for deadline := time.Now().Add(10 * time.Second); open > 4 && time.Now().Before(deadline); open = openTableFiles(t, dir) {
		time.Sleep(10 * time.Millisecond)
	}
	if open > 4 {
		t.Fatalf("%d table files of the store are open, the shared table cache holds 4", open)
	}
}

// openTableFiles counts this process's descriptors of .sst files in dir.
func openTableFiles(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count open files: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") && strings.HasSuffix(target, ".sst") {
			n++
		}
	}
	return n
}
