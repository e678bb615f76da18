package dirlock_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/dirlock"
)

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

// TestLockExcludesAnotherProcess runs this test binary again as a child
// that tries the lock the parent holds.
func TestLockExcludesAnotherProcess(t *testing.T) {
	if name := os.Getenv("DIRLOCK_CHILD"); name != "" {
		if _, err := dirlock.Lock(name); err == nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	name := filepath.Join(t.TempDir(), "LOCK")
	l, err := dirlock.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLockExcludesAnotherProcess$")
	cmd.Env = append(os.Environ(), "DIRLOCK_CHILD="+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child took a lock the parent holds: %v %s", err, out)
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
