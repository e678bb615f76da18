package backup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
)

// entries returns the names under dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestCreateRefusesABackupThatWouldEatTheReserve: with less free space than
// the store's size plus the reserve, Create refuses before it writes
// anything, with a *SpaceError carrying the numbers and no path; with
// exactly enough it succeeds; a negative reserve still refuses a backup
// that does not fit.
func TestCreateRefusesABackupThatWouldEatTheReserve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, 50)
	size, err := db.DiskUsage()
	if err != nil || size <= 0 {
		t.Fatalf("DiskUsage = %d, %v", size, err)
	}
	const reserve = 10 << 20
	create := func(free, reserve int64) (backup.Manifest, error) {
		opts := backup.Options{Clock: e.clock, ReserveBytes: reserve}
		backup.SetFreeSpace(&opts, func(string) (int64, error) { return free, nil })
		return backup.Create(context.Background(), db, e.root, opts)
	}
	_, err = create(size+reserve-1, reserve)
	var se *backup.SpaceError
	if !errors.Is(err, backup.ErrInsufficientSpace) || !errors.As(err, &se) {
		t.Fatalf("Create with one byte too few = %v, want a SpaceError", err)
	}
	if se.Needed != size || se.Free != size+reserve-1 || se.Reserve != reserve || se.AfterCopy {
		t.Fatalf("SpaceError = %+v, want needed %d, free %d, reserve %d", se, size, size+reserve-1, reserve)
	}
	for _, n := range []string{fmt.Sprint(size), fmt.Sprint(size + reserve - 1), fmt.Sprint(reserve)} {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("the message %q lacks %s", err, n)
		}
	}
	if strings.Contains(err.Error(), e.root) {
		t.Errorf("the message names backup_root: %v", err)
	}
	if names := entries(t, e.root); len(names) != 0 {
		t.Fatalf("a refused backup left %v", names)
	}
	if _, err := create(size-1, -1); !errors.Is(err, backup.ErrInsufficientSpace) {
		t.Fatalf("Create without a reserve that does not fit = %v", err)
	}
	// The checks before and after the copy see the same free space: with
	// a copy larger than the estimate plus the reserve, the second one
	// refuses, so leave room for that.
	if _, err := create(size+reserve+1<<30, reserve); err != nil {
		t.Fatalf("Create with room to spare: %v", err)
	}
}

// TestCreateDiscardsACopyThatLeftTooLittle: when the free space shrinks
// while the copy is written, the check after the copy refuses the backup,
// removes the copy and removes no older backup (retention runs only after
// a backup is complete).
func TestCreateDiscardsACopyThatLeftTooLittle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, 20)
	first, err := backup.Create(context.Background(), db, e.root, backup.Options{Clock: e.clock, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	var calls atomic.Int32
	opts := backup.Options{Clock: e.clock, Keep: 1, ReserveBytes: 1 << 20}
	backup.SetFreeSpace(&opts, func(string) (int64, error) {
		if calls.Add(1) == 1 {
			return 1 << 40, nil // before the copy: plenty
		}
		return 1<<20 - 1, nil // after it: something else filled the disk
	})
	_, err = backup.Create(context.Background(), db, e.root, opts)
	var se *backup.SpaceError
	if !errors.As(err, &se) || !se.AfterCopy || se.Free != 1<<20-1 || se.Needed <= 0 {
		t.Fatalf("Create = %v (%+v), want a SpaceError after the copy", err, se)
	}
	if got := entries(t, e.root); len(got) != 1 || got[0] != first.Name {
		t.Fatalf("backup_root holds %v, want only the earlier backup %s", got, first.Name)
	}
}

// TestCreateStopsAtTheReserveOnASmallFilesystem: on a real 32 MiB tmpfs,
// backups taken one after another (every one kept) are refused once the
// next would leave less than the reserve, and the refused one leaves
// nothing; the free space never drops below the reserve.
func TestCreateStopsAtTheReserveOnASmallFilesystem(t *testing.T) {
	root := mountTmpfs(t, "32m")
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, 3000)
	const reserve = 8 << 20
	var kept []string
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 backups fit on a 32 MiB filesystem")
		}
		e.clock.Advance(time.Second)
		m, err := backup.Create(context.Background(), db, root, backup.Options{Clock: e.clock, Keep: -1, ReserveBytes: reserve})
		if errors.Is(err, backup.ErrInsufficientSpace) {
			break
		}
		if err != nil {
			t.Fatalf("backup %d: %v", i, err)
		}
		kept = append(kept, m.Name)
	}
	if len(kept) == 0 {
		t.Fatal("not even one backup fit")
	}
	if got := entries(t, root); strings.Join(got, " ") != strings.Join(kept, " ") {
		t.Fatalf("backup_root holds %v, want the %d kept backups", got, len(kept))
	}
	if free := statfsFree(t, root); free < reserve {
		t.Fatalf("%d bytes free, less than the reserve", free)
	}
}

// mountTmpfs mounts a private tmpfs of size under a new directory, usable
// as a backup_root (mode 0700), unmounted when the test ends. It skips the
// test when mounting is not possible (not root, no mount command).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("this test needs to mount a tmpfs (root and mount(8)): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	return dir
}
