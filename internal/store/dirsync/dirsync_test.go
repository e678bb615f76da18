//go:build unix

package dirsync_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// TestSyncKeepsANewNameAcrossACrash creates a synced file in a synced
// directory, and a second synced file whose directory is synced only by
// Sync: after a crash that keeps exactly what was synced, both names are
// there only when Sync synced the directory.
func TestSyncKeepsANewNameAcrossACrash(t *testing.T) {
	for _, sync := range []bool{false, true} {
		mem := vfs.NewCrashableMem()
		if err := mem.MkdirAll("/d", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := dirsync.Sync(mem, "/"); err != nil {
			t.Fatal(err)
		}
		f, err := mem.Create("/d/f", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := dirsync.Sync(mem, "/d"); err != nil {
				t.Fatal(err)
			}
		}
		crashed := mem.CrashClone(vfs.CrashCloneCfg{})
		_, err = crashed.Stat("/d/f")
		switch {
		case sync && err != nil:
			t.Fatalf("after Sync the name was lost in a crash: %v", err)
		case !sync && !errors.Is(err, fs.ErrNotExist):
			t.Fatalf("without Sync the crash kept the name (err %v): the test cannot tell Sync's effect", err)
		}
	}
}

// TestSyncReportsAMissingDirectory: a directory that is not there is an
// error, not a silent success.
func TestSyncReportsAMissingDirectory(t *testing.T) {
	if err := dirsync.Sync(vfs.NewMem(), "/nowhere"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sync of a missing directory = %v, want ErrNotExist", err)
	}
}

// TestWriteFileReplacesDurablyAndPrivately: after a crash that keeps only
// what was synced, dir/name holds the new bytes; on the real filesystem the
// file is 0600 whatever the umask, and a temporary file an interrupted
// write left is replaced.
func TestWriteFileReplacesDurablyAndPrivately(t *testing.T) {
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := dirsync.Sync(mem, "/"); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"old", "new"} {
		if err := dirsync.WriteFile(mem, "/d", "floor", []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	f, err := crashed.Open("/d/floor")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil || string(b) != "new" {
		t.Fatalf("after a crash the file holds %q, %v; want the synced new bytes", b, err)
	}

	dir := t.TempDir()
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	if err := os.WriteFile(filepath.Join(dir, "floor.tmp"), []byte("left by a crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dirsync.WriteFile(vfs.Default, dir, "floor", []byte("x")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "floor"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("floor: %v %v, want mode 0600", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "floor.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the temporary file is left: %v", err)
	}

	// A umask that takes the owner's write bit still gives 0600: stores
	// that check their files' modes (capability) would refuse a 0400 file.
	syscall.Umask(0o277)
	if err := dirsync.WriteFile(vfs.Default, dir, "floor", []byte("y")); err != nil {
		t.Fatal(err)
	}
	fi, err = os.Stat(filepath.Join(dir, "floor"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("floor under umask 0277: %v %v, want mode 0600", fi, err)
	}
}
