package treestate_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/testsupport/treestate"
)

// TestDiff: each kind of change is named, and an untouched tree (its
// timestamps changed) has none.
func TestDiff(t *testing.T) {
	root := t.TempDir()
	write := func(name, s string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("LOCK", "", 0o600)
	write("store/a", "aaaa", 0o600)
	write("store/b", "bbbb", 0o600)
	write("store/c", "cccc", 0o600)
	write("store/d", "dddd", 0o600)
	before := treestate.MustTake(t, root)
	if err := os.Chtimes(filepath.Join(root, "LOCK"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if d := treestate.Diff(before, treestate.MustTake(t, root)); d != nil {
		t.Fatalf("timestamps alone: %v", d)
	}
	write("store/a", "aaab", 0o600)
	write("store/b", "bb", 0o600)
	if err := os.Chmod(filepath.Join(root, "store/c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "store/d")); err != nil {
		t.Fatal(err)
	}
	write("store/e", "", 0o600)
	got := treestate.Diff(before, treestate.MustTake(t, root))
	want := []string{"added store/e", "mode of store/c changed from -rw------- to -rw-r--r--",
		"removed store/d", "store/b changed size from 4 to 2 bytes", "the contents of store/a changed"}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff = %q\nwant %q", got, want)
	}
	if st := treestate.MustTake(t, filepath.Join(root, "missing")); len(st) != 0 {
		t.Fatalf("a missing root: %v", st)
	}
}
