package archive_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/internal/store/walfill"

	"github.com/riffdb/riffdb/archive"
)

// TestNewWALIsZeroFilled checks that the archive's Pebble writes through
// internal/store/walfill: on a real disk, a new store's WAL holds its whole
// reservation written with zeros at least walfill.MinStep ahead of the log after
// two accepted records, so later synced transactions do not journal metadata.
func TestNewWALIsZeroFilled(t *testing.T) {
	ctx := context.Background()
	dir := privateDir(t)
	s, err := archive.Open(ctx, dir, archive.Options{Database: db, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		k, r := stored(t, uint64(i+1), "payload")
		if _, err := s.Accept(ctx, k, r); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := filepath.Glob(filepath.Join(dir, archive.StoreDirName, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no WAL in the store: %v", err)
	}
	st, err := os.Stat(logs[len(logs)-1])
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < walfill.MinStep {
		t.Fatalf("the WAL is %d bytes after two transactions: not zero-filled", st.Size())
	}
}
