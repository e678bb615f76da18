package primary_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/primary"
)

// openDisk opens a database in a new private directory on the real
// filesystem.
func openDisk(t *testing.T) (*primary.DB, primary.Options) {
	t.Helper()
	opts := primary.Options{
		Path:     filepath.Join(t.TempDir(), "db"),
		Contract: compile(t),
		Logger:   zaptest.NewLogger(t),
		Clock:    newClock(),
	}
	db, err := primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, opts
}

func reopenDisk(t *testing.T, db *primary.DB, opts primary.Options) *primary.DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func commitN(t *testing.T, db *primary.DB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		exec(t, db, "two", fmt.Sprintf(`{"x":%d}`, i), "")
	}
}

// TestCheckpointIsAPrivateIndependentCopy: the checkpoint of a running
// database holds its history up to the call and nothing after, shares no
// inode with the live store (Pebble links tables; they are copied), is
// private (0700, files 0600) and carries an empty LOCK, so that reading it
// creates nothing.
func TestCheckpointIsAPrivateIndependentCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, opts := openDisk(t)
	commitN(t, db, 30)
	db = reopenDisk(t, db, opts) // Open flushes the replayed WAL into a table
	commitN(t, db, 20)           // these stay in the WAL
	last := db.LastCommitSequence()
	dir := filepath.Join(t.TempDir(), "copy")
	if err := db.Checkpoint(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	commitN(t, db, 5) // after the checkpoint: not in it

	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("checkpoint directory mode %v (%v)", fi.Mode(), err)
	}
	live := map[uint64]string{}
	entries, err := os.ReadDir(opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(opts.Path, e.Name()))
		if err != nil {
			continue // Pebble removes obsolete files concurrently
		}
		live[fi.Sys().(*syscall.Stat_t).Ino] = e.Name()
	}
	entries, err = os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tables int
	var lock bool
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || st.Nlink != 1 {
			t.Errorf("%s: mode %v, %d links; want a private regular file with one link", e.Name(), fi.Mode(), st.Nlink)
		}
		if name, ok := live[st.Ino]; ok {
			t.Errorf("%s shares its inode with the live store's %s", e.Name(), name)
		}
		if strings.HasSuffix(e.Name(), ".sst") {
			tables++
		}
		if e.Name() == "LOCK" {
			lock = fi.Size() == 0
		}
	}
	if tables == 0 {
		t.Fatal("the checkpoint holds no table: the linked-file case was not exercised")
	}
	if !lock {
		t.Fatal("the checkpoint has no empty LOCK file")
	}
	info, err := primary.ReadStoreInfo(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (primary.StoreInfo{ID: db.Identity(), Incarnation: 1, LastCommit: last}); info != want {
		t.Fatalf("checkpoint info %+v, want %+v", info, want)
	}
}

// TestReadStoreInfoChangesNothing: reading a stopped database's information
// leaves every file as it was, and refuses while the database is open.
func TestReadStoreInfoChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, opts := openDisk(t)
	commitN(t, db, 7)
	if _, err := primary.ReadStoreInfo(ctx, opts.Path, nil); !errors.Is(err, primary.ErrBusy) {
		t.Fatalf("ReadStoreInfo of an open database = %v, want ErrBusy", err)
	}
	id := db.Identity()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, opts.Path)
	info, err := primary.ReadStoreInfo(ctx, opts.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (primary.StoreInfo{ID: id, Incarnation: 1, LastCommit: 7}); info != want {
		t.Fatalf("info %+v, want %+v", info, want)
	}
	if after := snapshotDir(t, opts.Path); after != before {
		t.Fatalf("the directory changed:\n%s\n---\n%s", before, after)
	}
	if _, err := primary.ReadStoreInfo(ctx, t.TempDir(), nil); err == nil {
		t.Fatal("an empty directory read as a store")
	}
}

// snapshotDir renders names, sizes, modes and modification times.
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %v %s\n", e.Name(), fi.Size(), fi.Mode(), fi.ModTime().Format(time.RFC3339Nano))
	}
	return b.String()
}

// TestStampMakesARestoredDatabase: a stamped checkpoint opens as the same
// database with the new incarnation, the checkpoint's history, and a
// delivery count that starts afresh; a lower incarnation is refused.
func TestStampMakesARestoredDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openDisk(t)
	commitN(t, db, 4)
	in := allIntents(t, db)[:2]
	claimed, err := db.Claim(ctx, in, time.Unix(1_800_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	if m := db.Delivered(); m.Completed != 2 {
		t.Fatalf("delivery mark %+v", m)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if err := db.Checkpoint(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	lock, err := primary.LockDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := primary.Stamp(ctx, dir, lock, 0); err == nil {
		t.Fatal("Stamp accepted an incarnation below the store's")
	}
	info, err := primary.Stamp(ctx, dir, lock, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	if want := (primary.StoreInfo{ID: db.Identity(), Incarnation: 2, LastCommit: 4}); info != want {
		t.Fatalf("stamped info %+v, want %+v", info, want)
	}
	r, err := primary.Open(ctx, primary.Options{Path: dir, Contract: compile(t), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Identity() != db.Identity() || r.Incarnation() != 2 || r.LastCommitSequence() != 4 {
		t.Fatalf("restored: %s inc %d last %d", r.Identity(), r.Incarnation(), r.LastCommitSequence())
	}
	if m := r.Delivered(); m.Incarnation != 2 || m.Completed != 0 {
		t.Fatalf("restored delivery mark %+v, want incarnation 2 with 0 completions", m)
	}
	if n, _ := r.UndeliveredCount(); n != 6 {
		t.Fatalf("restored undelivered count %d, want 6", n)
	}
	if db.Incarnation() != 1 {
		t.Fatal("the live database's incarnation changed")
	}
}

// TestReadStoreInfoOfTheExtendedLayout: a database whose key layout a
// recorded failure moved to the extended intents (layout 3) is read like
// any other: backups and restores take it.
func TestReadStoreInfoOfTheExtendedLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, opts := openDisk(t)
	commitN(t, db, 2)
	claimed, err := db.Claim(ctx, allIntents(t, db)[:1], time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Retry(ctx, claimed[0], time.Now(), primary.Failure{At: time.Now(), Class: "unavailable", Reason: "destination_unavailable"}); err != nil {
		t.Fatal(err)
	}
	id := db.Identity()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := primary.ReadStoreInfo(ctx, opts.Path, nil)
	if err != nil || info != (primary.StoreInfo{ID: id, Incarnation: 1, LastCommit: 2}) {
		t.Fatalf("ReadStoreInfo = %+v, %v", info, err)
	}
}
