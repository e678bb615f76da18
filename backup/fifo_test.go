package backup_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/event"
)

// within runs f and fails the test when it has not returned after 10 s: a
// FIFO opened for reading without a writer blocks for ever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked on a FIFO", what)
	}
}

// mkfifo makes a FIFO at name and, when the test ends, opens it for writing
// without blocking, so that a reader blocked on it (the failure this guards
// against) is released.
func mkfifo(t *testing.T, name string) {
	t.Helper()
	if err := syscall.Mkfifo(name, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(name, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// TestFIFOsUnderTheRootDoNotBlock: a FIFO as an entry's manifest.json makes
// List show the entry as damaged at once, a restore of it is refused as
// damaged at once, and a restore of another backup (which reads every
// manifest for the incarnation formula) goes through; a FIFO as a partial
// backup's marker does not stop the next backup.
func TestFIFOsUnderTheRootDoNotBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, m := backedUp(t, 3, 1)
	id, _ := event.ParseDatabaseID(m.DatabaseID)
	entry := filepath.Join(e.root, "backup-fifo")
	if err := os.Mkdir(entry, 0o700); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(entry, "manifest.json"))

	within(t, "List", func() {
		list, err := backup.List(e.root, id)
		if err != nil || len(list) != 2 || !list[0].Damaged || list[0].Name != "backup-fifo" {
			t.Errorf("List = %+v, %v; want backup-fifo listed as damaged", list, err)
		}
	})
	within(t, "restoring the FIFO entry", func() {
		if _, err := backup.Restore(ctx, e.request("backup-fifo")); !errors.Is(err, backup.ErrBackupDamaged) {
			t.Errorf("restore of the FIFO entry: %v, want ErrBackupDamaged", err)
		}
	})
	within(t, "restoring beside the FIFO entry", func() {
		if res, err := backup.Restore(ctx, e.request(m.Name)); err != nil || res.NewIncarnation != 2 {
			t.Errorf("restore beside the FIFO entry: %+v, %v", res, err)
		}
	})

	partial := filepath.Join(e.root, "backup-x.partial")
	if err := os.Mkdir(partial, 0o700); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(partial, "riffdb-backup-partial"))
	db := e.open()
	within(t, "Create", func() {
		if _, err := backup.Create(ctx, db, e.root, backup.Options{Clock: e.clock}); err != nil {
			t.Errorf("Create beside a FIFO marker: %v", err)
		}
	})
	if _, err := os.Lstat(partial); err != nil {
		t.Errorf("the FIFO-marked partial entry (not provably ours) was removed: %v", err)
	}
}
