package primary_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/internal/store/walfill"

	"github.com/riffdb/riffdb/primary"
)

// TestNewWALIsZeroFilled checks that the primary's Pebble writes through
// internal/store/walfill: on a real disk, a new store's WAL holds its whole
// reservation written with zeros at least walfill.MinStep ahead of the log after
// two commits, so later synced commits do not journal metadata.
func TestNewWALIsZeroFilled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	db, _ := setup(t, func(o *primary.Options) { o.Path, o.FS = dir, nil })
	exec(t, db, "two", `{"x":1}`, "")
	exec(t, db, "two", `{"x":2}`, "")
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no WAL in the store: %v", err)
	}
	st, err := os.Stat(logs[len(logs)-1])
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < walfill.MinStep {
		t.Fatalf("the WAL is %d bytes after two commits: not zero-filled", st.Size())
	}
}
