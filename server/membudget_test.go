package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestMemoryBudgetReachesEveryStore opens a server with three databases,
// two of them with an outbox, and a 128 MiB budget: the split is the one
// membudget gives for three primaries and two archives, and every store's
// Pebble (read back from the OPTIONS file Pebble writes at open) has its
// memtable size and the size of the cache its kind of store shares.
func TestMemoryBudgetReachesEveryStore(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "contract.toml"), []byte(statsContract), 0o600); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
memory_budget_bytes = %d
`, root+"/creds", 128<<20)
	for _, alias := range []string{"a", "b", "c"} {
		toml += fmt.Sprintf("[databases.%s]\npath = %q\ncontract = %q\n", alias, root+"/db-"+alias, root+"/contract.toml")
		if alias == "c" {
			continue
		}
		dir := filepath.Join(root, "outbox-"+alias)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		toml += fmt.Sprintf("[databases.%s.outbox]\nkind = \"durable_local\"\ndirectory = %q\nquota_encoded_bytes = 1000000\n", alias, dir)
	}
	cfg, err := config.Parse([]byte(toml), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	// The archives open when the workers start.
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}()
	want := divideMemory(128<<20, 3, 2)
	if s.memory != want {
		t.Fatalf("split %+v, want %+v", s.memory, want)
	}
	check := func(dir string, memtable uint64, cache int64) {
		t.Helper()
		opts := pebbleOptionsFile(t, dir)
		for _, line := range []string{fmt.Sprintf("mem_table_size=%d", memtable), fmt.Sprintf("cache_size=%d", cache)} {
			if !strings.Contains(opts, "\n  "+line+"\n") {
				t.Errorf("the store in %s was opened without %s", filepath.Base(dir), line)
			}
		}
	}
	for _, alias := range []string{"a", "b", "c"} {
		check(filepath.Join(root, "db-"+alias), want.PrimaryMemTable, want.PrimaryCacheBytes)
	}
	for _, alias := range []string{"a", "b"} {
		dir := filepath.Join(root, "outbox-"+alias, archive.StoreDirName)
		testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the archive store", func() bool { _, err := os.Stat(dir); return err == nil })
		check(dir, want.ArchiveMemTable, want.ArchiveCacheBytes)
	}
}

// pebbleOptionsFile returns the newest OPTIONS file of the Pebble store in
// dir, waiting until one exists.
func pebbleOptionsFile(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "Pebble's OPTIONS file", func() bool {
		names, _ = filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
		return len(names) > 0
	})
	b, err := os.ReadFile(names[len(names)-1])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
