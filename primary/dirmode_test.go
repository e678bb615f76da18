package primary_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/primary"
)

// TestOpenRefusesADirectoryOthersCanReach: a pre-existing data directory
// with any group or other permission bit is refused, before anything is
// written into it, with a path-free error naming the role; a private one,
// or a missing one that Open creates 0700, opens.
func TestOpenRefusesADirectoryOthersCanReach(t *testing.T) {
	t.Parallel()
	for _, mode := range []os.FileMode{0o755, 0o750, 0o710, 0o705, 0o701, 0o777} {
		dir := filepath.Join(t.TempDir(), "db")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		db, err := primary.Open(context.Background(), primary.Options{Path: dir, Contract: compile(t)})
		if err == nil {
			_ = db.Close()
			t.Fatalf("mode %04o: opened", mode)
		}
		if !errors.Is(err, primary.ErrUnprotected) {
			t.Fatalf("mode %04o: %v, want ErrUnprotected", mode, err)
		}
		if msg := err.Error(); strings.Contains(msg, dir) || !strings.Contains(msg, "database path") {
			t.Fatalf("mode %04o: message %q", mode, msg)
		}
		if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
			t.Fatalf("mode %04o: the refused directory holds %v (%v)", mode, names, err)
		}
	}
	for name, prepare := range map[string]func(dir string) error{
		"private": func(dir string) error { return os.Mkdir(dir, 0o700) },
		"missing": func(string) error { return nil },
	} {
		dir := filepath.Join(t.TempDir(), "db")
		if err := prepare(dir); err != nil {
			t.Fatal(err)
		}
		db, err := primary.Open(context.Background(), primary.Options{Path: dir, Contract: compile(t)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: directory mode %v (%v)", name, fi.Mode(), err)
		}
	}
}
