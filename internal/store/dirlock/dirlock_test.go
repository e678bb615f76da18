//go:build linux

package dirlock_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/store/dirlock"
	"github.com/riffdb/riffdb/internal/store/dirlock/dirlocktest"
)

func TestMain(m *testing.M) {
	dirlocktest.Main()
	os.Exit(m.Run())
}

func TestLockLeavesTheFileAsItWas(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1_600_000_000, 0)
	if err := os.Chtimes(name, old, old); err != nil {
		t.Fatal(err)
	}
	l, err := dirlock.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dirlock.Lock(name); !errors.Is(err, dirlock.ErrHeld) {
		t.Fatalf("second Lock in the process = %v, want ErrHeld", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	fi, err := os.Stat(name)
	if err != nil || !fi.ModTime().Equal(old) {
		t.Fatalf("LOCK was touched: %v, %v", fi.ModTime(), err)
	}
	l, err = dirlock.Lock(name)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	_ = l.Close()
}

// TestLockExcludesAnotherProcess asks another process to take the lock the
// test holds, both as Pebble would (a record lock) and as riffdb would.
func TestLockExcludesAnotherProcess(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	l, err := dirlock.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if dirlocktest.Free(t, name) {
		t.Fatal("another process took a lock this process holds")
	}
	_ = l.Close()
	if !dirlocktest.Free(t, name) {
		t.Fatal("another process could not take a lock this process released")
	}
}

// TestLockSurvivesTheCloseOfAnotherDescriptor is the restore's lost lock:
// the process opens the held LOCK again (as a checksum of the directory
// would), closes that descriptor, and the lock must still exclude another
// process. A POSIX record lock is dropped by that close.
func TestLockSurvivesTheCloseOfAnotherDescriptor(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	l, err := dirlock.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if dirlocktest.Free(t, name) {
		t.Fatal("closing another descriptor of LOCK released the lock: another process took it")
	}
}

func TestReadHeldReadsThroughTheHeldDescriptor(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "LOCK")
	if err := os.WriteFile(name, []byte("left by an older tool"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := dirlock.ReadHeld(name); ok || err != nil {
		t.Fatalf("ReadHeld of a file not held = %v, %v; want not ok", ok, err)
	}
	l, err := dirlock.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A name that is not clean names the same held file.
	r, ok, err := dirlock.ReadHeld(dir + "/./LOCK")
	if !ok || err != nil {
		t.Fatalf("ReadHeld of a held file = %v, %v", ok, err)
	}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "left by an older tool" {
		t.Fatalf("ReadHeld read %q, %v", b, err)
	}
	if dirlocktest.Free(t, name) {
		t.Fatal("reading through ReadHeld released the lock")
	}
}

func TestLockExistingCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "LOCK")
	if _, err := dirlock.LockExisting(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LockExisting of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := os.Lstat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LockExisting created the file: %v", err)
	}
	if err := os.WriteFile(name, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1_600_000_000, 5)
	if err := os.Chtimes(name, old, old); err != nil {
		t.Fatal(err)
	}
	l, err := dirlock.LockExisting(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dirlock.Lock(name); !errors.Is(err, dirlock.ErrHeld) {
		t.Fatalf("Lock while LockExisting holds it = %v, want ErrHeld", err)
	}
	_ = l.Close()
	fi, err := os.Stat(name)
	if err != nil || !fi.ModTime().Equal(old) || fi.Size() != 1 {
		t.Fatalf("LOCK was touched: %v %d, %v", fi.ModTime(), fi.Size(), err)
	}
	link := filepath.Join(dir, "LINK")
	if err := os.Symlink(name, link); err != nil {
		t.Fatal(err)
	}
	if l, err := dirlock.LockExisting(link); err == nil {
		_ = l.Close()
		t.Fatal("LockExisting followed a symbolic link")
	}
}
