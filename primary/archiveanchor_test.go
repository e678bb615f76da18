package primary_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/primary"
)

// TestReadArchiveAnchorsChangesNothing: the delivery mark of a stopped
// database is read without a write, under the database's lock taken
// without creating LOCK; an open database is ErrBusy, a directory without a store
// or its LOCK is refused without creating anything, and a directory others
// can reach is ErrUnprotected.
func TestReadArchiveAnchorsChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, opts := openDisk(t)
	commitN(t, db, 5)
	claimed, err := db.Claim(ctx, allIntents(t, db)[:3], time.Unix(1_800_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CompleteArchived(ctx, claimed, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.LockExisting(opts.Path); !errors.Is(err, primary.ErrBusy) {
		t.Fatalf("LockExisting of an open database = %v, want ErrBusy", err)
	}
	id := db.Identity()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	before := snapshotDir(t, opts.Path)
	lock, err := primary.LockExisting(opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := primary.ReadArchiveAnchors(ctx, opts.Path, lock)
	_ = lock.Close()
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != id || a.LastCommit != 5 || a.Delivered.ArchiveFloor != 42 || a.Delivered.Completed != 3 {
		t.Fatalf("anchors %+v", a)
	}
	if after := snapshotDir(t, opts.Path); after != before {
		t.Fatalf("the directory changed:\n%s\n---\n%s", before, after)
	}

	empty := t.TempDir()
	if err := os.Chmod(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.LockExisting(empty); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LockExisting of a directory without LOCK = %v, want ErrNotExist", err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("LockExisting created %v", names)
	}
	if _, err := primary.LockExisting(filepath.Join(empty, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LockExisting of a missing directory = %v, want ErrNotExist", err)
	}
	if err := os.Chmod(opts.Path, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.LockExisting(opts.Path); !errors.Is(err, primary.ErrUnprotected) {
		t.Fatalf("LockExisting of a directory others can reach = %v, want ErrUnprotected", err)
	}
}
